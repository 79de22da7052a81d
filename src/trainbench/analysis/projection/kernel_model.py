"""The kernel-level model of one epoch on a GPU: precision conversion, kernel groups, chains, host overlap.

Input: a run's workload profile, either the device-neutral ``workload_profile.json`` (schema 1, written by
measure/workload.py; format in docs/projection.md) or, for runs recorded before it, the aggregate
``workload.<class>.<dtype>.<flops|bytes|ops>`` metrics (the old coarse profile: one kernel size per class and
dtype, no chains, no syncs; said in the notes).

1. **Precision** (:func:`resolve_precision`): ``auto`` is what ``trainer.precision=auto`` and the GPU
   profile's ``trainer.tf32=true`` resolve on the target (core/precision.py's rule): bf16 on compute
   capability >= 8.0, fp16 on 7.x, fp32 below; TF32 for fp32 matmuls and convolutions on >= 8.0. Explicit
   ``fp32`` (TF32 off), ``tf32`` (fp32 with TF32 on), ``bf16``, ``fp16`` are projected as asked (bf16 on a
   GPU without it as fp16, said in the notes). Kernel groups that autocast lowers (``autocast: lower``) are
   converted to the target's dtype (FLOPs at that dtype's peak, bytes scaled by the element size: halved
   from fp32 to bf16/fp16); the rest keep their dtype.
2. **Kernels** (:func:`group_ms`): per group, ``count`` kernels of the group's mean size each take
   ``max(compute at the efficiency its size reaches, memory time, minimum kernel time)`` with the curves
   calibrated per GPU (analysis/projection/calibration.py); a matmul group at tf32, bf16 or fp16 with the
   tensor-core curve of its dtype, which also falls with the FLOPs per element a kernel moves (a small inner
   dimension), moved to the GPU's peak and balance where it was fitted on another.
3. **Chains**: ``count x steps x step time``, the step a fitted latency floor of its pass and cell plus its
   bytes and FLOPs at fitted fractions of the bandwidth and peak (calibration.chain_step_ms, fitted on
   DeepBench's V100 cuDNN RNN layers; widened on other GPUs).
4. **Host and device overlap**: the host issues ``ops`` eager ops at :data:`LAUNCH_US` each while the GPU
   runs; the larger of host and device time wins, plus ``syncs x`` :data:`SYNC_US` (each sync drains the
   queue and waits for a device-to-host copy).

The range: per group the point divided by the held-out p90 and p10 of predicted/measured kernel times of
the calibration GPU and op class (the truth is prediction / ratio), times the extra widening of a GPU
calibrated from a nearest architecture, with the minimum kernel time, launch and sync costs at their
low/high assumptions; a tensor-core group's compute time by its dtype's held-out ratios (and the transfer
rule's where its curve comes from another generation), its memory time by the memory curve's. Errors are
taken as fully correlated within a group (the conservative sum). Each range rule rests on held-out splits of
the calibration data (docs/projection.md, "How the range rules were derived").

No torch, no MLflow: the floors (docs/architecture.md) keep analysis free of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict

from trainbench.analysis.projection import calibration as cal
from trainbench.analysis.projection.artifacts import (
    Chain,
    ChainCalibration,
    ChainStep,
    Constants,
    GpuFit,
    KernelGroup,
    TensorCalibration,
    TensorCoreConstants,
    TensorFit,
    WorkloadProfile,
)
from trainbench.analysis.projection.gpus import GpuSpec
from trainbench.core import precision as precision_rules
from trainbench.core.precision import ProjectionPrecision, parse_capability

ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
#: Host cost of one eager op (Python + dispatcher + launch), us: (low, nominal, high). Assumed (eager
#: PyTorch spends 5-15 us per op on a modern CPU; CUDA's launch alone is 3-5 us), not from the table.
LAUNCH_US = (4.0, 8.0, 15.0)
#: Cost of one host sync (device-to-host copy latency after the queue drains), us: (low, nominal, high).
SYNC_US = (5.0, 10.0, 30.0)
#: Classes whose compute runs on matmul units (the calibrated matmul curve; conv has no public data).
MATMUL_CLASSES = ("matmul_attention", "conv")


@dataclass
class Target:
    """What a projection projects on one GPU: the precision label, the mixed dtype (None: fp32), TF32."""

    precision: str
    mixed: str | None
    tf32: bool
    notes: list[str] = field(default_factory=list)
    cannot: str | None = None


def resolve_precision(spec: GpuSpec, asked: str = "auto", tf32_setting: bool = True) -> Target:
    """The precision a projection on ``spec`` projects. ``auto``: what trainer.precision=auto and
    trainer.tf32=``tf32_setting`` resolve there (trainbench.core.precision's rule, on the catalogue's
    capability); otherwise as asked, substituted (with a note) when the GPU lacks it."""
    if asked not in set(ProjectionPrecision):
        raise ValueError(f"projection.precision={asked!r} is invalid: use one of {', '.join(ProjectionPrecision)}")
    cc = parse_capability(spec.compute_capability)
    peaks = spec.peak_tflops
    has_tf32 = "tf32" in peaks and precision_rules.has_tf32("cuda", cc)
    if asked == "auto":
        resolved, _ = precision_rules.auto_precision("cuda", cc)
        lacking = None
        while resolved != "fp32" and resolved not in peaks:  # the entry lists no peak for it: the next one down
            lacking, resolved = lacking or resolved, "fp16" if resolved == "bf16" else "fp32"
        t = Target(resolved, None if resolved == "fp32" else resolved,
                   bool(tf32_setting) and has_tf32 and resolved == "bf16")
        t.notes.append(f"precision auto on {spec.name} (capability {spec.compute_capability}): {t.precision}"
                       + (f" (its entry lists no {lacking} peak)" if lacking else "")
                       + (", TF32 on for fp32 matmuls" if t.tf32 else ""))
        return t
    if asked == "fp32":
        return Target("fp32", None, False, ["fp32 with TF32 off"])
    if asked == "tf32":
        if has_tf32:
            return Target("tf32", None, True, ["fp32 with TF32 on for matmuls and convolutions"])
        return Target("fp32", None, False, [f"{spec.name} has no TF32 (capability {spec.compute_capability} "
                                            "< 8.0): projected at fp32"])
    if asked == "bf16":
        if "bf16" in peaks:
            return Target("bf16", "bf16", has_tf32, ["bf16 autocast" + (", TF32 on" if has_tf32 else "")])
        if "fp16" in peaks:
            return Target("fp16", "fp16", False, [f"{spec.name} has no bf16: bf16 work projected as fp16 (train "
                                                  "with trainer.precision=fp16 there)"])
        return Target("bf16", "bf16", False, cannot=f"{spec.name} has neither bf16 nor fp16 tensor cores: a bf16 "
                                                   "run cannot be projected")
    if "fp16" in peaks:
        return Target("fp16", "fp16", has_tf32, ["fp16 autocast with a GradScaler"])
    return Target("fp32", None, False, [f"{spec.name} has no fp16 tensor cores: projected at fp32"])


# --------------------------------------------------------------------------------------------------
# profiles: the new format and the old aggregate rows, as kernel groups and chains
# --------------------------------------------------------------------------------------------------


def profile_from_aggregate(rows: dict[tuple[str, str], dict[str, float]]) -> WorkloadProfile:
    """The old aggregate ``workload.*`` rows as a (coarse) profile: one group per (class, dtype) of mean
    size, autocast ``lower`` for matmul/conv rows (what autocast lowers), ``promote`` for the rest; no
    chains and no syncs recorded."""
    kernels: list[KernelGroup] = []
    for (cls, dtype), r in sorted(rows.items()):
        ops = float(r.get("ops", 0.0) or 0.0)
        if ops <= 0 and not r.get("flops") and not r.get("bytes"):
            continue
        kernels.append({"cls": cls, "dtype": dtype, "autocast": "lower" if cls in MATMUL_CLASSES else "promote",
                        "count": max(ops, 1.0), "flops": float(r.get("flops", 0.0) or 0.0),
                        "bytes": float(r.get("bytes", 0.0) or 0.0)})
    return {"schema": 1, "profiled_on": "cpu", "precision": "fp32", "complete": True, "incomplete_reasons": [],
            "kernels": kernels, "chains": [], "coarse": True,
            "host": {"ops": sum(float(r.get("ops", 0.0) or 0.0) for r in rows.values()), "syncs": 0.0}}


def check_profile(profile: WorkloadProfile) -> str | None:
    """Why ``profile`` cannot be used to project (None: it can)."""
    if not isinstance(profile, dict) or profile.get("schema") != 1:
        return f"workload profile schema {profile.get('schema') if isinstance(profile, dict) else '?'} " \
               "is not 1"
    if not profile.get("complete", True):
        why = "; ".join(profile.get("incomplete_reasons") or []) or "no reason given"
        return f"incomplete workload profile ({why})"
    return None


# --------------------------------------------------------------------------------------------------
# one GPU's calibrated constants
# --------------------------------------------------------------------------------------------------


@dataclass
class Calibrated:
    """The curves and error percentiles a catalogue GPU is projected with."""

    gpu: str | None  # the measured GPU of the table (None: uncalibrated defaults)
    relation: str
    matmul: dict[str, float]
    memory: dict[str, float]
    held_out: dict[str, dict[str, float]]
    widen: tuple[float, float]
    tensor_core: TensorCoreConstants
    note: str | None
    smallest: dict[str, float | None] = field(default_factory=dict)
    #: how this entry's tensor-core curves are calibrated: {gpu, relation, widen, note, by_dtype?}
    tensor: TensorCalibration = field(default_factory=lambda: TensorCalibration())
    #: the chains' per-step calibration (constants.json's ``chains``)
    chains: ChainCalibration = field(default_factory=lambda: ChainCalibration())
    #: a second source's fp32 GEMMs of this very board (constants.json's ``fp32_check``: {board, n, p10, p90,
    #: ...}): not fitted to the curve, but their error sets the fp32 matmul range's width (it spans both);
    #: None where no second source measured the board
    board_check: dict[str, float | str] | None = None

    def tensor_for(self, dtype: str) -> TensorCalibration:
        """How this entry's ``dtype`` tensor-core curve is calibrated: {gpu, relation, widen, note, dtype?}: the
        entry's ``tensor`` calibration, or its ``by_dtype`` one for a dtype that GPU was not measured in (A100
        TF32: the H100's; ``dtype``: the fitted dtype moved, where it is another)."""
        return (self.tensor.get("by_dtype") or {}).get(dtype) or self.tensor

    def tensor_fit(self, dtype: str) -> TensorFit | None:
        """The fitted tensor-core entry (curve, peak, bandwidth, held-out error, smallest kernel) whose curve a
        ``dtype`` kernel uses (bf16 and fp16 stand for each other), from the GPU it is calibrated on."""
        how = self.tensor_for(dtype)
        fits = (self.tensor_core.get("gpus") or {}).get(how.get("gpu") or "", {})
        dtype = how.get("dtype") or dtype
        return fits.get(dtype) or fits.get(cal.TENSOR_CURVE_OF.get(dtype, dtype))

    def tensor_extrapolated(self, dtype: str, flops: float, nbytes: float) -> bool:
        """Is a tensor-core kernel smaller, or of fewer FLOPs per element, than any fitted for its dtype?"""
        t = self.tensor_fit(dtype)
        if t is None:
            return True
        eb = cal.ELEMENT_BYTES.get(dtype, 4)
        return flops < t["smallest"]["flops"] or \
            float(cal.per_element(flops, nbytes, eb)) < t["smallest"]["per_element"]

    def extrapolated(self, cls: str, flops: float, nbytes: float) -> bool:
        """Is a kernel of this size below the smallest one fitted for its class (or uncalibrated)?"""
        if self.gpu is None:
            return False  # already at the uncalibrated width
        if cls in MATMUL_CLASSES:
            lo = self.smallest.get("matmul_attention_flops")
            return lo is None or flops < lo
        lo = self.smallest.get("elementwise_norm_bytes")
        return lo is None or nbytes < lo

    def ratio_bounds(self, cls: str, tensor_dtype: str | None = None) -> tuple[float, float]:
        """(p10, p90) of held-out predicted/measured for the class's calibration class (a tensor-core kernel:
        of its dtype's tensor-core fit)."""
        if tensor_dtype is not None and cls in MATMUL_CLASSES:
            t = self.tensor_fit(tensor_dtype)
            if t is not None:
                return t["held_out"]["p10"], t["held_out"]["p90"]
        key = "matmul_attention" if cls in MATMUL_CLASSES else "elementwise_norm"
        s = self.held_out.get(key)
        if not s:
            return 1.0, 1.0
        return s["p10"], s["p90"]


