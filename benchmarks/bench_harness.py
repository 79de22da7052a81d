"""Harness overhead per model and tracking cost per epoch, each measured side by side in one process.

- ``harness_overhead.<model>``: the instrumented epoch loop (memory probe, scalar read, buffered MLflow
  logging into a temporary store) against the same epochs run bare (train_epoch + device sync only),
  interleaved block by block so machine noise hits both alike; median per-epoch time of each. Also
  the harness's own figure (``harness_overhead_pct``: time spent in harness code / loop time).
- ``tracking_cost``: ms per epoch of the buffered writer (log_batch every 10 epochs) against one
  ``log_metric`` call per metric per epoch, same metrics, same store.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from types import SimpleNamespace

import torch
from common import Result

from trainbench.bench.harness import run_epochs
from trainbench.bench.timing import EpochTimer
from trainbench.config import compose_run, validate
from trainbench.data.loader import load_market_data
from trainbench.models.base import BuildContext
from trainbench.models.registry import REGISTRY
from trainbench.tracking.writer import RunWriter, connect


def _build(name: str, data_dir: str, device: torch.device):
    obj = validate(compose_run([f"model={name}", f"paths.data_dir={data_dir}"]))
    torch.manual_seed(0)
    data = load_market_data(obj.data, root=obj.paths.root, data_dir=obj.paths.data_dir, device=device)
    return REGISTRY.get(name).build(obj.model, data, BuildContext(device=device, seed=0))


def _bare(trainable, device, n: int) -> list[float]:
    timer, out = EpochTimer(device), []
    for _ in range(n):
        timer.start()
        trainable.train_epoch()
        out.append(timer.stop())
    return out


def run(quick: bool) -> list[Result]:
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev_label = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    results = []
    blocks, per_block = (2, 2) if quick else (5, 3)
    with tempfile.TemporaryDirectory() as tmp:
        tracking = SimpleNamespace(uri=f"sqlite:///{tmp}/mlflow.db", experiment="bench",
                                   artifact_location=f"{tmp}/artifacts", timeout_s=5)
        client, exp = connect(tracking)
        for name in REGISTRY.names():
            tr = _build(name, f"{tmp}/data", device)
            _bare(tr, device, 1)  # warm
            bare, inst, own = [], [], []
            writer = RunWriter(client, exp, flush_every=10)
            writer.start(f"bench-{name}", {"kind": "bench"}, {})
            for _ in range(blocks):
                bare.extend(_bare(tr, device, per_block))
                t0 = time.perf_counter()
                r = run_epochs(tr, device, per_block, 0, sink=writer)
                inst.append((time.perf_counter() - t0) * 1e3 / per_block)
                own.append(r.summary["harness_overhead_pct"])
            writer.end("completed")
            b, i = statistics.median(bare), statistics.median(inst)
            results.append(Result(f"harness_overhead.{name}", 100 * (i - b) / b, "%", "<= 1%", dev_label,
                                  {"bare_ms": b, "instrumented_ms": i,
                                   "self_reported_pct": statistics.median(own)}))
            results.append(Result(f"harness_self_reported.{name}", statistics.median(own), "%", "<= 1%", dev_label))

        # tracking cost: buffered log_batch vs one log_metric per metric per epoch
        metrics = {k: 1.0 for k in ("epoch_time_ms", "loss", "grad_norm", "samples_per_s", "peak_host_mb",
                                    "loss_td", "q_mean", "reward_mean", "episode_reward", "epsilon")}
        n = 20 if quick else 50
        w = RunWriter(client, exp, flush_every=10)
        w.start("bench-buffered", {"kind": "bench"}, {})
        t0 = time.perf_counter()
        for step in range(n):
            w.log_epoch(step, metrics)
        w.flush()
        buffered = (time.perf_counter() - t0) * 1e3 / n
        run_id = client.create_run(exp, run_name="bench-naive").info.run_id
        t0 = time.perf_counter()
        for step in range(n):
            for k, v in metrics.items():
                client.log_metric(run_id, k, v, step=step)
        naive = (time.perf_counter() - t0) * 1e3 / n
        results.append(Result("tracking_cost.buffered_ms_per_epoch", buffered, "ms", "", dev_label))
        results.append(Result("tracking_cost.naive_ms_per_epoch", naive, "ms", "", dev_label))
        results.append(Result("tracking_cost.speedup", naive / buffered, "x", "", dev_label,
                              {"metrics_per_epoch": len(metrics), "epochs": n}))
    return results
