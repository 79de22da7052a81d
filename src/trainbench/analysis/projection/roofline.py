"""Projected epoch times on GPUs nobody has measured yet, from a run's workload profile.

The model itself is analysis/projection/kernel_model.py (precision conversion, kernel groups at their calibrated
efficiency, chains, host/device overlap), its constants analysis/projection/calibration.py (fitted by
scripts/calibrate_projection.py to published kernel measurements). This module reads the profile of a
model's runs (the ``workload_profile.json`` artifact through ``RunRecord.workload_profile``, else the old
aggregate ``workload.*`` metrics) and makes one projection:

- ``scaled from <gpu>``: the sweep was measured on a catalogued GPU: measured time x model(target at the
  asked precision) / model(measured GPU at the run's precision), range from both GPUs' calibration;
- ``roofline from cpu profile`` (or ``... from <device> profile``): the kernel model alone (a roofline per
  kernel group), its range from the
  calibration's held-out error percentiles.

Documented in docs/projection.md. Never imports ``measure/`` or torch.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any, TypedDict

from trainbench.analysis.logged import logged_int
from trainbench.analysis.projection import kernel_model
from trainbench.analysis.projection.artifacts import Constants, WorkloadProfile
from trainbench.analysis.projection.gpus import GpuSpec
from trainbench.analysis.projection.rows import MicroBatchFit
from trainbench.core.vocab import ParamKey, Summary

CLASSES = ("matmul_attention", "conv", "elementwise_norm", "scan", "optimizer")

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


# the projection
# --------------------------------------------------------------------------------------------------


def profile_of_runs(runs: list[Any]) -> tuple[WorkloadProfile | None, int, str | None]:
    """(profile, runs that had one, why not usable) of a model's runs: the first ``workload_profile.json``
    (``RunRecord.workload_profile``) when one exists, else the median aggregate metrics as the old coarse
    profile (kernel_model.profile_from_aggregate)."""
    new = [p for p in (getattr(r, "workload_profile", None) for r in runs) if isinstance(p, dict)]
    if new:
        usable = [p for p in new if kernel_model.check_profile(p) is None]
        if usable:
            return usable[0], len(new), None
        return None, len(new), kernel_model.check_profile(new[0])
    agg, n = workload_of_runs(runs)
    if agg is None:
        return None, 0, None
    return kernel_model.profile_from_aggregate(agg), n, None


def _as_profile(workload: WorkloadProfile | dict[tuple[str, str], dict[str, float]]) -> WorkloadProfile:
    if isinstance(workload, dict) and workload.get("schema") == 1:
        return workload
    return kernel_model.profile_from_aggregate(workload)


class _ProjectedRequired(TypedDict):
    epoch_ms: float | None
    epoch_ms_range: list[float] | None
    precision: str
    notes: list[str]
    range_basis: str | None


class Projected(_ProjectedRequired, total=False):
    """:func:`project`'s answer: the epoch and its range, the precision projected at, the notes, what the range
    rests on and how the figure was had (``method``)."""

    method: str


def project(workload: WorkloadProfile | dict[tuple[str, str], dict[str, float]], spec: GpuSpec, measured_on: GpuSpec | None = None, measured_ms: float | None = None,
            profiled_on: str = "cpu", precision: str = "auto", measured_precision: str = "fp32",
            tf32: bool = True, constants: Constants | None = None) -> Projected:
    """One projection: {epoch_ms, epoch_ms_range, method, precision, notes, range_basis}.

    ``workload``: a schema-1 profile or the old aggregate rows. ``precision``: auto|fp32|tf32|bf16|fp16
    (auto: what trainer.precision=auto and trainer.tf32=``tf32`` resolve on ``spec``). ``measured_on`` /
    ``measured_ms``: the measured GPU and its epoch time, which the projection scales (at the run's
    ``measured_precision``)."""
    profile = _as_profile(workload)
    target = kernel_model.resolve_precision(spec, precision, tf32)
    p = kernel_model.epoch_ms(profile, spec, target, constants)
    out: Projected = {"epoch_ms": p["epoch_ms"], "epoch_ms_range": p["epoch_ms_range"], "precision": target.precision,
           "notes": p["notes"], "range_basis": p.get("range_basis")}
    if p["epoch_ms"] is None:
        return {**out, "method": "cannot run"}
    if measured_on is not None and measured_ms is not None:
        run_asked = "tf32" if measured_precision == "fp32" and tf32 else measured_precision
        base = kernel_model.epoch_ms(profile, measured_on, kernel_model.resolve_precision(measured_on, run_asked, tf32),
                                     constants)
        if base["epoch_ms"]:
            ms = measured_ms * p["epoch_ms"] / base["epoch_ms"]
            return {**out, "epoch_ms": ms, "epoch_ms_range": kernel_model.scale_range(ms, p, base),
                    "method": f"scaled from {measured_on.name}",
                    "range_basis": f"both GPUs' calibration in quadrature: {p['range_basis']} | "
                                   f"{measured_on.name}: {base['range_basis']}",
                    "notes": p["notes"] + [f"scaled per kernel group from {measured_on.name} measured at "
                                           f"{measured_precision}"]}
    label = "cpu" if profiled_on.lower().startswith("cpu") else profiled_on
    return {**out, "method": f"roofline from {label} profile"}


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


def fitting_micro_batch(runs: list[Any], need_mb: float | None, spec: GpuSpec) -> MicroBatchFit | None:
    """Where a model is predicted not to fit ``spec`` at its batch: the largest micro-batch that fits and the
    gradient accumulation that keeps the optimiser batch, from the runs' predicted peak split into a fixed part
    (data, weights, gradients, optimiser state, workspace, CUDA context) and activations taken as linear in the
    micro-batch (``predicted_activations_mb``); ``micro_batch`` 0 where even the fixed part does not fit. None
    where it fits, or nothing says how the peak splits. An estimate: the epoch time at that micro-batch is not
    projected (more, smaller steps cost more host time)."""
    if need_mb is None or not spec.vram_mb or need_mb <= float(spec.vram_mb):
        return None
    for r in runs:
        act, peak = r.metrics.get(Summary.PREDICTED_ACTIVATIONS_MB), r.metrics.get(Summary.PREDICTED_PEAK_VRAM_MB)
        reserved = r.metrics.get(Summary.PREDICTED_PEAK_VRAM_RESERVED_MB)
        micro = (logged_int(r.params.get(ParamKey.MICRO_BATCH_SIZE), minimum=1)
                 or logged_int(r.params.get(ParamKey.BATCH_SIZE_RESOLVED), minimum=1))
        batch = logged_int(r.params.get(ParamKey.BATCH_SIZE_RESOLVED), minimum=1) or micro
        vals = (act, peak, reserved)
        if micro and batch and all(v is not None and math.isfinite(v) and v > 0 for v in vals):
            per_sample = act * (reserved / peak) / micro  # reserved MB per sample of the micro-batch
            fixed = need_mb - per_sample * micro
            fit = max(0, int((float(spec.vram_mb) - fixed) // per_sample)) if per_sample > 0 else 0
            fit = min(fit, micro)
            return {"micro_batch": fit, "grad_accum": math.ceil(batch / fit) if fit else None,
                    "fixed_mb": round(fixed, 1), "per_sample_mb": round(per_sample, 4),
                    "batch": batch}
    return None


def fits(need_mb: float | None, spec: GpuSpec) -> bool | None:
    if need_mb is None or not spec.vram_mb:
        return None
    return need_mb <= float(spec.vram_mb)