def calibrated(spec: GpuSpec, constants: Constants | None = None) -> Calibrated:
    c = constants or cal.load_constants()
    m = c.get("catalogue", {}).get(spec.name)
    if not m or m["gpu"] not in c["gpus"]:
        u = c["uncalibrated"]
        return Calibrated(None, "uncalibrated", {k: u[k] for k in ("e_max", "f_half", "k")},
                          {k: u[k] for k in ("b_max", "b_half", "kb")}, {}, tuple(u["widen"]), c["tensor_core"],
                          f"{spec.name} has no calibration: default curves, range widened "
                          f"x{u['widen'][0]:g}-{u['widen'][1]:g}", tensor=_uncalibrated_tensor(c),
                          chains=c.get("chains") or {})
    g = c["gpus"][m["gpu"]]
    held = dict(g["held_out"])
    if "elementwise_norm" not in held:  # e.g. the H100: the donor of its memory curve scores it
        for donor in c["gpus"].values():
            if donor["classes"]["elementwise_norm"] == g["classes"]["elementwise_norm"] and \
                    "elementwise_norm" in donor["held_out"]:
                held["elementwise_norm"] = donor["held_out"]["elementwise_norm"]
                break
    # The fit's held-out error is measured on its own table (one harness, one software stack, the board it was
    # measured on). Where another source measured this entry's own board (DeepBench's V100 SXM2 and T4), the
    # fp32 matmul range spans that error too: the truth the projection answers for is the user's stack.
    check = next(({**v, "board": b} for b, v in (c.get("fp32_check") or {}).items() if v.get("entry") == spec.name),
                 None)
    if check is not None and "matmul_attention" in held:
        mm = dict(held["matmul_attention"])
        mm["p10"], mm["p90"] = min(mm["p10"], check["p10"]), max(mm["p90"], check["p90"])
        held["matmul_attention"] = mm
    return Calibrated(m["gpu"], m["relation"], g["classes"]["matmul_attention"]["fp32"],
                      g["classes"]["elementwise_norm"], held, tuple(m.get("widen", (1.0, 1.0))), c["tensor_core"],
                      m.get("note"), _smallest(c, g), dict(m.get("tensor") or _uncalibrated_tensor(c)),
                      c.get("chains") or {}, check)


