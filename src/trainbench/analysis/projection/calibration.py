"""Calibration of the kernel model (analysis/projection/kernel_model.py) against published per-kernel measurements.

The table ``analysis/projection/calibration_data/kernels.csv.gz`` holds measured kernel times (the NeuSight artifact,
see its README); ``scripts/calibrate_projection.py`` fits, per measured GPU and op class, the constants of
the kernel model on a deterministic part of the table (:func:`is_held_out`: a hash of the op and its shape,
so one shape is in the same part on every GPU) and writes them with the held-out error percentiles to
``analysis/projection/calibration_data/constants.json``, which the analysis reads (:func:`load_constants`).

Kernel model of one measured kernel on GPU g (datasheet peak P FLOP/s, bandwidth B bytes/s):

    compute eff(f) = e_max / (1 + (f_half / f) ** k)          # saturating in log-size (FLOPs per kernel)
    memory  eff(b) = b_max / (1 + (b_half / b) ** kb)         # same in bytes per kernel
    t = max(f / (P * eff(f)), b / (B * eff(b)), t_min)
    measured = t + harness_ms          # (fit only) the harness's constant per-call cost
    k, kb <= 1                         # a kernel never gets faster by growing

fitted on the table's kernels (3 MB and up, the smallest about 25 us); ``t_min`` is an assumption
(:data:`MIN_KERNEL_MS`): below the table's sizes the curves are extrapolated.

Tensor-core GEMMs (tf32, bf16, fp16; bf16 and fp16 share a curve where only one is measured) are fitted on
public per-shape tables (:func:`tensor_tables`: XLA's H100 SXM and B200, DeepBench's V100 SXM2 and T4, Vidur's
A100 SXM4; see the README), with one more factor: what makes a GEMM with a small inner dimension miss the tensor-core peak (a short
main loop per output tile, operands re-read per tile, tile quantisation). The only shape a workload profile
keeps is a kernel's FLOPs and bytes, so the factor is in FLOPs per element moved, ``i = flops / (bytes /
element size)`` (``d`` for an M x d x d GEMM with a large M):

    compute eff(f, i) = e_max / (1 + (f_half / f) ** k) / (1 + (i_half / i) ** ki)

Other GPUs take a measured GPU's curve by two transfer rules (:func:`transfer_tensor`): the same fraction of
peak at the same ideal time (``f_half`` x peak ratio) and at the same machine balance (``i_half`` x the ratio
of peak FLOPs per element of bandwidth), widened where the generation differs (:func:`calibrate_tensor` scores
that transfer on every pair of measured GPUs).

Chains (a recurrent layer's dependent time steps) are fitted on DeepBench's V100 cuDNN RNN layers
(:func:`fit_chains`, :func:`chain_step_ms`): per step a latency floor per pass and cell, plus the step's bytes at
a fraction of the bandwidth, plus its FLOPs at a fraction of the fp32 or tensor-core peak.

``matmul_attention`` (linear, bmm) fits (e_max, f_half, k, t_min) with the memory curve of the same GPU's
``elementwise_norm`` fit (elementwise, layernorm, softmax: b_max, b_half, kb, t_min). Fitted on the log of
predicted/measured with a robust loss (``scipy.optimize.least_squares``, soft-L1).

Pure numpy/scipy: no torch, no MLflow.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.projection.artifacts import (
    CatalogueCalibration,
    ChainFit,
    ChainStep,
    Constants,
    GpuFit,
    KernelRow,
    MeasuredDevice,
    RnnRow,
    TensorFit,
)

DATA_DIR = Path(__file__).with_name("calibration_data")
TABLE = DATA_DIR / "kernels.csv.gz"
TENSOR_TABLE = DATA_DIR / "tensor_gemms.csv.gz"
#: Baidu DeepBench's V100 and T4 GEMMs (fp16 tensor cores, fitted; fp32, an independent check of the fp32 curves).
DEEPBENCH_TABLE = DATA_DIR / "deepbench_gemms.csv.gz"
#: DeepBench's V100 cuDNN RNN kernels (the recurrent part only): the chains' per-step cost.
RNN_TABLE = DATA_DIR / "deepbench_rnn.csv.gz"
#: Microsoft Vidur's A100 80GB fp16 LLM linear layers.
VIDUR_TABLE = DATA_DIR / "vidur_gemms.csv.gz"
CONSTANTS = DATA_DIR / "constants.json"

#: Op of the table -> op class of the workload profile.
OP_CLASS = {"linear": "matmul_attention", "bmm": "matmul_attention", "elementwise": "elementwise_norm",
            "layernorm": "elementwise_norm", "softmax": "elementwise_norm"}
#: Share of shapes held out (never fitted, only scored).
HELD_OUT_SHARE = 0.3
#: Minimum time of one GPU kernel, ms (launch to completion of a near-empty kernel: 2-5 us on NVIDIA GPUs).
#: NOT fitted: NeuSight's smallest latencies (about 25 us for an add, 50 us for a 1x58x13x141 linear, alike
#: on an A100 and a T4) are their timing harness's per-call floor, not the kernel's. The fit therefore adds a
#: constant ``harness_ms`` per GPU and class to every measured kernel and the projection leaves it out
#: (launches overlap with the host in training: kernel_model's host term). A stated assumption until a GPU
#: run (scripts/gpu_check.py) measures it; the range uses 2 and 8 us.
MIN_KERNEL_MS = 0.004
MIN_KERNEL_MS_RANGE = (0.002, 0.008)
#: Extra range factors (low, high) on a kernel group smaller than the smallest kernel fitted on its GPU:
#: the curves are extrapolated there (stated, not fitted).
EXTRAPOLATION_WIDEN = (0.5, 2.0)
#: Held-out percentiles a projection's range is built from.
RANGE_PERCENTILES = (10, 90)
#: Element bytes per dtype (tf32 is fp32 storage).
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
#: Tensor-core dtypes fitted from the tensor tables; a GPU measured in only one of bf16 and fp16 takes that curve
#: for the other (the same tensor-core rate and element size on every GPU that has both).
TENSOR_DTYPES = ("tf32", "bf16", "fp16")
TENSOR_CURVE_OF = {"tf32": "tf32", "bf16": "fp16", "fp16": "bf16"}


def same_family(a: str, b: str) -> bool:
    """Do tensor dtypes ``a`` and ``b`` share a curve (the same dtype, or bf16 and fp16)?"""
    return a == b or {a, b} == {"bf16", "fp16"}


def tensor_tables() -> list[Path]:
    """The tensor-core GEMM tables: the public one and those a GPU session's check added
    (``tensor_gemms_<entry>.csv.gz``, scripts/calibrate_projection.py --add-gpu-report)."""
    return [t for t in (TENSOR_TABLE, DEEPBENCH_TABLE, VIDUR_TABLE) if t.is_file()] + \
        sorted(DATA_DIR.glob("tensor_gemms_*.csv.gz"))


def is_held_out(op: str, shape: str) -> bool:
    """Deterministic split: the same (op, shape) is held out on every GPU, whatever the row order."""
    h = int(hashlib.sha256(f"{op}|{shape}".encode()).hexdigest()[:8], 16)
    return (h % 1000) < HELD_OUT_SHARE * 1000


def read_table(path: str | Path = TABLE) -> list[KernelRow]:
    """Rows of the kernel table: gpu, op, dtype, shape, flops, bytes, ms."""
    import csv

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    rows: list[KernelRow] = []
    for r in csv.DictReader(lines):
        rows.append({"gpu": r["gpu"], "op": r["op"], "dtype": r["dtype"], "shape": r["shape"],
                     "flops": float(r["flops"]), "bytes": float(r["bytes"]), "ms": float(r["ms"])})
    return rows


# --------------------------------------------------------------------------------------------------
# the curves
# --------------------------------------------------------------------------------------------------


def saturating(size: Any, top: float, half: float, k: float) -> Any:
    """Fraction of peak a kernel of ``size`` reaches: ``top / (1 + (half / size) ** k)``."""
    size = np.maximum(np.asarray(size, dtype=float), 1.0)
    return top / (1.0 + (half / size) ** k)


def memory_ms(nbytes: Any, bw_gbps: float, mem: dict[str, float]) -> Any:
    return np.asarray(nbytes, float) / (bw_gbps * 1e9 * saturating(nbytes, mem["b_max"], mem["b_half"],
                                                                     mem["kb"])) * 1e3


def per_element(flops: Any, nbytes: Any, elem_bytes: float) -> Any:
    """FLOPs per element a kernel moves (its inner dimension for an M x d x d GEMM with a large M)."""
    return np.asarray(flops, float) / np.maximum(np.asarray(nbytes, float) / elem_bytes, 1.0)


def compute_ms(flops: Any, peak_tflops: float, cmp: dict[str, float], nbytes: Any = None) -> Any:
    """Compute time at the curve's efficiency; a tensor-core curve (with ``i_half``) also by FLOPs per element."""
    eff = saturating(flops, cmp["e_max"], cmp["f_half"], cmp["k"])
    if "i_half" in cmp:
        eff = eff * saturating(per_element(flops, nbytes, cmp["elem_bytes"]), 1.0, cmp["i_half"], cmp["ki"])
    return np.asarray(flops, float) / (peak_tflops * 1e12 * eff) * 1e3


