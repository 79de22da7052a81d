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
    python scripts/calibrate_projection.py --extract-xla /path/to/xla    # once, the tensor-core GEMM table
    python scripts/calibrate_projection.py --extract-deepbench /path/to/DeepBench   # V100/T4 GEMMs, V100 RNN layers
    python scripts/calibrate_projection.py --extract-vidur /path/to/vidur          # A100 fp16 GEMMs
    python scripts/calibrate_projection.py --extract-llmcompass /path/to/LLMCompass  # A100 check (never fitted)
    python scripts/calibrate_projection.py                               # fit, write constants, print errors
    python scripts/calibrate_projection.py --check                       # fit, compare with the committed file
    python scripts/calibrate_projection.py --add-gpu-report OUT/gpu-check.json   # a GPU session's GEMMs in
    python scripts/calibrate_projection.py --check-steps                 # the reserved published steps

Tensor-core GEMMs (tf32, bf16, fp16) are fitted the same way on the tensor tables (XLA's H100/B200, DeepBench's
V100/T4 fp16, Vidur's A100 fp16, and what GPU sessions added), the chains on DeepBench's V100 RNN layers;
DeepBench's fp32 GEMMs are fitted to no curve but set the fp32 matmul range of the boards they measured;
LLMCompass's A100 matmuls are a check; the published end-to-end steps of ``calibration_data/checks`` are read by
``--check-steps`` alone, after the fact, and set nothing.

The fitting lives in ``trainbench.analysis.projection`` (``extract``: the tables from their sources; ``fitting``:
the constants; ``fit_checks``: the second sources, checks and range-rule tests; ``catalogue``: the GPU
catalogue's calibration facts, ``calibration_data/catalogue.yaml``), a GPU session's figures are taken in by
``trainbench.analysis.gpu_report``; this file is the command.

The projection-error stage of scripts/gpu_check.py (a whole epoch projected vs measured on a real GPU) is
the other input: when a GPU run arrives, its figures go into docs/projection.md next to this table, and a
run whose error falls outside the held-out range says the kernel model misses something at epoch level.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainbench.analysis.gpu_report import add_gpu_report  # noqa: E402
from trainbench.analysis.projection import calibration as cal  # noqa: E402
from trainbench.analysis.projection import extract as ex  # noqa: E402
from trainbench.analysis.projection import fit_checks, fitting  # noqa: E402
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK  # noqa: E402

CHECKS_DIR = cal.DATA_DIR / "checks"
STEP_CHECKS = CHECKS_DIR / "published_steps.csv"


def step_checks(path: Path = STEP_CHECKS, constants_path: Path | None = None) -> list[dict]:
    """Each published step of ``path`` (reserved for checking, never fitted) against the projection of its
    profile on its GPU at its precision: {check, gpu, precision, container, gpus, published_ms, projected_ms,
    range_ms, ratio (projected/published), in_range, width (high/low), note}.

    A row of several GPUs (column ``gpus`` > 1, weak scaling: ``step_ms`` is one GPU's step at the per-GPU batch)
    is the 1-GPU projection plus the all-reduce of one step that the backward does not hide
    (analysis/projection/data_parallel.py's ``step_comm_ms``: the gradients of the row's ``num_params`` in DDP's
    buckets, each at the board's published bus bandwidth at its size), at each end of the range; where the board
    has no published bus bandwidth the row is not projected (``projected_ms`` None, ``note`` says why)."""
    from trainbench.analysis.projection import data_parallel, kernel_model, roofline
    from trainbench.analysis.projection import gpus as gpu_catalogue

    with open(path, newline="") as f:
        rows = list(csv.DictReader(ln for ln in f if not ln.startswith("#")))
    catalogue = gpu_catalogue.load_gpus()
    boards = data_parallel.load_boards()
    consts = json.loads(Path(constants_path).read_text()) if constants_path else None
    out = []
    for r in rows:
        profile = json.loads((path.parent / r["profile"]).read_text())
        if r["gpu"] not in catalogue:
            raise ValueError(f"{path}: gpu {r['gpu']!r} is not a conf/hardware entry")
        spec = catalogue[r["gpu"]]
        p = roofline.project(profile, spec, precision=r["precision"], constants=consts)
        parts = kernel_model.epoch_ms(profile, spec, kernel_model.resolve_precision(spec, r["precision"]),
                                      consts).get("by_part", {})
        lo, hi = p["epoch_ms_range"]
        ms, n, note = p["epoch_ms"], int(r.get("gpus") or 1), ""
        pub = float(r["step_ms"])
        if n > 1:
            board = boards.get(r["gpu"])
            if board is None:
                out.append({"check": r["check"], "gpu": r["gpu"], "precision": r["precision"],
                            "container": r["container"], "gpus": n, "published_ms": pub, "projected_ms": None,
                            "range_ms": None, "ratio": None, "in_range": None, "width": None,
                            "note": f"not projected: no published all-reduce bus bandwidth for the {r['gpu']} "
                                    f"board ({r['device']})"})
                continue
            grad = float(r["num_params"]) * data_parallel.GRAD_BYTES_PER_PARAM
            comm = data_parallel.step_comm_ms(grad, n, board, ms)
            lo += data_parallel.step_comm_ms(grad, n, board, lo)[1]
            hi += data_parallel.step_comm_ms(grad, n, board, hi)[2]
            ms += comm[0]
            note = f"1 GPU {p['epoch_ms']:.1f} ms + exposed all-reduce {comm[0]:.2f} ms"
        out.append({"check": r["check"], "gpu": r["gpu"], "precision": r["precision"], "container": r["container"],
                    "gpus": n, "published_ms": pub, "projected_ms": ms, "range_ms": [lo, hi], "ratio": ms / pub,
                    "in_range": lo <= pub <= hi, "width": hi / lo, "note": note, "parts": parts})
    return out


def print_step_checks(rows: list[dict]) -> None:
    print("published steps (reserved for checking): projected vs published (one GPU's step)")
    print(f"{'check':16s} {'gpu':10s} {'precision':9s} {'container':18s} {'gpus':>4s} {'published':>9s} "
          f"{'projected':>9s} {'ratio':>6s} {'range':>17s} in")
    for r in rows:
        if r["projected_ms"] is None:
            print(f"{r['check']:16s} {r['gpu']:10s} {r['precision']:9s} {r['container']:18s} {r['gpus']:4d} "
                  f"{r['published_ms']:9.1f} {r['note']}")
            continue
        lo, hi = r["range_ms"]
        print(f"{r['check']:16s} {r['gpu']:10s} {r['precision']:9s} {r['container']:18s} {r['gpus']:4d} "
              f"{r['published_ms']:9.1f} {r['projected_ms']:9.1f} {r['ratio']:6.2f} [{lo:6.1f}, {hi:6.1f}] "
              f"{'yes' if r['in_range'] else 'NO'}" + (f"  ({r['note']})" if r["note"] else ""))
    done = [r for r in rows if r["projected_ms"] is not None]
    by = {(r["check"], r["container"], r["gpu"], r["precision"], r["gpus"]): r for r in done}
    for (check, container, gpu, prec, n), r in by.items():  # the ratio that chooses an instance: V100 over A100
        if gpu != "v100_16gb" or n != 1:
            continue
        other = {"fp32": "tf32", "fp16": "fp16"}.get(prec)
        a = by.get((check, container, "a100_80gb", other, 1))
        if a:
            print(f"V100 {prec} / A100 {other} ({container}): projected {r['projected_ms'] / a['projected_ms']:.2f}, "
                  f"published {r['published_ms'] / a['published_ms']:.2f}")
            print("  the projected step by part (device ms, V100 / A100 = ratio): " + "; ".join(
                f"{part} {ms:.1f} / {a['parts'].get(part, 0.0):.1f}" + (f" = {ms / a['parts'][part]:.2f}"
                                                                          if a["parts"].get(part) else "")
                for part, ms in sorted(r["parts"].items(), key=lambda kv: -kv[1])))
    for (check, container, gpu, prec, n), r in by.items():  # data parallelism: the step's growth from 1 to n GPUs
        one = by.get((check, container, gpu, prec, 1))
        if n > 1 and one:
            print(f"{gpu} {prec} ({container}) {n} GPUs / 1 GPU step: projected "
                  f"{r['projected_ms'] / one['projected_ms']:.3f}, published {r['published_ms'] / one['published_ms']:.3f}")
    widths = sorted(r["width"] for r in done)
    print(f"inside the range: {sum(r['in_range'] for r in done)} of {len(done)}; median range width (high/low) "
          f"x{float(np.median(widths)):.2f}" + (f"; {len(rows) - len(done)} not projected" if len(done) < len(rows)
                                                 else ""))


def profile_tft(out: Path) -> None:
    """The workload profile of trainbench's TFT at the sizes of NVIDIA's published Electricity configuration
    (hidden 128, 4 heads, encoder 168, 24 horizons, batch 1024): one training step on this machine's CPU
    (about 100 s and 6 GB of memory)."""
    import torch

    from trainbench.compose import compose_run
    from trainbench.config.run import validate
    from trainbench.data.in_memory import make_market_data
    from trainbench.measure.workload import profile_callable
    from trainbench.models.base import BuildContext
    from trainbench.models.registry import REGISTRY

    cpu = torch.device("cpu")
    obj = validate(compose_run(["model=tft", "model.hidden=128", "model.heads=4", "model.encoder_len=168",
                                "model.horizons=[" + ",".join(str(i) for i in range(1, 25)) + "]",
                                "model.batch_size=1024", "model.dropout=0.1"]))
    tft = REGISTRY.get("tft").build(obj.model, make_market_data(3000), BuildContext(device=cpu))
    p = profile_callable(tft.memory_step(tft.batch_size), cpu)
    keep = {k: p[k] for k in ("schema", "profiled_on", "precision", "complete", "incomplete_reasons", "optimizer",
                              "kernels", "chains", "host", "flops", "bytes", "ops")}
    keep["made_by"] = (f"scripts/calibrate_projection.py --profile-tft: {profile_tft.__doc__.split(':')[0].strip()}; "
                       f"one training step (memory_step) under measure/workload.profile_callable on a CPU, "
                       f"{__import__('datetime').date.today().isoformat()}")
    out.write_text(json.dumps(keep, indent=1, sort_keys=True))


def _no_checkout(path: Path, checkout: str) -> int:
    """An extraction's source file missing: one line naming it and what to pass; the exit code of bad input."""
    print(f"error: {path} not found: pass the root of {checkout}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extract", type=Path, help="a NeuSight checkout: rebuild the kernel table from it")
    ap.add_argument("--extract-xla", type=Path, help="an XLA checkout (or its matmul_interpolator_data.h): rebuild "
                    "the tensor-core GEMM table from it")
    ap.add_argument("--extract-deepbench", type=Path, help="a DeepBench checkout: rebuild the V100/T4 GEMM and RNN "
                    "tables from its results/train/DeepBench_NV_{V100,T4}.xlsx")
    ap.add_argument("--extract-vidur", type=Path, help="a Vidur checkout: rebuild the A100 fp16 GEMM table from its "
                    "data/profiling/compute/a100/*/*/mlp.csv")
    ap.add_argument("--extract-llmcompass", type=Path, help="an LLMCompass checkout: rebuild the A100 fp16 matmul "
                    "check (host-timed, never fitted) from its ae/figure5/ab/real_hardware/matmul_A100.csv")
    ap.add_argument("--add-gpu-report", type=Path, metavar="GPU_CHECK_JSON", help="take the tensor-core GEMM "
                    "figures of a GPU session (scripts/gpu_check.py's tensor_gemms stage) into the calibration")
    ap.add_argument("--check", action="store_true", help="fit and compare with the committed constants")
    ap.add_argument("--check-steps", action="store_true", help="project the published end-to-end steps "
                    "(calibration_data/checks, reserved for checking) with the committed constants and compare")
    ap.add_argument("--profile-tft", type=Path, metavar="OUT", help="profile trainbench's TFT at NVIDIA's published "
                    "Electricity sizes on this CPU into OUT (the checks' profile)")
    ap.add_argument("--out", type=Path, default=cal.CONSTANTS)
    args = ap.parse_args(argv)
    if args.profile_tft:
        profile_tft(args.profile_tft)
        print(f"wrote {args.profile_tft}")
        return EXIT_OK
    if args.check_steps:
        rows = sorted((r for f in sorted(CHECKS_DIR.glob("*.csv")) for r in step_checks(f, constants_path=args.out)),
                      key=lambda r: r["gpus"])  # one GPU first, then data parallelism
        print_step_checks(rows)  # a report, not a gate: the count is what it is
        return EXIT_OK
    if args.extract:
        if not (args.extract / ex.TEST_DIR).is_dir():
            return _no_checkout(args.extract / ex.TEST_DIR, "a NeuSight checkout (github.com/trsharm25/NeuSight)")
        rows = ex.extract(args.extract)
        ex.write_table(rows, cal.TABLE)
        print(f"wrote {len(rows)} kernels to {cal.TABLE}")
    if args.extract_xla:
        where = args.extract_xla / ex.TENSOR_FILE if args.extract_xla.is_dir() else args.extract_xla
        if not where.is_file():
            print(f"error: {where} not found: pass an XLA checkout (github.com/openxla/xla) or its "
                  f"{ex.TENSOR_FILE}", file=sys.stderr)
            return EXIT_BAD_INPUT
        trows = ex.extract_xla(where)
        if not trows:
            print(f"error: {where} has no {', '.join(ex.TENSOR_KEYS)} GEMM entries: not XLA's matmul performance "
                  "table", file=sys.stderr)
            return EXIT_BAD_INPUT
        ex.write_table(trows, cal.TENSOR_TABLE, ex.TENSOR_SOURCE)
        print(f"wrote {len(trows)} tensor-core GEMMs to {cal.TENSOR_TABLE}")
    if args.extract_deepbench:
        missing = [f for f in ex.DEEPBENCH_FILES if not (args.extract_deepbench / f).is_file()]
        if missing:
            return _no_checkout(args.extract_deepbench / missing[0],
                                "a DeepBench checkout (github.com/baidu-research/DeepBench)")
        try:
            from trainbench.measure.op_formulas import rnn_layer_backward, rnn_layer_forward

            grows, rnn, floored = ex.extract_deepbench(args.extract_deepbench, (rnn_layer_forward, rnn_layer_backward))
        except (OSError, KeyError, ValueError) as e:
            print(f"error: {args.extract_deepbench}: DeepBench's result workbooks unreadable ({e})", file=sys.stderr)
            return EXIT_BAD_INPUT
        ex.write_table(grows, cal.DEEPBENCH_TABLE, {**ex.DEEPBENCH_SOURCE, "left out": f"{floored} GEMMs under "
                    f"{ex.DEEPBENCH_FLOOR_MS} ms (the harness's 8 us floor and whole-microsecond rounding)"})
        ex.write_rnn_table(rnn, cal.RNN_TABLE)
        print(f"wrote {len(grows)} GEMMs to {cal.DEEPBENCH_TABLE} ({floored} under the {ex.DEEPBENCH_FLOOR_MS} ms floor "
              f"left out) and {len(rnn)} RNN layers to {cal.RNN_TABLE}")
    if args.extract_vidur:
        if not (args.extract_vidur / ex.VIDUR_DIR).is_dir():
            return _no_checkout(args.extract_vidur / ex.VIDUR_DIR, "a Vidur checkout (github.com/microsoft/vidur)")
        vrows = ex.extract_vidur(args.extract_vidur)
        if not vrows:
            print(f"error: {args.extract_vidur / ex.VIDUR_DIR} has no */*/mlp.csv operator profiles", file=sys.stderr)
            return EXIT_BAD_INPUT
        ex.write_table(vrows, cal.VIDUR_TABLE, ex.VIDUR_SOURCE)
        print(f"wrote {len(vrows)} A100 fp16 GEMMs to {cal.VIDUR_TABLE}")
    if args.extract_llmcompass:
        if not (args.extract_llmcompass / ex.LLMCOMPASS_FILE).is_file():
            return _no_checkout(args.extract_llmcompass / ex.LLMCOMPASS_FILE,
                                "an LLMCompass checkout (github.com/PrincetonUniversity/LLMCompass)")
        lrows = ex.extract_llmcompass(args.extract_llmcompass)
        ex.write_table(lrows, ex.LLMCOMPASS_TABLE, ex.LLMCOMPASS_SOURCE)
        print(f"wrote {len(lrows)} A100 fp16 matmuls (a check, never fitted) to {ex.LLMCOMPASS_TABLE}")
    if args.add_gpu_report:
        try:
            added = add_gpu_report(args.add_gpu_report)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print("wrote " + ", ".join(str(p) for p in added))
    c, rows, trows = fitting.fit_tables()
    print("\n".join(fit_checks.error_lines(c, trows)))
    print("\n".join(fit_checks.generation_lines(c, rows)))
    if args.check:
        same = fit_checks.matches(json.loads(Path(args.out).read_text()), json.loads(json.dumps(c)), rows, trows)
        print("committed constants", "match the fit" if same else "DIFFER from the fit: rerun without --check")
        return EXIT_OK if same else EXIT_FAILED
    if Path(args.out).is_file():
        fit_checks.keep_committed(json.loads(Path(args.out).read_text()), c, rows, trows)
    Path(args.out).write_text(json.dumps(c, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