def _uncalibrated_tensor(c: Constants) -> TensorCalibration:
    """A GPU without a tensor-core calibration: the default fitted GPU's curves, at the uncalibrated width."""
    tc = c.get("tensor_core") or {}
    fitted = sorted(tc.get("gpus") or {})
    gpu = tc.get("default_gpu") if tc.get("default_gpu") in fitted else (fitted[0] if fitted else None)
    return {"gpu": gpu, "relation": "uncalibrated", "widen": list(c["uncalibrated"]["widen"]),
            "note": "no tensor-core calibration for this entry"}


def _smallest(c: Constants, g: GpuFit) -> dict[str, float | None]:
    out = dict(g.get("smallest") or {})
    if out.get("elementwise_norm_bytes") is None:  # a borrowed memory curve: its donor's smallest kernel
        for donor in c["gpus"].values():
            if donor["classes"]["elementwise_norm"] == g["classes"]["elementwise_norm"] and \
                    (donor.get("smallest") or {}).get("elementwise_norm_bytes"):
                out["elementwise_norm_bytes"] = donor["smallest"]["elementwise_norm_bytes"]
                break
    return out


class _KernelEpochRequired(TypedDict):
    epoch_ms: float | None
    epoch_ms_range: list[float] | None
    notes: list[str]
    range_basis: str | None