def kernel_ms(flops: Any, nbytes: Any, peak_tflops: float, bw_gbps: float, cmp: dict[str, float] | None,
              mem: dict[str, float], t_min_ms: float) -> Any:
    """Time of one kernel: max(compute, memory, minimum kernel time); no compute term when ``cmp`` is None."""
    t = np.maximum(memory_ms(nbytes, bw_gbps, mem), t_min_ms)
    if cmp is not None:
        f = np.asarray(flops, float)
        t = np.maximum(t, np.where(f > 0, compute_ms(np.maximum(f, 1.0), peak_tflops, cmp, nbytes), 0.0))
    return t


def transfer_tensor(curve: dict[str, float], peak_from: float, bw_from: float, peak_to: float, bw_to: float,
                    elem_bytes_to: float | None = None) -> dict[str, float]:
    """A tensor-core curve fitted at one (GPU, dtype) (peak ``peak_from`` TFLOP/s, ``bw_from`` GB/s, the curve's
    ``elem_bytes``) on another: the same fraction of peak at the same ideal time (``f_half`` x peak ratio) and
    at the same machine balance in FLOPs per element (``i_half`` x the ratio of peak x element bytes /
    bandwidth)."""
    eb_from = curve["elem_bytes"]
    eb_to = eb_from if elem_bytes_to is None else elem_bytes_to
    out = dict(curve)
    out["f_half"] = curve["f_half"] * peak_to / peak_from
    out["i_half"] = curve["i_half"] * (peak_to * eb_to / bw_to) / (peak_from * eb_from / bw_from)
    out["elem_bytes"] = eb_to
    return out


