"""Projected epoch times on GPUs nobody has measured yet: a roofline model of a run's workload profile.

A run records its workload profile (``trainbench.measure.workload``): per op class (``matmul_attention``,
``conv``, ``elementwise_norm``, ``scan``, ``optimizer``) and dtype, the FLOPs, the bytes read and written
and the number of kernel-running ops of one epoch. On a target GPU (``conf/hardware/<name>.yaml``) each
(class, dtype) row takes a roofline time

    max(FLOPs / (peak TFLOP/s of the dtype x compute efficiency of the class),
        bytes / (memory GB/s x bandwidth efficiency))

plus ``ops x launch cost`` (the host's cost of dispatching and launching one eager kernel, which no GPU
makes faster). The constants are :data:`COMPUTE_EFFICIENCY`, :data:`BANDWIDTH_EFFICIENCY` and
:data:`LAUNCH_US`, each a (low, nominal, high) triple, documented in docs/projection.md; adjust them from
measurements as they arrive. The range of a projection: low = every row at its best efficiency and the
launch cost fully hidden behind device work (per row max instead of sum); high = worst efficiencies and
the launch cost added.

Three methods, stated in every projection (the rows themselves: analysis/projection.py):

- ``measured``: a run measured that GPU (the analysed sweep or another sweep of the experiment): its time.
- ``scaled from <gpu>``: the sweep was measured on a catalogued GPU: measured time x model(target) /
  model(measured GPU), so the model only has to get the ratio right (Habitat's idea, much cruder); range
  ``SCALED_RANGE`` around it.
- ``roofline from cpu profile`` (or ``... from <device> profile`` for an uncatalogued GPU): the pure
  model, no calibration; its range is the efficiency/launch range above.

Dtypes: matmuls run at the peak of their dtype (fp32 matmuls at the fp32 peak: PyTorch leaves TF32 off
for matmuls by default; fp32 convolutions at the TF32 peak where there is one: cuDNN allows TF32 by
default). A GPU without bf16 (T4, V100) projects a bf16 run as an fp16 run (the same tensor cores) and
says so; a GPU with neither cannot project it.

This module reads only the run metrics and ``conf/hardware/*.yaml``; it never imports ``measure/``.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from trainbench.analysis.gpus import GpuSpec
from trainbench.core.vocab import ParamKey, Summary

CLASSES = ("matmul_attention", "conv", "elementwise_norm", "scan", "optimizer")

#: Fraction of the dtype's dense peak each op class reaches: (low, nominal, high). Large GEMMs reach
#: 60-80% of peak; small training matmuls far less. Elementwise/optimizer/scan FLOPs are not counted by
#: the flop counter (their rows are bandwidth-bound), so their compute efficiency rarely matters.
COMPUTE_EFFICIENCY: dict[str, tuple[float, float, float]] = {
    "matmul_attention": (0.30, 0.55, 0.80),
    "conv": (0.25, 0.45, 0.70),
    "elementwise_norm": (0.10, 0.25, 0.50),
    "scan": (0.05, 0.15, 0.30),
    "optimizer": (0.10, 0.25, 0.50),
}
#: Fraction of the datasheet memory bandwidth a streaming kernel reaches: (low, nominal, high).
BANDWIDTH_EFFICIENCY: tuple[float, float, float] = (0.50, 0.70, 0.85)
#: Host cost of one eager op (Python + dispatcher + kernel launch), microseconds: (low, nominal, high).
#: Eager PyTorch spends about 5-15 us per op on a modern CPU; CUDA's launch alone is ~3-5 us.
LAUNCH_US: tuple[float, float, float] = (4.0, 8.0, 15.0)
#: Range of a projection scaled from a measured GPU: (low factor, high factor) around the point.
SCALED_RANGE: tuple[float, float] = (0.75, 1.35)
#: Range allowed around a median measured on another sweep (only its median is known).
MEASURED_ELSEWHERE_RANGE: tuple[float, float] = (0.9, 1.1)
#: CUDA context and allocator headroom added to a predicted peak before comparing it with a card's memory.
CUDA_CONTEXT_MB = 500.0


# --------------------------------------------------------------------------------------------------
# workload profiles from run metrics
# --------------------------------------------------------------------------------------------------


def run_precision(params: dict[str, str]) -> str:
    """The precision a run trained in: the resolved param when present (trainer.precision=auto), else
    ``trainer.precision``; fp32 when neither is recorded."""
    # TODO(contract): the precision param keys are run-contract strings (the trainer writes them).
    for key in (ParamKey.PRECISION_RESOLVED, "precision_resolved", ParamKey.TRAINER_PRECISION):
        v = str(params.get(key, "")).strip().lower().replace("precision.", "")
        if v in ("fp32", "bf16", "fp16"):
            return v
    return "fp32"


def workload_from_metrics(metrics: dict[str, float]) -> dict[tuple[str, str], dict[str, float]] | None:
    """{(class, dtype): {flops, bytes, ops}} from a run's ``workload.<class>.<dtype>.<what>`` metrics."""
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for key, v in metrics.items():
        parts = key.split(".")
        if len(parts) != 4 or parts[0] != "workload" or parts[3] not in ("flops", "bytes", "ops"):
            continue
        if not math.isfinite(v):
            continue
        rows.setdefault((parts[1], parts[2]), {"flops": 0.0, "bytes": 0.0, "ops": 0.0})[parts[3]] = float(v)
    return rows or None


def workload_of_runs(runs: list[Any]) -> tuple[dict[tuple[str, str], dict[str, float]] | None, int]:
    """The median profile over a model's runs (they profile the same workload), and how many had one."""
    profiles = [w for w in (workload_from_metrics(r.metrics) for r in runs) if w]
    if not profiles:
        return None, 0
    keys = sorted({k for p in profiles for k in p})
    out = {}
    for k in keys:
        out[k] = {what: median([p.get(k, {}).get(what, 0.0) for p in profiles]) for what in ("flops", "bytes",
                                                                                              "ops")}
    return out, len(profiles)