class KernelEpoch(_KernelEpochRequired, total=False):
    """:func:`epoch_ms`'s answer: the epoch (ms, range), its device, host and sync parts, the device time per class,
    the notes and range basis, and the calibration it rests on; only the first four where the target cannot run
    the profile (``epoch_ms`` None)."""

    device_ms: float
    host_ms: float
    sync_ms: float
    by_class: dict[str, float]
    #: the device time (ms, the point) per part: each class's kernel groups, and each chain by what it is
    #: (``chain lstm``, ``chain lstm_backward``, ...), so a chain's time is apart from its class's kernels
    by_part: dict[str, float]
    calibration_gpu: str | None
    calibration_relation: str


class KernelModelAssumptions(TypedDict):
    """:func:`projection_assumptions`: the kernel model's stated constants and its calibration's provenance
    (report.json's ``projection_assumptions``, before the projection adds its own)."""

    model: str
    launch_us: list[float]
    sync_us: list[float]
    min_kernel_ms: list[float]
    chain_step: dict[str, ChainStep]
    calibration: CalibrationSource


class CalibrationSource(TypedDict):
    """Where the kernel model's constants come from: the per-kernel table's repository, commit and date, the range
    percentiles, the tensor-core rule and sources, the chains' source, and per catalogue entry the measured GPU and
    relation its curves come from."""

    source: str
    commit: str
    retrieved: str
    range_percentiles: list[int]
    tensor_core: str
    tensor_core_source: str
    tensor_core_sources: list[str]
    chains_source: str | None
    catalogue: dict[str, dict[str, str | dict[str, str] | None]]


