"""Harness overhead per model and tracking cost per epoch, each measured side by side in one process.

- ``harness_overhead.<model>``: the instrumented epoch loop (:func:`run_epochs`: memory probe, one scalar
  read, buffered MLflow logging into a temporary sqlite store) against the same model's epochs run bare
  (``train_epoch``, ``eval_epoch`` for a model that validates as run_epochs does, and the device sync only), alternating blocks of ``PER_BLOCK`` epochs so that machine noise
  hits both alike (4 blocks; 1 with ``--quick``, a smoke run, which skips mamba2 on a CPU); median per-epoch
  time of each. Supervised models train on a short file (an epoch of
  one or two optimiser steps), so the harness's fixed per-epoch cost weighs more than at the default
  size: ``harness_overhead_default_size.<model>`` puts the harness's own milliseconds per epoch against
  the default data's epoch (bare epoch time x default samples per epoch / bench samples per epoch).
  The writer flushes every 10 epochs as in a run (``trainer.flush_every``), across blocks: run_epochs'
  own flush on exit is deferred (:class:`_RunRateSink`), so blocks do not flush more often than a run.
- ``harness_self_reported.<model>``: the harness's own figure (``harness_overhead_pct``: time in harness
  code / loop time), median over the instrumented blocks.
- ``tracking_cost.*``: ms per epoch of the buffered writer (log_batch every 10 epochs) against one
  ``log_metric`` call per metric per epoch, same 10 metrics, same store, interleaved, median of repeats.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from types import SimpleNamespace

import torch
from common import Result, bench_device, build_model, cpu_threads

from trainbench.core.trainable import Evaluates
from trainbench.measure.hardware import hardware_label
from trainbench.measure.harness import run_epochs
from trainbench.measure.timing import EpochTimer
from trainbench.models.registry import REGISTRY
from trainbench.tracking.connection import connect
from trainbench.tracking.writer import RunWriter

PER_BLOCK = 3
#: Skipped by ``--quick`` on a CPU (``make bench`` measures it), with the reason.
QUICK_CPU_SKIP = {"mamba2": "its short-file epoch takes ~1 s on one thread, run 7 times"}
#: shorter still than common.SMALL_DATA: an epoch of one or two steps (the harness cost is per epoch)
HARNESS_DATA = {"mamba2": 900, "tft": 800, "tlob": 800}


class _RunRateSink:
    """The writer, minus run_epochs' flush on exit: it still flushes every ``flush_every`` epochs itself."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.step = 0

    def log_epoch(self, step: int, metrics: dict[str, float]) -> None:
        self.writer.log_epoch(self.step, metrics)
        self.step += 1

    def flush(self) -> None:
        pass


def _bare(trainable, device: torch.device, n: int) -> list[float]:
    """``n`` epochs without the harness: ``train_epoch``, then ``eval_epoch`` for a model that validates (the
    harness runs and times both every epoch), each epoch's wall ms."""
    timer, out = EpochTimer(device), []
    evaluate = trainable.eval_epoch if isinstance(trainable, Evaluates) else None
    for _ in range(n):
        timer.start()
        trainable.train_epoch()
        if evaluate is not None:
            evaluate()
        out.append(timer.stop())
    return out


