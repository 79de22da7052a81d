"""``trainer.compile=true`` (torch.compile) against eager, side by side, under a time budget.

For each model in ``MODELS`` a subprocess (so that a slow or failing compilation cannot stall or break
the suite; it is killed at ``BUDGET_S``) builds the model twice from its real config, eager and with
``BuildContext(compile=True)``, times the first compiled epoch (compilation included) and then the two
interleaved, median of repeats:

- ``compile.<m>.speedup``: eager epoch time / compiled epoch time (> 1: compiled is faster);
- ``compile.<m>.compile_s``: first compiled epoch minus a steady compiled epoch (the compilation cost
  that ``trainer.warmup_epochs`` must absorb), cold: the subprocess gets an empty inductor cache
  (``TORCHINDUCTOR_CACHE_DIR``); later runs on the same machine reuse the on-disk cache and pay less.

On a GPU, DQN and PPO are also measured with ``trainer.cuda_graphs`` (their update replayed as one CUDA
graph), alone and with compile: ``compile.<m>.cuda_graphs_speedup`` and
``compile.<m>.compile_cuda_graphs_speedup`` (eager epoch time / that variant's, interleaved;
:func:`rl_graph_variants`, also run by ``make gpu-check``). On a CPU there are no CUDA graphs: they are
reported as skipped with that reason.

On a CPU, torch.compile (inductor) needs a C++ compiler and takes tens of seconds to minutes per model;
only DQN is measured there (TLOB took ~3 minutes to compile on a shared 2-core machine), and not in
``--quick``. On a GPU every model is measured. A model that fails or runs out of budget is reported
in ``details`` with value NaN and the reason, never silently dropped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    SMALL_DATA,
    Result,
    bench_device,
    build_model,
    cpu_threads,
    interleaved,
    sync_fn,
)

from trainbench.measure.hardware import hardware_label

HERE = Path(__file__).resolve().parent
BUDGET_S = 240


def _child(name: str, quick: bool) -> dict:
    device = bench_device()
    sync = sync_fn(device)
    with cpu_threads(1), tempfile.TemporaryDirectory(prefix="tb-bench-compile-") as tmp:
        n_bars = SMALL_DATA.get(name)
        eager = build_model(name, tmp, device, n_bars=n_bars)
        comp = build_model(name, tmp, device, n_bars=n_bars, compile=True)
        import time

        sync()
        t0 = time.perf_counter()
        comp.train_epoch()
        sync()
        first = time.perf_counter() - t0
        samples: dict[str, list[float]] = {}
        t = interleaved({"eager": eager.train_epoch, "compiled": comp.train_epoch}, repeats=3, sync=sync,
                        samples=samples, warm={"compiled"})
        return {"eager_s": t["eager"], "compiled_s": t["compiled"], "first_compiled_epoch_s": first,
                "repeats": len(samples["eager"]), "device": hardware_label(device),
                "samples_per_epoch": eager.samples_per_epoch}


#: The RL update variants side by side: BuildContext switches per name.
RL_VARIANTS = {"eager": {}, "compile": {"compile": True}, "cuda_graphs": {"cuda_graphs": True},
               "compile_cuda_graphs": {"compile": True, "cuda_graphs": True}}


def rl_graph_variants(name: str, device, repeats: int = 3) -> dict:
    """Epoch seconds of ``name`` (dqn or ppo) per :data:`RL_VARIANTS`, interleaved, median of ``repeats``.

    Needs CUDA. Each variant first runs two untimed epochs (compilation, graph capture).
    """
    import torch

    if device.type != "cuda":
        return {"skipped": f"CUDA graphs need a CUDA device; this is {device.type}"}
    sync = sync_fn(device)
    with tempfile.TemporaryDirectory(prefix="tb-bench-graphs-") as tmp:
        builds = {k: build_model(name, tmp, device, **kw) for k, kw in RL_VARIANTS.items()}
        for m in builds.values():
            m.train_epoch()
            m.train_epoch()
        torch.cuda.synchronize()
        t = interleaved({k: m.train_epoch for k, m in builds.items()}, repeats=repeats, sync=sync,
                        warm=set(builds))
    return {**{f"{k}_epoch_s": v for k, v in t.items()},
            **{f"{k}_speedup": t["eager"] / t[k] for k in RL_VARIANTS if k != "eager"},
            "repeats": repeats, "samples_per_epoch": builds["eager"].samples_per_epoch,
            "device": hardware_label(device)}


def run(quick: bool) -> list[Result]:
    device = bench_device()
    from trainbench.models.registry import REGISTRY

    models = ["dqn"] if device.type == "cpu" else REGISTRY.names()
    label = hardware_label(device) if device.type == "cuda" else "cpu (1 thread)"
    if quick and device.type == "cpu":
        return [Result("compile.dqn.speedup", math.nan, "x", device=label,
                       details={"skipped": "--quick on a CPU (torch.compile takes ~0.5-1 min for DQN)"})]
    out = []
    for name in models:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
        cache = tempfile.mkdtemp(prefix="tb-inductor-")
        env["TORCHINDUCTOR_CACHE_DIR"] = cache  # a cold compile, as a machine's first run pays it
        try:
            p = subprocess.run([sys.executable, __file__, name], cwd=HERE, env=env, capture_output=True, text=True,
                               timeout=BUDGET_S)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, RuntimeError, json.JSONDecodeError, IndexError) as e:
            shutil.rmtree(cache, ignore_errors=True)
            why = f"over the {BUDGET_S}s budget" if isinstance(e, subprocess.TimeoutExpired) else str(e)[:300]
            out.append(Result(f"compile.{name}.speedup", math.nan, "x", device=label,
                              details={"skipped": f"torch.compile not measured: {why}"}))
            continue
        shutil.rmtree(cache, ignore_errors=True)
        out.append(Result(f"compile.{name}.speedup", r["eager_s"] / r["compiled_s"], "x", device=r["device"],
                          details=r))
        out.append(Result(f"compile.{name}.compile_s", r["first_compiled_epoch_s"] - r["compiled_s"], "s",
                          device=r["device"], details={"first_compiled_epoch_s": r["first_compiled_epoch_s"]}))
    for name in (s.name for s in REGISTRY.specs() if s.cuda_graphs):
        if device.type != "cuda":
            out.append(Result(f"compile.{name}.cuda_graphs_speedup", math.nan, "x", device=label,
                              details={"skipped": "trainer.cuda_graphs needs a CUDA device"}))
            continue
        try:
            r = rl_graph_variants(name, device, repeats=3 if quick else 5)
        except Exception as e:  # reported, never silently dropped
            out.append(Result(f"compile.{name}.cuda_graphs_speedup", math.nan, "x", device=label,
                              details={"skipped": f"failed: {e!r}"[:300]}))
            continue
        for k in ("cuda_graphs", "compile_cuda_graphs"):
            out.append(Result(f"compile.{name}.{k}_speedup", r[f"{k}_speedup"], "x", device=r["device"], details=r))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    print(json.dumps(_child(sys.argv[1], quick=False)))