def totals(workload: dict[tuple[str, str], dict[str, float]]) -> dict[str, float]:
    return {what: sum(r[what] for r in workload.values()) for what in ("flops", "bytes", "ops")}


# --------------------------------------------------------------------------------------------------
# the roofline model
# --------------------------------------------------------------------------------------------------


def peak_for(spec: GpuSpec, cls: str, dtype: str) -> tuple[float | None, str | None]:
    """(TFLOP/s a row of ``dtype`` runs at on ``spec``, a note when it is substituted) - None: cannot."""
    p = spec.peak_tflops
    if dtype == "bf16":
        if "bf16" in p:
            return p["bf16"], None
        if "fp16" in p:
            return p["fp16"], f"{spec.name} has no bf16: bf16 work projected as fp16 (train with " \
                              "trainer.precision=fp16 there)"
        return None, f"{spec.name} has neither bf16 nor fp16 tensor cores: a bf16 run cannot be projected"
    if dtype == "fp16":
        if "fp16" in p:
            return p["fp16"], None
        return p.get("fp32"), f"{spec.name} has no fp16 tensor cores: fp16 work at the fp32 peak"
    if cls == "conv" and dtype == "fp32" and "tf32" in p:
        return p["tf32"], None  # cuDNN allows TF32 convolutions by default
    return p.get("fp32"), None


def roofline_ms(workload: dict[tuple[str, str], dict[str, float]], spec: GpuSpec,
                level: str = "nominal") -> tuple[float | None, list[str]]:
    """Epoch time (ms) on ``spec`` at the ``low``/``nominal``/``high`` assumptions, and notes.

    ``low`` (the fast end): best efficiencies, launch hidden behind device work (max per row).
    ``nominal``: nominal efficiencies, launch added. ``high`` (the slow end): worst efficiencies, launch added.
    None when some work cannot run on the GPU (no dtype for it).
    """
    i = {"low": 2, "nominal": 1, "high": 0}[level]  # fast end = high efficiency
    launch = LAUNCH_US[{"low": 0, "nominal": 1, "high": 2}[level]] * 1e-6
    bw = spec.memory_gbps * 1e9 * BANDWIDTH_EFFICIENCY[i]
    total, notes = 0.0, []
    for (cls, dtype), row in sorted(workload.items()):
        flops, nbytes, ops = row.get("flops", 0.0), row.get("bytes", 0.0), row.get("ops", 0.0)
        t_compute = 0.0
        if flops > 0:
            peak, note = peak_for(spec, cls, dtype)
            if note and note not in notes:
                notes.append(note)
            if peak is None:
                return None, notes
            t_compute = flops / (peak * 1e12 * COMPUTE_EFFICIENCY.get(cls, COMPUTE_EFFICIENCY["elementwise_norm"])[i])
        device = max(t_compute, nbytes / bw)
        host = ops * launch
        total += max(device, host) if level == "low" else device + host
    return total * 1e3, notes


def project(workload: dict[tuple[str, str], dict[str, float]], spec: GpuSpec,
            measured_on: GpuSpec | None = None, measured_ms: float | None = None,
            profiled_on: str = "cpu") -> dict[str, Any] | None:
    """One projection: {epoch_ms, epoch_ms_range, method, notes}; None when the GPU cannot run it."""
    point, notes = roofline_ms(workload, spec, "nominal")
    low, _ = roofline_ms(workload, spec, "low")
    high, _ = roofline_ms(workload, spec, "high")
    if point is None or low is None or high is None:
        return {"epoch_ms": None, "epoch_ms_range": None, "method": "cannot run", "notes": notes}
    if measured_on is not None and measured_ms is not None:
        base, _ = roofline_ms(workload, measured_on, "nominal")
        if base:
            ms = measured_ms * point / base
            return {"epoch_ms": ms, "epoch_ms_range": [ms * SCALED_RANGE[0], ms * SCALED_RANGE[1]],
                    "method": f"scaled from {measured_on.name}", "notes": notes}
    label = "cpu" if profiled_on.lower().startswith("cpu") else profiled_on
    return {"epoch_ms": point, "epoch_ms_range": [low, high], "method": f"roofline from {label} profile",
            "notes": notes}


# --------------------------------------------------------------------------------------------------
# memory fit
# --------------------------------------------------------------------------------------------------


def memory_need_mb(runs: list[Any]) -> tuple[float | None, str]:
    """Device memory the model needs at its batch size: the memory predictor's reserved peak, else a
    measured VRAM peak (x the allocator's 1.1), plus :data:`CUDA_CONTEXT_MB`; None on a CPU run with no
    prediction."""
    for key, factor, what in ((Summary.PREDICTED_PEAK_VRAM_RESERVED_MB, 1.0, "predicted reserved peak"),
                              (Summary.PREDICTED_PEAK_VRAM_MB, 1.1, "predicted peak x 1.1"),
                              (Summary.PEAK_VRAM_MB_MAX, 1.1, "measured VRAM peak x 1.1")):
        vals = [r.metrics[key] for r in runs if math.isfinite(r.metrics.get(key, math.nan))]
        if vals:
            return max(vals) * factor + CUDA_CONTEXT_MB, f"{what} + {CUDA_CONTEXT_MB:g} MB CUDA context"
    return None, "no memory prediction or VRAM measurement"


def fits(need_mb: float | None, spec: GpuSpec) -> bool | None:
    if need_mb is None or not spec.vram_mb:
        return None
    return need_mb <= float(spec.vram_mb)
