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

DATA_DIR = Path(__file__).with_name("calibration_data")
TABLE = DATA_DIR / "kernels.csv.gz"
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


def is_held_out(op: str, shape: str) -> bool:
    """Deterministic split: the same (op, shape) is held out on every GPU, whatever the row order."""
    h = int(hashlib.sha256(f"{op}|{shape}".encode()).hexdigest()[:8], 16)
    return (h % 1000) < HELD_OUT_SHARE * 1000


def read_table(path: str | Path = TABLE) -> list[dict[str, Any]]:
    """Rows of the kernel table: gpu, op, dtype, shape, flops, bytes, ms."""
    import csv

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    rows = []
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


def compute_ms(flops: Any, peak_tflops: float, cmp: dict[str, float]) -> Any:
    return np.asarray(flops, float) / (peak_tflops * 1e12 * saturating(flops, cmp["e_max"], cmp["f_half"],
                                                                        cmp["k"])) * 1e3


def kernel_ms(flops: Any, nbytes: Any, peak_tflops: float, bw_gbps: float, cmp: dict[str, float] | None,
              mem: dict[str, float], t_min_ms: float) -> Any:
    """Time of one kernel: max(compute, memory, minimum kernel time); no compute term when ``cmp`` is None."""
    t = np.maximum(memory_ms(nbytes, bw_gbps, mem), t_min_ms)
    if cmp is not None:
        f = np.asarray(flops, float)
        t = np.maximum(t, np.where(f > 0, compute_ms(np.maximum(f, 1.0), peak_tflops, cmp), 0.0))
    return t


# --------------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------------


def _fit(resid_fn: Any, x0: list[float], lo: list[float], hi: list[float]) -> np.ndarray:
    from scipy.optimize import least_squares

    res = least_squares(resid_fn, np.asarray(x0, float), bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return res.x


def fit_memory(rows: list[dict[str, Any]], bw_gbps: float) -> dict[str, float]:
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


def fit_compute(rows: list[dict[str, Any]], peak_tflops: float, bw_gbps: float,
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


def predict_rows(rows: list[dict[str, Any]], gpu: dict[str, Any]) -> np.ndarray:
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


def calibrate(rows: list[dict[str, Any]], devices: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Fit every measured GPU of ``devices`` ({table gpu: {peak_tflops: {fp32}, memory_gbps, mem_from?}})
    on the training part of ``rows``; score on the held-out part. Returns constants.json's ``gpus``."""
    out: dict[str, Any] = {}
    by_gpu: dict[str, list[dict[str, Any]]] = {}
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
        entry: dict[str, Any] = {"peak_tflops": d["peak_tflops"], "memory_gbps": d["memory_gbps"],
                                 "datasheet": d.get("datasheet"), "classes": {}, "held_out": {}, "notes": []}
        if mem_rows:
            entry["classes"]["elementwise_norm"] = fit_memory(mem_rows, d["memory_gbps"])
        else:
            donor = d["mem_from"]
            entry["classes"]["elementwise_norm"] = dict(out[donor]["classes"]["elementwise_norm"])
            entry["notes"].append(f"no memory-bound kernels measured: bandwidth efficiency of {donor}")
        mm = [r for r in train if OP_CLASS[r["op"]] == "matmul_attention"]
        entry["classes"]["matmul_attention"] = {"fp32": fit_compute(mm, d["peak_tflops"]["fp32"], d["memory_gbps"],
                                                                    entry["classes"]["elementwise_norm"])}
        pred = predict_rows(test, entry)
        meas = np.array([r["ms"] for r in test])
        for key in sorted({OP_CLASS[r["op"]] for r in test} | {r["op"] for r in test}):
            idx = [i for i, r in enumerate(test) if key in (r["op"], OP_CLASS[r["op"]])]
            entry["held_out"][key] = error_summary(pred[idx], meas[idx])
        entry["train_rows"], entry["held_out_rows"] = len(train), len(test)
        entry["smallest"] = {"matmul_attention_flops": min((r["flops"] for r in mm), default=None),
                             "elementwise_norm_bytes": min((r["bytes"] for r in mem_rows), default=None)}
        out[g] = entry
    return out


# --------------------------------------------------------------------------------------------------
# reading the committed constants
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def load_constants(path: str | None = None) -> dict[str, Any]:
    """constants.json (written by scripts/calibrate_projection.py)."""
    with open(path or CONSTANTS) as f:
        return json.load(f)


def calibration_for(entry: str, constants: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """How catalogue entry ``entry`` is calibrated: {gpu (the measured one), relation ("measured",
    "same chip" or "nearest architecture"), widen (extra factors [low, high] on the range), note}; None when
    the catalogue entry has no calibration (then the uncalibrated defaults apply, widest range)."""
    c = constants or load_constants()
    m = c.get("catalogue", {}).get(entry)
    return dict(m) if m else None