# --------------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------------


def _dtype_at(group: KernelGroup | Chain, target: Target) -> str:
    """The dtype a group computes in on the target."""
    if group.get("autocast") == "lower":
        return target.mixed or "fp32"
    return str(group.get("dtype", "fp32"))


def _peak(spec: GpuSpec, cls: str, dtype: str, target: Target) -> tuple[float, str]:
    """(TFLOP/s, unit: 'fp32' | 'tensor') of a kernel of ``cls`` in ``dtype`` on ``spec``."""
    p = spec.peak_tflops
    if dtype in ("bf16", "fp16"):
        if cls in MATMUL_CLASSES:
            tensor = p.get(dtype) or p.get("fp16")  # bf16 on a GPU without it: its fp16 tensor cores
            return (tensor, "tensor") if tensor else (p["fp32"], "fp32")
        return p["fp32"], "fp32"  # elementwise work in half precision runs on the CUDA cores
    if cls in MATMUL_CLASSES and target.tf32 and "tf32" in p:
        return p["tf32"], "tensor"
    return p["fp32"], "fp32"


def _tensor_dtype(dtype: str, target: Target) -> str:
    """The tensor-core dtype a matmul kernel computing in ``dtype`` runs in (fp32 with TF32 on: tf32)."""
    return "tf32" if dtype in ("fp32", "tf32") else dtype


def _curve(c: Calibrated, spec: GpuSpec, unit: str, peak: float, tensor_dtype: str | None = None) -> dict[str, float]:
    if unit == "fp32":
        return c.matmul
    t = c.tensor_fit(tensor_dtype or "bf16")
    if t is None:
        raise ValueError(f"no tensor-core calibration for {tensor_dtype} in constants.json: rerun "
                         "scripts/calibrate_projection.py")
    # the fitted GPU's curve at this GPU's peak and balance (calibration.transfer_tensor)
    return cal.transfer_tensor(t["curve"], t["peak_tflops"], t["memory_gbps"], peak, spec.memory_gbps,
                               cal.ELEMENT_BYTES.get(tensor_dtype or "bf16", 2))


def _kernel(flops: float, nbytes: float, peak: float, spec: GpuSpec, cmp: dict[str, float], c: Calibrated,
            t_min: float, compute: bool) -> float:
    return float(cal.kernel_ms(flops, nbytes, peak, spec.memory_gbps, cmp if compute and flops > 0 else None,
                               c.memory, t_min))


@dataclass
class _Device:
    """The device time of an epoch as its groups and chains add up: (low, point, high) ms, the point per class, and
    what the range basis and notes say about them."""

    ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    by_class: dict[str, float] = field(default_factory=dict)
    by_part: dict[str, float] = field(default_factory=dict)
    converted: dict[str, float] = field(default_factory=dict)
    tensor_used: set[str] = field(default_factory=set)
    extrapolated: set[str] = field(default_factory=set)
    chain_basis: set[str] = field(default_factory=set)

    def add(self, cls: str, lo: float, mid: float, hi: float, part: str | None = None) -> None:
        self.ms[0] += lo
        self.ms[1] += mid
        self.ms[2] += hi
        self.by_class[cls] = self.by_class.get(cls, 0.0) + mid
        self.by_part[part or cls] = self.by_part.get(part or cls, 0.0) + mid


