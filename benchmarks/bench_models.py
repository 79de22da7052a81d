"""Every registered model: throughput, achieved FLOP/s (MFU on a GPU), the fast-path switches side by side,
and host syncs inside the epoch.

Per model, built from its real config (``conf/model/<name>.yaml``; supervised models on a shorter
synthetic file so that an epoch is a few optimiser steps: their per-step cost is that of the default
size, see ``common.SMALL_DATA``):

- ``models.<m>.samples_per_s``: training samples per second of whole ``train_epoch`` calls at the defaults
  (fp32, ``optimizer_impl=auto``), median of repeats; ``models.<m>.epoch_s_default_data`` is the epoch
  time that implies on the default data (``samples_per_epoch`` of a default-size build / rate).
- ``models.<m>.gflops``: FLOPs of one epoch counted by ``torch.utils.flop_counter`` (matmul, conv,
  attention: a lower bound; :func:`trainbench.measure.flops.count_flops`) / the median epoch time.
  On a GPU also ``models.<m>.mfu`` = achieved / the device's dense peak from ``conf/hardware``.
- ``precision.<m>.{bf16,fp16}_speedup``: fp32 epoch time / that precision's (``trainer.precision``),
  interleaved with fp32 in one loop; > 1 is faster.
- ``optimizer.<m>.<impl>_speedup``: ``trainer.optimizer_impl`` side by side against the per-parameter
  for-loop: on CPU foreach (the default there); on a GPU fused (the default there) and foreach.
- ``syncs.<m>.host_syncs_per_epoch``: tensor reads on the host from trainbench code inside one epoch
  (and, on a GPU, every synchronising op via ``torch.cuda.set_sync_debug_mode``); target 0.

Variants slower than a time budget (4 s of timed epochs; 1 s with ``--quick``, so that mamba2's 1.5-s
variants run once there) are measured fewer times; ``details.repeats`` says how many. ``trainer.compile`` is measured by ``bench_compile.py`` (it needs a bounded subprocess).
"""

from __future__ import annotations

import statistics
import tempfile
import time

import torch
from common import (
    SMALL_DATA,
    Result,
    bench_device,
    build_model,
    cpu_threads,
    interleaved,
    sync_fn,
)

from trainbench.measure.flops import count_flops, peak_tflops
from trainbench.measure.hardware import hardware_label
from trainbench.measure.host_sync import forbid_host_syncs
from trainbench.models.registry import REGISTRY


def _variants(device: torch.device) -> dict[str, dict[str, str]]:
    base = {"fp32": {}, "bf16": {"precision": "bf16"}, "fp16": {"precision": "fp16"},
            "forloop": {"optimizer_impl": "forloop"}}
    if device.type == "cuda":  # the default (auto) is fused on CUDA: foreach is the third contender there
        base["foreach"] = {"optimizer_impl": "foreach"}
    return base


def _model(name: str, tmp: str, device: torch.device, quick: bool) -> list[Result]:
    label = hardware_label(device)
    sync = sync_fn(device)
    n_bars = SMALL_DATA.get(name)
    built = {v: build_model(name, tmp, device, n_bars=n_bars, **kw) for v, kw in _variants(device).items()}
    base = built["fp32"]

    # one epoch, counted and watched at once (also base's warm-up); the others warm up in interleaved()
    with forbid_host_syncs(raise_on_sync=False) as syncs:
        flops = count_flops(base.train_epoch)
        sync()

    samples: dict[str, list[float]] = {}
    t = interleaved({v: tr.train_epoch for v, tr in built.items()}, repeats=2 if quick else 3, sync=sync,
                    budget_s=1.0 if quick else 4.0, samples=samples, warm={"fp32"})
    spe, bs = base.samples_per_epoch, base.batch_size
    default_spe = spe if n_bars is None else build_model(name, tmp, device).samples_per_epoch
    rate = spe / t["fp32"]
    sizes = {"samples_per_epoch": spe, "steps_per_epoch": spe // bs if n_bars else None, "batch_size": bs,
             "data": f"{n_bars} bars/events (short file)" if n_bars else "default data"}
    rates = {v: round(spe / s, 1) for v, s in t.items()}
    reps = {v: len(s) for v, s in samples.items()}
    out = [
        Result(f"models.{name}.samples_per_s", rate, "samples/s", device=label,
               details={**sizes, "epoch_s": t["fp32"], "repeats": reps["fp32"], "precision": "fp32",
                        "optimizer_impl": "auto", "num_params": base.info().get("num_params")}),
        Result(f"models.{name}.epoch_s_default_data", default_spe / rate, "s", device=label,
               details={"samples_per_epoch_default": default_spe}),
        Result(f"models.{name}.gflops", flops.total / t["fp32"] / 1e9, "GFLOP/s", device=label,
               details={"flops_per_epoch": flops.total, "flops_per_sample": flops.total / spe,
                        "by_op": flops.by_op, "counted": flops.note}),
    ]
    if device.type == "cuda":
        peak, src = peak_tflops(label, "fp32")
        if peak:
            out.append(Result(f"models.{name}.mfu", 100 * flops.total / t["fp32"] / (peak * 1e12), "%",
                              device=label, details={"peak_tflops": peak, "peak_from": src,
                                                     "note": "fp32 run against the dense fp32 peak"}))
    for p in ("bf16", "fp16"):
        out.append(Result(f"precision.{name}.{p}_speedup", t["fp32"] / t[p], "x", device=label,
                          details={"fp32_s": t["fp32"], f"{p}_s": t[p], "repeats": reps[p],
                                   "samples_per_s": rates}))
    for impl in ("foreach", "fused") if device.type == "cuda" else ("foreach",):
        mine = t.get(impl, t["fp32"])  # the default (auto) is fused on CUDA, foreach elsewhere
        out.append(Result(f"optimizer.{name}.{impl}_speedup", t["forloop"] / mine, "x", device=label,
                              details={"forloop_s": t["forloop"], f"{impl}_s": mine,
                                       "vs": "optimizer_impl=forloop", "repeats": reps["forloop"]}))
    out.append(Result(f"syncs.{name}.host_syncs_per_epoch", float(len(syncs)), "count", target="0", device=label,
                      details={"calls": syncs[:10],
                               "how": "Tensor.item/tolist/cpu/numpy/bool/float/int from trainbench code"
                                      + (" + torch.cuda.set_sync_debug_mode" if device.type == "cuda" else "")}))
    return out


def run(quick: bool) -> list[Result]:
    device = bench_device()
    out: list[Result] = []
    with cpu_threads(1), tempfile.TemporaryDirectory(prefix="tb-bench-models-") as tmp:
        for name in REGISTRY.names():
            t0 = time.perf_counter()
            out.extend(_model(name, tmp, device, quick))
            out[-1].details["model_bench_s"] = round(time.perf_counter() - t0, 1)
    # one line that a reader can quote: the slowest and fastest precision effect
    speed = [r.value for r in out if r.name.endswith("bf16_speedup")]
    if speed:
        out.append(Result("precision.bf16_speedup_median", statistics.median(speed), "x", device=hardware_label(device)))
    return out