# --------------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------------


def _fit(resid_fn: Any, x0: list[float], lo: list[float], hi: list[float]) -> np.ndarray:
    from scipy.optimize import least_squares

    res = least_squares(resid_fn, np.asarray(x0, float), bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return res.x


def fit_memory(rows: list[KernelRow], bw_gbps: float) -> dict[str, float]:
    """(b_max, b_half, kb, harness_ms) of a GPU's memory-bound kernels (kb <= 1: time never falls as the
    kernel grows; harness_ms: the timing harness's constant per-call cost, fitted and left out when
    projecting)."""
    b = np.array([r["bytes"] for r in rows])
    y = np.log(np.array([r["ms"] for r in rows]))

    def resid(x):
        mem = {"b_max": x[0], "b_half": 10 ** x[1], "kb": x[2]}
        return np.log(kernel_ms(0, b, 1.0, bw_gbps, None, mem, MIN_KERNEL_MS) + 10 ** x[3]) - y

    x = _fit(resid, [0.85, 6.0, 0.8, -1.7], [0.05, 2.0, 0.1, -4.0], [1.2, 10.0, 1.0, -0.5])
    return {"b_max": float(x[0]), "b_half": float(10 ** x[1]), "kb": float(x[2]), "t_min_ms": MIN_KERNEL_MS,
            "harness_ms": float(10 ** x[3])}


def fit_compute(rows: list[KernelRow], peak_tflops: float, bw_gbps: float,
                mem: dict[str, float]) -> dict[str, float]:
    """(e_max, f_half, k, harness_ms) of a GPU's matmuls, its memory curve fixed to ``mem`` (k <= 1, and
    harness_ms, as :func:`fit_memory`)."""
    f = np.array([r["flops"] for r in rows])
    b = np.array([r["bytes"] for r in rows])
    y = np.log(np.array([r["ms"] for r in rows]))

    def resid(x):
        cmp = {"e_max": x[0], "f_half": 10 ** x[1], "k": x[2]}
        return np.log(kernel_ms(f, b, peak_tflops, bw_gbps, cmp, mem, MIN_KERNEL_MS) + 10 ** x[3]) - y

    x = _fit(resid, [0.8, 9.0, 0.7, -1.7], [0.02, 4.0, 0.1, -4.0], [1.2, 14.0, 1.0, -0.5])
    return {"e_max": float(x[0]), "f_half": float(10 ** x[1]), "k": float(x[2]), "t_min_ms": MIN_KERNEL_MS,
            "harness_ms": float(10 ** x[3])}


def fit_tensor(rows: list[KernelRow], peak_tflops: float, bw_gbps: float, mem: dict[str, float],
               elem_bytes: float) -> dict[str, float]:
    """(e_max, f_half, k, i_half, ki, harness_ms) of one GPU's tensor-core GEMMs in one dtype, its memory curve
    fixed to ``mem`` (k <= 1 as :func:`fit_compute`)."""
    f = np.array([r["flops"] for r in rows])
    b = np.array([r["bytes"] for r in rows])
    y = np.log(np.array([r["ms"] for r in rows]))

    def curve(x):
        return {"e_max": x[0], "f_half": 10 ** x[1], "k": x[2], "i_half": 10 ** x[3], "ki": x[4],
                "elem_bytes": elem_bytes}

    def resid(x):
        return np.log(kernel_ms(f, b, peak_tflops, bw_gbps, curve(x), mem, MIN_KERNEL_MS) + 10 ** x[5]) - y

    x = _fit(resid, [0.8, 9.0, 0.7, 2.0, 1.0, -2.5], [0.05, 4.0, 0.1, 0.0, 0.1, -4.0], [1.0, 14.0, 1.0, 5.0, 4.0, -1.0])
    return {**{k: float(v) for k, v in curve(x).items()}, "t_min_ms": MIN_KERNEL_MS, "harness_ms": float(10 ** x[5])}


def predict_tensor_rows(rows: list[KernelRow], fit: dict[str, float], peak_tflops: float, bw_gbps: float,
                        mem: dict[str, float]) -> np.ndarray:
    """Predicted ms of tensor-table rows with one fitted tensor curve (the harness constant added back)."""
    f = np.array([r["flops"] for r in rows])
    b = np.array([r["bytes"] for r in rows])
    return kernel_ms(f, b, peak_tflops, bw_gbps, fit, mem, fit["t_min_ms"]) + fit["harness_ms"]


def calibrate_tensor(rows: list[KernelRow], devices: dict[str, MeasuredDevice],
                     fp32: dict[str, GpuFit]) -> dict[str, dict[str, TensorFit]]:
    """Fit each (GPU, tensor dtype) of the tensor table on its training shapes (:func:`is_held_out`), score on
    the held-out ones; the memory curve is that GPU's fp32 fit (``fp32``: :func:`calibrate`'s output; the GPU's
    ``memory_from`` where it has none). Also
    scores the transfer rule where it can be tested: each dtype's curve moved to the other dtype's peak and
    bytes (:func:`transfer_tensor`) against that dtype's held-out shapes. Returns constants.json's
    ``tensor_core.gpus``."""
    out: dict[str, dict[str, TensorFit]] = {}
    for g in sorted({r["gpu"] for r in rows}):
        d = devices[g]
        mem = fp32[d.get("memory_from", g)]["classes"]["elementwise_norm"]
        entry: dict[str, TensorFit] = {}
        for dtype in TENSOR_DTYPES:
            mine = [r for r in rows if r["gpu"] == g and r["dtype"] == dtype]
            if not mine:
                continue
            train = [r for r in mine if not is_held_out(r["op"], r["shape"])]
            test = [r for r in mine if is_held_out(r["op"], r["shape"])]
            peak = d["peak_tflops"][dtype]
            fit = fit_tensor(train, peak, d["memory_gbps"], mem, ELEMENT_BYTES[dtype])
            pred = predict_tensor_rows(test, fit, peak, d["memory_gbps"], mem)
            entry[dtype] = {"curve": fit, "peak_tflops": peak, "memory_gbps": d["memory_gbps"],
                            "held_out": error_summary(pred, np.array([r["ms"] for r in test])),
                            "fit_error": error_summary(predict_tensor_rows(train, fit, peak, d["memory_gbps"], mem),
                                                       np.array([r["ms"] for r in train])),
                            "train_rows": len(train), "held_out_rows": len(test),
                            "smallest": {"flops": min(r["flops"] for r in train),
                                         "per_element": float(min(per_element(r["flops"], r["bytes"],
                                                                              ELEMENT_BYTES[dtype]) for r in train))}}
        for a, b in ((x, y) for x in entry for y in entry if x != y):
            test = [r for r in rows if r["gpu"] == g and r["dtype"] == b and is_held_out(r["op"], r["shape"])]
            moved = transfer_tensor(entry[a]["curve"], entry[a]["peak_tflops"], d["memory_gbps"],
                                    entry[b]["peak_tflops"], d["memory_gbps"], ELEMENT_BYTES[b])
            pred = predict_tensor_rows(test, moved, entry[b]["peak_tflops"], d["memory_gbps"], mem)
            entry[b].setdefault("transfer_held_out", {})[f"from {a}"] = error_summary(
                pred, np.array([r["ms"] for r in test]))
        out[g] = entry
    # across GPUs (generations), the same dtype (bf16 and fp16 alike: :func:`same_family`): one GPU's curve at
    # another's peak and balance, scored on the other's held-out shapes
    for g, h in ((x, y) for x in out for y in out if x != y):
        mem = fp32[devices[h].get("memory_from", h)]["classes"]["elementwise_norm"]
        for dtype in sorted(out[h]):
            src_dtype = dtype if dtype in out[g] else next((d for d in out[g] if same_family(d, dtype)), None)
            if src_dtype is None:
                continue
            src, dst = out[g][src_dtype], out[h][dtype]
            test = [r for r in rows if r["gpu"] == h and r["dtype"] == dtype and is_held_out(r["op"], r["shape"])]
            moved = transfer_tensor(src["curve"], src["peak_tflops"], src["memory_gbps"], dst["peak_tflops"],
                                    dst["memory_gbps"], ELEMENT_BYTES[dtype])
            pred = predict_tensor_rows(test, moved, dst["peak_tflops"], dst["memory_gbps"], mem)
            ratio = pred / np.array([r["ms"] for r in test])
            dst.setdefault("transfer_held_out", {})[f"from {g}" + (f" {src_dtype}" if src_dtype != dtype else "")] = \
                {**error_summary(pred, np.array([r["ms"] for r in test])),
                 "quantiles": [float(x) for x in np.percentile(ratio, np.arange(101))]}
    return out


#: The chain passes a profile books (its ``what`` ends in ``_backward`` for the backward) -> the RNN table's columns.
CHAIN_PASSES = {"forward": "forward", "backward": "backward_data"}
#: Cells with a per-step floor of their own (cuDNN runs a different number of kernels per step for each).
CHAIN_CELLS = ("lstm", "gru", "rnn_tanh")


def read_rnn_table(path: str | Path = RNN_TABLE) -> list[RnnRow]:
    """Rows of the RNN table (scripts/calibrate_projection.py --extract-deepbench): numbers as floats."""
    import csv

    with gzip.open(path, "rt", newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    return [RnnRow(**{k: (v if k in ("gpu", "cell", "dtype") else float(v)) for k, v in r.items()})
            for r in csv.DictReader(lines)]


def chain_step_ms(flops: Any, nbytes: Any, peak_tflops: float, bw_gbps: float, step: ChainStep, unit: str) -> Any:
    """One dependent step of a chain (a recurrent layer's time step): a per-step latency floor, plus its bytes
    (the recurrent weights re-read every step, the gates, the state) at a fitted fraction ``beff`` of the
    bandwidth, plus its FLOPs at the fitted fraction of the peak of the unit it runs on (``unit``: "fp32" CUDA
    cores or "tensor" cores). Additive: a dependent step's GEMM, its gate kernel and its weight reads do not
    overlap with the next step's."""
    return (step["floor_ms"] + np.asarray(nbytes, float) / (bw_gbps * 1e9 * step["beff"]) * 1e3
            + np.asarray(flops, float) / (peak_tflops * 1e12 * step["eff"][unit]) * 1e3)


def _chain_layer_key(r: RnnRow) -> str:
    return f"{r['cell']}:{int(r['hidden'])}x{int(r['batch'])}x{int(r['steps'])}"


def _predict_chain_layers(rows: list[RnnRow], name: str, x: np.ndarray, peaks: dict[str, float],
                          bw_gbps: float) -> np.ndarray:
    """Predicted ms of RNN-table layers (steps x step time) for pass ``name`` with parameters ``x`` (log10 floor
    per cell, beff, eff fp32, eff tensor)."""
    out = []
    for r in rows:
        unit = "fp32" if r["dtype"] == "fp32" else "tensor"
        step: ChainStep = {"floor_ms": 10 ** x[CHAIN_CELLS.index(r["cell"])], "beff": x[-3],
                "eff": {"fp32": x[-2], "tensor": x[-1]}}
        out.append(r["steps"] * float(chain_step_ms(r[f"{name}_flops_per_step"], r[f"{name}_bytes_per_step"],
                                                    peaks[unit], bw_gbps, step, unit)))
    return np.array(out)


def fit_chains(rows: list[RnnRow], peaks: dict[str, float], bw_gbps: float) -> dict[str, ChainFit]:
    """Per pass (forward, backward: DeepBench's backward-data, the dependent part; backward-weights is one GEMM over
    all steps, booked as kernels), the per-step floor per cell and the fractions of the bandwidth (``bw_gbps``)
    and of the fp32 and tensor-core peaks (``peaks``: {"fp32", "tensor"} TFLOP/s of the measured board) of the
    RNN table's layers, fitted on the training part (:func:`is_held_out` of the layer's cell and sizes, the same
    for both dtypes) and scored on the rest, per layer time: steps x step time."""
    out: dict[str, ChainFit] = {}
    train = [r for r in rows if not is_held_out("rnn", _chain_layer_key(r))]
    test = [r for r in rows if is_held_out("rnn", _chain_layer_key(r))]
    n = len(CHAIN_CELLS)
    for name, col in CHAIN_PASSES.items():
        y = np.log([r[f"{col}_ms"] for r in train])
        x = _fit(functools.partial(_chain_resid, rows=train, name=name, y=y, peaks=peaks, bw_gbps=bw_gbps),
                 [-1.7] * n + [0.5, 0.5, 0.2], [-3.0] * n + [0.01, 0.01, 0.005], [-0.5] * n + [5.0, 1.0, 1.0])
        fit = {"floor_ms": {c: float(10 ** x[i]) for i, c in enumerate(CHAIN_CELLS)}, "beff": float(x[-3]),
               "eff": {"fp32": float(x[-2]), "tensor": float(x[-1])}}
        out[name] = {**fit, "measured_as": f"{col}_ms", "train_rows": len(train), "held_out_rows": len(test),
                     "held_out": error_summary(_predict_chain_layers(test, name, x, peaks, bw_gbps),
                                               np.array([r[f"{col}_ms"] for r in test])),
                     "fit_error": error_summary(_predict_chain_layers(train, name, x, peaks, bw_gbps),
                                                np.array([r[f"{col}_ms"] for r in train]))}
    return out


def _chain_resid(x: np.ndarray, rows: list[RnnRow], name: str, y: np.ndarray, peaks: dict[str, float],
                 bw_gbps: float) -> np.ndarray:
    return np.log(_predict_chain_layers(rows, name, x, peaks, bw_gbps)) - y


def predict_rows(rows: list[KernelRow], gpu: GpuFit) -> np.ndarray:
    """Predicted ms of table rows on one fitted GPU (``gpu``: an entry of constants.json's ``gpus``)."""
    out = np.empty(len(rows))
    mem = gpu["classes"]["elementwise_norm"]
    for i, r in enumerate(rows):
        if OP_CLASS[r["op"]] == "matmul_attention":
            c = gpu["classes"]["matmul_attention"]["fp32"]
            out[i] = kernel_ms(r["flops"], r["bytes"], gpu["peak_tflops"]["fp32"], gpu["memory_gbps"], c, mem,
                               c["t_min_ms"]) + c["harness_ms"]
        else:
            out[i] = kernel_ms(0, r["bytes"], 1.0, gpu["memory_gbps"], None, mem, mem["t_min_ms"]) + mem["harness_ms"]
    return out


def error_summary(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    """predicted/measured: n, median, p10, p90 (and p5, p95)."""
    r = np.asarray(pred) / np.asarray(meas)
    q = np.percentile(r, [5, 10, 50, 90, 95])
    return {"n": int(r.size), "p5": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]),
            "p95": float(q[4])}


def calibrate(rows: list[KernelRow], devices: dict[str, MeasuredDevice]) -> dict[str, GpuFit]:
    """Fit every measured GPU of ``devices`` ({table gpu: {peak_tflops: {fp32}, memory_gbps, mem_from?}})
    on the training part of ``rows``; score on the held-out part. Returns constants.json's ``gpus``."""
    out: dict[str, GpuFit] = {}
    by_gpu: dict[str, list[KernelRow]] = {}
    for r in rows:
        by_gpu.setdefault(r["gpu"], []).append(r)
    # GPUs with memory-bound measurements first: one without borrows another's memory curve (mem_from)
    order = sorted(devices, key=lambda g: bool(devices[g].get("mem_from")))
    for g in order:
        d = devices[g]
        mine = by_gpu.get(g, [])
        train = [r for r in mine if not is_held_out(r["op"], r["shape"])]
        test = [r for r in mine if is_held_out(r["op"], r["shape"])]
        mem_rows = [r for r in train if OP_CLASS[r["op"]] == "elementwise_norm"]
        notes: list[str] = []
        if mem_rows:
            mem = fit_memory(mem_rows, d["memory_gbps"])
        else:
            donor = d["mem_from"]
            mem = dict(out[donor]["classes"]["elementwise_norm"])
            notes.append(f"no memory-bound kernels measured: bandwidth efficiency of {donor}")
        mm = [r for r in train if OP_CLASS[r["op"]] == "matmul_attention"]
        entry: GpuFit = {"peak_tflops": d["peak_tflops"], "memory_gbps": d["memory_gbps"],
                         "datasheet": d.get("datasheet"),
                         "classes": {"elementwise_norm": mem, "matmul_attention": {
                             "fp32": fit_compute(mm, d["peak_tflops"]["fp32"], d["memory_gbps"], mem)}},
                         "held_out": {}, "notes": notes, "train_rows": len(train), "held_out_rows": len(test),
                         "smallest": {"matmul_attention_flops": min((r["flops"] for r in mm), default=None),
                                      "elementwise_norm_bytes": min((r["bytes"] for r in mem_rows), default=None)}}
        pred = predict_rows(test, entry)
        meas = np.array([r["ms"] for r in test])
        for key in sorted({OP_CLASS[r["op"]] for r in test} | {r["op"] for r in test}):
            idx = [i for i, r in enumerate(test) if key in (r["op"], OP_CLASS[r["op"]])]
            entry["held_out"][key] = error_summary(pred[idx], meas[idx])
        out[g] = entry
    return out


# --------------------------------------------------------------------------------------------------
# reading the committed constants
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def load_constants(path: str | None = None) -> Constants:
    """constants.json (written by scripts/calibrate_projection.py)."""
    with open(path or CONSTANTS) as f:
        return json.load(f)


def calibration_for(entry: str, constants: Constants | None = None) -> CatalogueCalibration | None:
    """How catalogue entry ``entry`` is calibrated: {gpu (the measured one), relation ("measured",
    "same chip" or "nearest architecture"), widen (extra factors [low, high] on the range), note}; None when
    the catalogue entry has no calibration (then the uncalibrated defaults apply, widest range)."""
    c = constants or load_constants()
    m = c.get("catalogue", {}).get(entry)
    return dict(m) if m else None