def _add_chain(acc: _Device, ch: Chain, c: Calibrated, spec: GpuSpec, target: Target) -> None:
    """A chain of dependent steps: count x steps x its per-step cost (calibration.fit_chains), its range by the
    per-step fit's held-out ratios and the widening of another generation."""
    count = ch["count"] * ch["steps"]
    if count <= 0:
        return
    dtype = _dtype_at(ch, target)
    peak, unit = _peak(spec, ch["cls"], dtype, target)
    unit = "tensor" if unit == "tensor" else "fp32"
    step, (p10, p90), (w_lo, w_hi), why = _chain_step(c, spec, ch, unit)
    flops = count * ch["flops_per_step"]
    nbytes = count * ch["bytes_per_step"] * ELEMENT_BYTES.get(dtype, 4) / ELEMENT_BYTES.get(str(ch.get("dtype", "fp32")), 4)
    mid = float(cal.chain_step_ms(flops / count, nbytes / count, peak, spec.memory_gbps, step, unit)) * count
    acc.add(ch["cls"], mid / p90 * w_lo * c.widen[0], mid, mid / p10 * w_hi * c.widen[1], f"chain {ch.get('what', '?')}")
    acc.chain_basis.add(why)


def _add_group(acc: _Device, g: KernelGroup, c: Calibrated, spec: GpuSpec, target: Target) -> None:
    """A group of ``count`` kernels of its mean size: each max(compute, memory, minimum kernel time) on the
    target's dtype; its range by the held-out ratios of its class (a tensor-core group: of its dtype's fit on the
    compute time, of the memory curve on the memory time), widened where calibrated from elsewhere or below the
    fitted sizes."""
    count, flops, nbytes = g["count"], g["flops"], g["bytes"]
    if count <= 0:
        return
    t_lo, t_mid, t_hi = cal.MIN_KERNEL_MS_RANGE[0], cal.MIN_KERNEL_MS, cal.MIN_KERNEL_MS_RANGE[1]
    cls = g["cls"]
    dtype = _dtype_at(g, target)
    scale = ELEMENT_BYTES.get(dtype, 4) / ELEMENT_BYTES.get(str(g.get("dtype", "fp32")), 4)
    if scale != 1.0:
        key = f"{cls} {g.get('dtype')}->{dtype}"
        acc.converted[key] = acc.converted.get(key, 0.0) + flops
    nbytes *= scale
    peak, unit = _peak(spec, cls, dtype, target)
    td = _tensor_dtype(dtype, target) if unit == "tensor" else None
    if td:
        acc.tensor_used.add(td)
    cmp = _curve(c, spec, unit, peak, td)
    f1, b1 = flops / count, nbytes / count
    compute = cls in MATMUL_CLASSES or flops > 0
    ts = [max(_kernel(f1, b1, peak, spec, cmp, c, t, compute), t) * count for t in (t_lo, t_mid, t_hi)]
    p10, p90 = c.ratio_bounds(cls, td)
    w_lo, w_hi = c.widen
    if td:
        tw = c.tensor_for(td).get("widen") or (1.0, 1.0)
        w_lo, w_hi = w_lo * tw[0], w_hi * tw[1]
    if (c.tensor_extrapolated(td, f1, b1) if td else c.extrapolated(cls, f1, b1)):
        w_lo, w_hi = w_lo * cal.EXTRAPOLATION_WIDEN[0], w_hi * cal.EXTRAPOLATION_WIDEN[1]
        acc.extrapolated.add(f"{cls} ({td})" if td else cls)
    if td and f1 > 0:
        # a tensor-core kernel: the curve's error moves its compute time only; its memory time keeps the memory
        # curve's error (a memory-bound GEMM is not made faster or slower by the tensor-core fit)
        mp10, mp90 = c.ratio_bounds("elementwise_norm")
        compute_ms = float(cal.compute_ms(f1, peak, cmp, b1))
        memory_ms = float(cal.memory_ms(b1, spec.memory_gbps, c.memory))
        lo = max(compute_ms / p90 * w_lo, memory_ms / mp90 * c.widen[0], t_lo) * count
        hi = max(compute_ms / p10 * w_hi, memory_ms / mp10 * c.widen[1], t_hi) * count
        acc.add(cls, lo, ts[1], hi)
    else:
        acc.add(cls, ts[0] / p90 * w_lo, ts[1], ts[2] / p10 * w_hi)


