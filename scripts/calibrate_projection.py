#!/usr/bin/env python
"""Derive the projection's kernel-model constants from published per-kernel measurements.

Two steps:

1. ``--extract <NeuSight checkout>`` reduces the NeuSight artifact's measured kernel CSVs
   (``scripts/asplos/data/dataset/test/{linear,bmm,elem,ln,softmax}.csv``: latency in ms of one PyTorch 2.1
   fp32 kernel per row, with its shape) to the committed table
   ``src/trainbench/analysis/projection/calibration_data/kernels.csv.gz`` (gpu, op, dtype, shape, FLOPs, bytes, ms).
   Only the figures are taken; FLOPs and bytes are computed here from each row's shape.
2. (default) fits the kernel model per measured GPU on the training part of the table
   (analysis/projection/calibration.py: deterministic split by a hash of the op and its shape), scores it on the
   held-out part, writes ``calibration_data/constants.json`` (the analysis reads it) and prints the held-out
   error per GPU and op: median and p10/p90 of predicted/measured.

    python scripts/calibrate_projection.py --extract /path/to/NeuSight   # once, to rebuild the table
    python scripts/calibrate_projection.py                               # fit, write constants, print errors
    python scripts/calibrate_projection.py --check                       # fit, compare with the committed file

The projection-error stage of scripts/gpu_check.py (a whole epoch projected vs measured on a real GPU) is
the other input: when a GPU run arrives, its figures go into docs/projection.md next to this table, and a
run whose error falls outside the held-out range says the kernel model misses something at epoch level.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainbench.analysis.projection import calibration as cal  # noqa: E402
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK  # noqa: E402

SOURCE = {"repository": "https://github.com/trsharm25/NeuSight",
          "path": "scripts/asplos/data/dataset/test/{linear,bmm,elem,ln,softmax}.csv",
          "commit": "db1fdc966633fe96c0717e0706e7621ad0921ed2", "retrieved": "2026-12-02",
          "what": "latency (ms) of single PyTorch 2.1.0 (CUDA 12.1, cuDNN 8.9) fp32 kernels: linear, bmm, "
                  "elementwise (add, mul, div, pow, relu, tanh, gelu and scalar variants), layernorm, softmax",
          "paper": "Lee, Phanishayee and Mahajan, Forecasting GPU Performance for Deep Learning Training and Inference (NeuSight), ASPLOS 2025, doi:10.1145/3669940.3707265"}

#: Measured GPUs: the datasheet figures their efficiencies are fractions of (the board that was measured).
DEVICES = {
    "Tesla V100-PCIE-32GB": {"peak_tflops": {"fp32": 14.0}, "memory_gbps": 900,
                             "datasheet": "NVIDIA V100 datasheet, PCIe column"},
    "Tesla T4": {"peak_tflops": {"fp32": 8.1}, "memory_gbps": 320, "datasheet": "NVIDIA T4 datasheet"},
    "Tesla P100-PCIE-16GB": {"peak_tflops": {"fp32": 9.3}, "memory_gbps": 732,
                             "datasheet": "NVIDIA P100 datasheet, PCIe 16 GB column"},
    "NVIDIA A100-PCIE-40GB": {"peak_tflops": {"fp32": 19.5}, "memory_gbps": 1555,
                              "datasheet": "NVIDIA A100 datasheet, 40GB PCIe column"},
    "NVIDIA A100 80GB PCIe": {"peak_tflops": {"fp32": 19.5}, "memory_gbps": 1935,
                              "datasheet": "NVIDIA A100 datasheet, 80GB PCIe column"},
    "NVIDIA H100 80GB HBM3": {"peak_tflops": {"fp32": 67.0}, "memory_gbps": 3350,
                              "datasheet": "NVIDIA H100 datasheet, SXM column",
                              "mem_from": "NVIDIA A100 80GB PCIe"},
    "NVIDIA L4": {"peak_tflops": {"fp32": 30.3}, "memory_gbps": 300, "datasheet": "NVIDIA L4 datasheet"},
}

#: conf/hardware entry -> the measured GPU whose fitted efficiencies it uses, and how they relate.
CATALOGUE = {
    "t4": {"gpu": "Tesla T4", "relation": "measured", "widen": [1.0, 1.0]},
    "l4": {"gpu": "NVIDIA L4", "relation": "measured", "widen": [1.0, 1.0]},
    "h100_sxm": {"gpu": "NVIDIA H100 80GB HBM3", "relation": "measured", "widen": [1.0, 1.0],
                 "note": "matmuls measured; no memory-bound kernels in the table: A100 80GB bandwidth efficiency"},
    "v100_16gb": {"gpu": "Tesla V100-PCIE-32GB", "relation": "same chip", "widen": [1.0, 1.0],
                  "note": "GV100 measured as the PCIe 32 GB board; fractions applied to the SXM2 datasheet"},
    "a100_40gb": {"gpu": "NVIDIA A100-PCIE-40GB", "relation": "same chip", "widen": [1.0, 1.0],
                  "note": "GA100 measured as the PCIe 40 GB board; fractions applied to the SXM4 datasheet"},
    "a100_80gb": {"gpu": "NVIDIA A100 80GB PCIe", "relation": "same chip", "widen": [1.0, 1.0],
                  "note": "GA100 measured as the PCIe 80 GB board; fractions applied to the SXM4 datasheet"},
    "h200": {"gpu": "NVIDIA H100 80GB HBM3", "relation": "nearest architecture", "widen": [0.8, 1.25],
             "note": "no public H200 kernel data: the H100's fractions (same GH100 compute, HBM3e)"},
    "a10g": {"gpu": "NVIDIA L4", "relation": "nearest architecture", "widen": [0.75, 1.33],
             "note": "no public A10G kernel data: the L4's fractions (GA10x/AD10x: the datasheet fp32 counts "
                     "dual-issue units SGEMM cannot use)"},
    "rtx3050ti_4gb": {"gpu": "NVIDIA L4", "relation": "nearest architecture", "widen": [0.67, 1.5],
                      "note": "no public RTX 3050 Ti kernel data: the L4's fractions (GA10x/AD10x dual-issue "
                              "fp32); laptop clocks follow the TGP"},
}

#: Tensor-core dtypes (tf32, bf16, fp16): no public per-kernel table. Derived, stated, widened.
TENSOR_CORE = {"e_max": 0.70, "widen": [0.67, 1.5],
               "rule": "the same GPU's fp32 curve with its saturation size scaled by peak(dtype)/peak(fp32) "
                       "(a kernel reaches the same fraction of peak at the same ideal time, not the same FLOPs) "
                       "and a large-kernel ceiling of 0.70 of the dense tensor peak (assumed: no public "
                       "per-kernel measurement in the table)"}
#: A catalogue GPU without any calibration: widest range.
UNCALIBRATED = {"widen": [0.5, 2.0], "e_max": 0.6, "f_half": 1e9, "k": 0.7, "b_max": 0.8, "b_half": 1e6,
                "kb": 1.0, "t_min_ms": 0.005}

TEST_DIR = "scripts/asplos/data/dataset/test"
BYTES = 4  # fp32


def _rows_of(path: Path):
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def extract(neusight: Path) -> list[dict]:
    out = []
    base = neusight / TEST_DIR
    for fname, op in (("linear.csv", "linear"), ("bmm.csv", "bmm")):
        for r in _rows_of(base / fname):
            if r["Device"] not in DEVICES:
                continue
            b, m, n, k = (int(float(r[c])) for c in "BMNK")
            flops = 2.0 * b * m * n * k
            if op == "linear":  # input (B*M, K), weight (N, K), output (B*M, N)
                nbytes = BYTES * (b * m * k + n * k + b * m * n)
            else:  # (B, M, K) @ (B, K, N) -> (B, M, N)
                nbytes = BYTES * b * (m * k + k * n + m * n)
            out.append({"gpu": r["Device"], "op": op, "dtype": "fp32", "shape": f"{r['OPName']}:{b}x{m}x{n}x{k}",
                        "flops": flops, "bytes": float(nbytes), "ms": float(r["Latency"])})
    binary = {"add", "mul", "div", "pow"}
    for fname, op in (("elem.csv", "elementwise"), ("ln.csv", "layernorm"), ("softmax.csv", "softmax")):
        for r in _rows_of(base / fname):
            if r["Device"] not in DEVICES:
                continue
            b, h = int(float(r["B"])), int(float(r["H"]))
            n = b * h
            if op == "elementwise":
                tensors = 3 if r["OPName"] in binary else 2
                nbytes, flops = BYTES * tensors * n, float(n)
            elif op == "layernorm":  # x in, y out, mean and rstd per row, weight and bias
                nbytes, flops = BYTES * (2 * n + 2 * b + 2 * h), 8.0 * n
            else:
                nbytes, flops = BYTES * 2 * n, 5.0 * n
            out.append({"gpu": r["Device"], "op": op, "dtype": "fp32", "shape": f"{r['OPName']}:{b}x{h}",
                        "flops": flops, "bytes": float(nbytes), "ms": float(r["Latency"])})
    return out


def write_table(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    for k, v in SOURCE.items():
        buf.write(f"# {k}: {v}\n")
    buf.write("# columns: gpu (as the device reports), op, dtype, shape (op:dims), flops and bytes of the kernel "
              "(computed from the shape, fp32), ms (measured latency)\n")
    w = csv.DictWriter(buf, fieldnames=["gpu", "op", "dtype", "shape", "flops", "bytes", "ms"], lineterminator="\n")
    w.writeheader()
    for r in sorted(rows, key=lambda r: (r["gpu"], r["op"], r["shape"])):
        w.writerow({**r, "flops": f"{r['flops']:.6g}", "bytes": f"{r['bytes']:.6g}", "ms": f"{r['ms']:.5g}"})
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same table gives the same bytes
        f.write(buf.getvalue().encode())


def constants(rows: list[dict]) -> dict:
    return {"schema": 1, "source": SOURCE, "table": "kernels.csv.gz", "held_out_share": cal.HELD_OUT_SHARE,
            "split": "sha256 of 'op|shape', the same shapes held out on every GPU",
            "range_percentiles": list(cal.RANGE_PERCENTILES), "gpus": cal.calibrate(rows, DEVICES),
            "catalogue": CATALOGUE, "tensor_core": TENSOR_CORE, "uncalibrated": UNCALIBRATED}


def print_errors(c: dict) -> None:
    print(f"held-out error, predicted/measured (median [p10, p90]), {c['held_out_share']:.0%} of shapes held out")
    print(f"{'gpu':24s} {'op':18s} {'n':>5s} {'median':>7s} {'p10':>6s} {'p90':>6s}")
    for g, e in c["gpus"].items():
        for op, s in e["held_out"].items():
            print(f"{g:24s} {op:18s} {s['n']:5d} {s['median']:7.2f} {s['p10']:6.2f} {s['p90']:6.2f}")


def _same_fit(old: dict, new: dict, rows: list[dict], rel: float = 1e-3) -> bool:
    """The committed constants are the fit: the same GPUs and classes, and the same predicted time for every kernel
    of the table within ``rel``. Compared by prediction, not parameter by parameter: a parameter the data barely
    identifies (the half-saturation size of a memory curve whose kernels sit on its plateau) moves with the scipy
    and BLAS build by far more than the times it predicts, which are what the projection uses."""
    if old.keys() != new.keys():
        return False
    for g in old:
        if old[g]["classes"].keys() != new[g]["classes"].keys():
            return False
        mine = [r for r in rows if r["gpu"] == g]
        a, b = cal.predict_rows(mine, old[g]), cal.predict_rows(mine, new[g])
        if mine and float(np.max(np.abs(a - b) / np.maximum(a, b))) > rel:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extract", type=Path, help="a NeuSight checkout: rebuild the kernel table from it")
    ap.add_argument("--check", action="store_true", help="fit and compare with the committed constants")
    ap.add_argument("--out", type=Path, default=cal.CONSTANTS)
    args = ap.parse_args(argv)
    if args.extract:
        if not (args.extract / TEST_DIR).is_dir():
            print(f"error: {args.extract / TEST_DIR} not found: pass the root of a NeuSight checkout "
                  "(github.com/trsharm25/NeuSight)", file=sys.stderr)
            return EXIT_BAD_INPUT
        rows = extract(args.extract)
        write_table(rows, cal.TABLE)
        print(f"wrote {len(rows)} kernels to {cal.TABLE}")
    rows = cal.read_table(cal.TABLE)
    c = constants(rows)
    print_errors(c)
    if args.check:
        old = json.loads(Path(args.out).read_text())
        same = _same_fit(old["gpus"], json.loads(json.dumps(c["gpus"])), rows)
        print("committed constants", "match the fit" if same else "DIFFER from the fit: rerun without --check")
        return EXIT_OK if same else EXIT_FAILED
    Path(args.out).write_text(json.dumps(c, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