def _model(name: str, tmp: str, client, exp: str, device: torch.device, blocks: int) -> list[Result]:
    label = hardware_label(device)
    n_bars = HARNESS_DATA.get(name)
    tr = build_model(name, f"{tmp}/data", device, n_bars=n_bars)
    default_spe = tr.samples_per_epoch if n_bars is None else build_model(name, f"{tmp}/data", device).samples_per_epoch
    _bare(tr, device, 1)  # warm
    bare, inst, own = [], [], []
    writer = RunWriter(client, exp, flush_every=10)
    writer.start(f"bench-{name}", {"kind": "bench"}, {})
    sink = _RunRateSink(writer)
    for _ in range(blocks):
        bare.extend(_bare(tr, device, PER_BLOCK))
        t0 = time.perf_counter()
        r = run_epochs(tr, device, PER_BLOCK, 0, sink=sink)
        inst.append((time.perf_counter() - t0) * 1e3 / PER_BLOCK)
        own.append(r.summary["harness_overhead_pct"])
    writer.end("completed")
    b, i, pct = statistics.median(bare), statistics.median(inst), statistics.median(own)
    harness_ms = pct / 100 * i  # the harness's own ms per epoch (self-measured)
    default_epoch_ms = b * default_spe / tr.samples_per_epoch
    details = {"bare_ms": b, "instrumented_ms": i, "harness_ms_per_epoch": harness_ms, "self_reported_pct": pct,
               "epochs_each": len(bare), "blocks": blocks, "samples_per_epoch": tr.samples_per_epoch,
               "data": f"{n_bars} bars/events (short file)" if n_bars else "default data"}
    return [
        Result(f"harness_overhead.{name}", 100 * (i - b) / b, "%", "<= 1%", label, details),
        Result(f"harness_self_reported.{name}", pct, "%", "<= 1%", label),
        Result(f"harness_overhead_default_size.{name}", 100 * harness_ms / default_epoch_ms, "%", "<= 1%", label,
               {"default_epoch_ms_est": default_epoch_ms, "samples_per_epoch_default": default_spe}),
    ]


def _tracking(client, exp: str, quick: bool) -> list[Result]:
    metrics = {k: 1.0 for k in ("epoch_time_ms", "loss", "grad_norm", "samples_per_s", "peak_host_mb",
                                "loss_td", "q_mean", "reward_mean", "episode_reward", "epsilon")}
    n, repeats = 20, 2 if quick else 3
    buffered, naive = [], []
    for rep in range(repeats):
        w = RunWriter(client, exp, flush_every=10)
        w.start(f"bench-buffered-{rep}", {"kind": "bench"}, {})
        t0 = time.perf_counter()
        for step in range(n):
            w.log_epoch(step, metrics)
        w.flush()
        buffered.append((time.perf_counter() - t0) * 1e3 / n)
        w.end("completed")
        run_id = client.create_run(exp, run_name=f"bench-naive-{rep}").info.run_id
        t0 = time.perf_counter()
        for step in range(n):
            for k, v in metrics.items():
                client.log_metric(run_id, k, v, step=step)
        naive.append((time.perf_counter() - t0) * 1e3 / n)
    b, nv = statistics.median(buffered), statistics.median(naive)
    label = "cpu (host: sqlite store)"
    return [Result("tracking_cost.buffered_ms_per_epoch", b, "ms", "", label),
            Result("tracking_cost.naive_ms_per_epoch", nv, "ms", "", label),
            Result("tracking_cost.speedup", nv / b, "x", "", label,
                   {"metrics_per_epoch": len(metrics), "epochs": n, "repeats": repeats})]


def run(quick: bool) -> list[Result]:
    device = bench_device()
    results: list[Result] = []
    with cpu_threads(1), tempfile.TemporaryDirectory(prefix="tb-bench-harness-") as tmp:
        tracking = SimpleNamespace(uri=f"sqlite:///{tmp}/mlflow.db", experiment="bench",
                                   artifact_location=f"{tmp}/artifacts", timeout_s=5)
        client, exp = connect(tracking)
        for name in REGISTRY.names():
            if quick and device.type == "cpu" and name in QUICK_CPU_SKIP:
                results += [Result(f"{figure}.{name}", float("nan"), "%", "", hardware_label(device),
                                   {"skipped": f"--quick on a CPU: {QUICK_CPU_SKIP[name]} (make bench measures it)"})
                            for figure in ("harness_overhead", "harness_self_reported", "harness_overhead_default_size")]
                continue
            results.extend(_model(name, tmp, client, exp, device, 1 if quick else 4))
        results.extend(_tracking(client, exp, quick))
    return results