def epoch_ms(profile: WorkloadProfile, spec: GpuSpec, target: Target,
             constants: Constants | None = None) -> KernelEpoch:
    """{epoch_ms, epoch_ms_range, device_ms, host_ms, sync_ms, notes, range_basis, by_class, by_part} of ``profile``
    on ``spec`` at ``target``; epoch_ms None when the target cannot run it."""
    notes = list(target.notes)
    if target.cannot:
        return {"epoch_ms": None, "epoch_ms_range": None, "notes": notes + [target.cannot], "range_basis": None}
    c = calibrated(spec, constants)
    if c.note:
        notes.append(c.note)
    acc = _Device()
    for g in profile.get("kernels", []):
        _add_group(acc, g, c, spec, target)
    for ch in profile.get("chains", []):
        _add_chain(acc, ch, c, spec, target)
    dev = acc.ms
    ops = float((profile.get("host") or {}).get("ops", 0.0) or 0.0)
    syncs = float((profile.get("host") or {}).get("syncs", 0.0) or 0.0)
    host = [ops * u * 1e-3 for u in LAUNCH_US]
    sync = [syncs * u * 1e-3 for u in SYNC_US]
    total = [max(host[i], dev[i]) + sync[i] for i in range(3)]
    if acc.converted:
        notes.append(f"converted from the {profile.get('precision', 'fp32')} profile: " + ", ".join(sorted(acc.converted)))
    elif target.mixed:
        notes.append(f"nothing in the profile is lowered by {target.mixed} autocast")
    if profile.get("coarse"):
        notes.append("old coarse profile (aggregate workload.* metrics: one kernel size per class and dtype, "
                     "autocast assumed for matmul/conv rows only, no chains, no syncs)")
    notes.append(f"device {dev[1]:.0f} ms, host {host[1]:.0f} ms (overlapped: the larger wins), syncs {sync[1]:.0f} ms")
    basis = _range_basis(c, acc.tensor_used) + "".join(f"; {b}" for b in sorted(acc.chain_basis))
    if acc.extrapolated:
        basis += (f"; {', '.join(sorted(acc.extrapolated))} kernels smaller than any fitted: widened "
                  f"x{cal.EXTRAPOLATION_WIDEN[0]:g}-{cal.EXTRAPOLATION_WIDEN[1]:g}")
    return {"epoch_ms": total[1], "epoch_ms_range": [total[0], total[2]], "device_ms": dev[1], "host_ms": host[1],
            "sync_ms": sync[1], "by_class": acc.by_class, "by_part": acc.by_part, "notes": notes, "range_basis": basis,
            "calibration_gpu": c.gpu, "calibration_relation": c.relation}


def _chain_step(c: Calibrated, spec: GpuSpec, chain: Chain, unit: str) -> tuple[ChainStep, tuple[float, float],
                                                                                 tuple[float, float], str]:
    """(step constants {floor_ms, eff}, held-out (p10, p90), widening, range-basis words) of one chain of the
    profile on ``spec``: the fit of its pass (``what`` ending in ``_backward``: backward) and cell (rnn_relu as
    rnn_tanh; an unknown cell the largest floor) on DeepBench's V100 cuDNN layers, widened on a GPU whose tensor
    cores are not calibrated on that V100 (the per-step latency of another generation is not measured)."""
    chains = c.chains
    if not chains:
        raise ValueError("constants.json has no chain calibration: rerun scripts/calibrate_projection.py")
    what = str(chain.get("what", ""))
    fit = chains["backward" if what.endswith("_backward") else "forward"]
    cell = what.removesuffix("_backward").replace("rnn_relu", "rnn_tanh")
    floor = fit["floor_ms"].get(cell, max(fit["floor_ms"].values()))
    held = fit["held_out"]
    same = c.tensor_for("fp16").get("gpu") == chains["gpu"]
    widen = (1.0, 1.0) if same else tuple(chains["widen"])
    why = (f"chains: held-out p10-p90 of the per-step fit on DeepBench's cuDNN RNN layers ({chains['gpu']})"
           + ("" if same else f", the same floor on this GPU widened x{widen[0]:g}-{widen[1]:g} ({chains['widen_why']})"))
    return {"floor_ms": floor, "beff": fit["beff"], "eff": fit["eff"]}, (held["p10"], held["p90"]), widen, why


def _range_basis(c: Calibrated, tensor_used: set[str]) -> str:
    lo, hi = cal.RANGE_PERCENTILES
    if c.gpu is None:
        s = f"uncalibrated defaults, widened x{c.widen[0]:g}-{c.widen[1]:g}"
    else:
        s = f"held-out p{lo}-p{hi} of predicted/measured kernel times on {c.gpu} (NeuSight, fp32)"
        if c.relation != "measured":
            s += f", {c.relation}"
        if c.widen != (1.0, 1.0):
            s += f", widened x{c.widen[0]:g}-{c.widen[1]:g}"
            if c.note:
                s += f" ({c.note})"
        if c.board_check is not None:
            b = c.board_check
            s += (f"; fp32 GEMMs also span a second source's measurement of this board (DeepBench, {b['board']}, "
                  f"{b['n']} GEMMs, which set this range's width: p{lo}-p{hi} {b['p10']:.2f}-{b['p90']:.2f})")
    devices = (c.tensor_core.get("devices") or {})
    for td in sorted(tensor_used):
        t = c.tensor_for(td)
        fitted = t.get("dtype") or td
        where = devices.get(t.get("gpu"), {}).get("source") or "per-shape measurements"
        s += f"; tensor-core {td} GEMMs: held-out p{lo}-p{hi} of {where} on {t.get('gpu')}"
        if fitted != td:
            s += f" ({fitted})"
        if t.get("relation") != "measured":
            s += f", {t.get('relation')}"
        w = t.get("widen") or [1.0, 1.0]
        if tuple(w) != (1.0, 1.0):
            s += f", widened x{w[0]:g}-{w[1]:g}" + (f" ({t['note']})" if t.get("note") else "")
    return s + "; launch, sync and minimum kernel time at their assumed low/high"


def scale_range(point: float, target: KernelEpoch, base: KernelEpoch) -> list[float]:
    """Range of ``point`` = measured x target/base: the log-widths of both model ranges in quadrature
    (independent errors of the two GPUs' calibrations)."""
    def widths(p: KernelEpoch) -> tuple[float, float]:
        lo, hi = p["epoch_ms_range"]
        return math.log(p["epoch_ms"] / lo), math.log(hi / p["epoch_ms"])

    t_lo, t_hi = widths(target)
    b_lo, b_hi = widths(base)
    return [point * math.exp(-math.hypot(t_lo, b_hi)), point * math.exp(math.hypot(t_hi, b_lo))]


def projection_assumptions(constants: Constants | None = None) -> KernelModelAssumptions:
    """The report's ``projection_assumptions`` of the kernel model: stated constants and the calibration."""
    c = constants or cal.load_constants()
    return {"model": "kernel groups: max(compute at the calibrated efficiency of their size, memory, minimum "
                     "kernel time); chains with a per-step floor; host and device overlapped plus syncs",
            "launch_us": list(LAUNCH_US), "sync_us": list(SYNC_US),
            "min_kernel_ms": [cal.MIN_KERNEL_MS_RANGE[0], cal.MIN_KERNEL_MS, cal.MIN_KERNEL_MS_RANGE[1]],
            "chain_step": {p: {"floor_ms": f["floor_ms"], "beff": f["beff"], "eff": f["eff"]}
                           for p, f in (c.get("chains") or {}).items() if p in cal.CHAIN_PASSES},
            "calibration": {"source": c["source"]["repository"], "commit": c["source"]["commit"],
                            "retrieved": c["source"]["retrieved"], "range_percentiles": c["range_percentiles"],
                            "tensor_core": c["tensor_core"]["rule"],
                            "tensor_core_source": c["tensor_core"]["source"]["repository"],
                            "tensor_core_sources": [s["repository"] for s in c["tensor_core"].get("sources") or []],
                            "chains_source": (c.get("chains") or {}).get("source"),
                            "catalogue": {k: {"gpu": v["gpu"], "relation": v["relation"],
                                              "tensor": (v.get("tensor") or {}).get("relation"),
                                              **({"tensor_by_dtype": {d: b["relation"] for d, b in
                                                                      v["tensor"]["by_dtype"].items()}}
                                                 if (v.get("tensor") or {}).get("by_dtype") else {})}
                                          for k, v in c["catalogue"].items()}}}
