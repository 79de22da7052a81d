"""The GPU check (``make gpu-check``): one script, under 8 minutes on one modern GPU.

Stages, each under a share of ``--budget-s`` (default 450 s), each recorded even when it fails:

1. **Synchronisation self-test**: a device sleep of known duration (``torch.cuda._sleep``, calibrated)
   timed by :class:`EpochTimer` must read at least its duration, while a naive ``perf_counter`` around
   the launch reads near zero (how an unsynchronised timer reads a DQN epoch as a fraction of a millisecond).
2. **GPU tests**: ``pytest -m gpu`` in a subprocess.
3. **Short sweep of every registered model** at fp32 and at the precision ``auto`` resolves to (bf16 from
   Ampere on), at the ``reference`` size (``--size`` for another), default data, on the GPU, each epoch with
   its validation pass where the model has one: ``trainer.warmup_epochs`` 2 + 5 measured epochs through the
   harness; epoch time p50, samples/s, peak VRAM, FLOP/s and MFU (peak of the run's precision from
   ``conf/hardware``), the host syncs of one epoch under ``torch.cuda.set_sync_debug_mode`` (target 0), and
   the **projection error**: the kernel-model projection (analysis/projection/kernel_model.py, calibrated per kernel
   from public measurements) of this GPU at the run's precision (tensor cores for the bf16 rows) from the run's
   workload profile against the measured epoch, the profile kept with it (:func:`projection_error`). Its figures are an input to the calibration: docs/projection.md
   records them next to the held-out kernel error table (an epoch-level error outside the projected range
   points at the epoch-level assumptions: host cost, overlap, minimum kernel time, chains).
4. **Predicted vs measured memory**: the fake-tensor predictor (``trainbench.measure.predict``) against
   the sweep's measured peak, per model (fp32 rows); it must be within ``MEMORY_TOLERANCE`` (15%).
5. With ``--out-dir`` (the GPU run kit, ``scripts/gpu_run.sh``): ``run.py -m trainer=default`` into a SQLite
   store and ``analyze.py`` over it; the store and the report come back as archives.
6. (informational, run right after the sweep) **Tensor-core GEMMs**: one GEMM per shape of :data:`GEMM_SHAPES` at every tensor-core dtype
   the GPU has (TF32, bf16, fp16), timed with CUDA events: the per-kernel figures the projection's tensor-core
   curves are calibrated on (``scripts/calibrate_projection.py --add-gpu-report``; docs/projection.md).
7. (informational) Mamba-2's PyTorch scan vs ``mamba_ssm``'s kernels and DQN/PPO eager / compile / CUDA
   graphs side by side; then ``trainer.compile=true`` per model while the budget lasts.

The figures file is rewritten after every stage (``"complete": false`` until the end), so a stop at a time
limit keeps what was measured.

Gates (exit 1 when one fails): the self-test, the GPU tests, every sweep run completed, **0 host syncs per
epoch** (training and validation pass) in every run that measured them, and **every memory prediction
within its tolerance** (a predictor that raised fails the gate too).

Writes ``benchmarks/results/<date>-gpu-check-<host>.json`` (git keeps ``*gpu*.json``) and prints a
summary. Exit 0 when every stage passed; 1 when one failed; 2 without a CUDA GPU (nothing was checked).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The predicted peak must be within this fraction of the measured one (docs/memory.md).
MEMORY_TOLERANCE = 0.15
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]

import torch  # noqa: E402

from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK  # noqa: E402
from trainbench.core.vocab import Outcome, Series, Summary  # noqa: E402


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def selftest(device: torch.device, expected_ms: float = 100.0, repeats: int = 3) -> dict[str, Any]:
    from trainbench.measure.timing import EpochTimer, cuda_sleep_fn, sync_selftest

    sleep = cuda_sleep_fn(device)
    rows = [sync_selftest(sleep, EpochTimer(device), expected_ms) for _ in range(repeats)]
    measured = statistics.median(r.measured_ms for r in rows)
    naive = statistics.median(r.unsynchronised_ms for r in rows)
    ok = all(r.ok for r in rows) and naive < 0.5 * expected_ms
    return {"ok": ok, "expected_ms": expected_ms, "measured_ms": measured, "unsynchronised_ms": naive,
            "repeats": repeats, "rule": "measured >= 0.95 x expected and the naive clock < 0.5 x expected"}


def gpu_tests(timeout_s: float, log: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"]
    if log is not None:
        cmd += ["-rA", f"--junitxml={log.with_suffix('.xml')}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(timeout_s, 10))
    except subprocess.TimeoutExpired as e:
        if log is not None:
            log.write_text(str(e.stdout or "") + str(e.stderr or ""))
        return {"ok": False, "summary": f"timed out after {timeout_s:.0f}s"}
    if log is not None:
        log.write_text(p.stdout + p.stderr)
    tail = (p.stdout or "").strip().splitlines()
    return {"ok": p.returncode == 0, "returncode": p.returncode, "summary": tail[-1] if tail else p.stderr[-500:]}


def _predictor():
    """The memory predictor (trainbench.measure.predict): (callable trainable -> predicted peak MB, where)."""
    try:
        from trainbench.measure.predict import predict_peak
    except ImportError as e:
        return None, f"no memory predictor importable ({e}): skipped"

    def predicted_peak_mb(trainable: Any) -> float:
        cap = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        return predict_peak(trainable, int(trainable.batch_size), capability=cap).peak_bytes / 2**20

    return predicted_peak_mb, "trainbench.measure.predict.predict_peak"


def sweep_model(name: str, precision: str, tmp: str, device: torch.device, epochs: int, warmup: int,
                compile_: bool = False, size: str = "reference") -> dict[str, Any]:
    from common import build_model

    from trainbench.measure.flops import count_flops, peak_tflops
    from trainbench.measure.harness import run_epochs
    from trainbench.measure.host_sync import forbid_host_syncs

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    tr = build_model(name, tmp, device, size=size, precision=precision, compile=compile_)
    res = run_epochs(tr, device, epochs, warmup)
    row: dict[str, Any] = {"model": name, "size": size, "precision": precision, "compile": compile_,
                           "outcome": res.outcome, "error": res.error, "samples_per_epoch": tr.samples_per_epoch}
    if res.outcome != Outcome.COMPLETED:
        return row
    p50 = res.summary[Summary.EPOCH_TIME_MS_P50]
    row.update({"epoch_ms_p50": p50, "epoch_ms_mean": res.summary[Summary.EPOCH_TIME_MS_MEAN],
                "samples_per_s": tr.samples_per_epoch / (p50 / 1e3),
                "peak_vram_mb": res.summary.get(Summary.PEAK_VRAM_MB_MAX),
                "peak_host_mb": res.summary.get(Summary.PEAK_HOST_MB_MAX),
                "first_epoch_ms": res.series[Series.EPOCH_TIME_MS][0]})
    if Summary.EVAL_TIME_MS_MEAN in res.summary:
        row.update({"eval_ms_mean": res.summary[Summary.EVAL_TIME_MS_MEAN],
                    "epoch_total_ms_p50": res.summary[Summary.EPOCH_TOTAL_MS_P50]})
    if not compile_:
        with forbid_host_syncs(raise_on_sync=False) as syncs:
            tr.train_epoch()
            if hasattr(tr, "eval_epoch"):
                tr.eval_epoch()
            if cuda:
                torch.cuda.synchronize(device)
        row["host_syncs_per_epoch"] = len(syncs)
        row["host_sync_calls"] = syncs[:5]
        flops = count_flops(tr.train_epoch)
        row["tflops"] = flops.total / (p50 / 1e3) / 1e12
        peak, src = peak_tflops(torch.cuda.get_device_name(device), precision) if cuda else (None, "cpu")
        if peak:
            row["mfu_pct"] = 100 * row["tflops"] / peak
            row["peak_from"] = src
        row.update(projection_error(tr, device, row.get("epoch_total_ms_p50", p50), precision))
        predictor, where = _predictor()
        if predictor is not None and precision == "fp32":
            try:
                pred = predictor(tr)
                pred = float(getattr(pred, "peak_mb", getattr(pred, "total_mb", pred)))
                row["predicted_peak_mb"] = pred
                row["predicted_vs_measured"] = pred / row["peak_vram_mb"] if row["peak_vram_mb"] else math.nan
            except Exception as e:  # the predictor's own failure is a result, not a crash
                row["predicted_error"] = f"{where}: {type(e).__name__}: {e}"[:300]
    row["wall_s"] = time.perf_counter() - t0
    return row


def projection_error(tr: Any, device: torch.device, measured_ms: float, precision: str = "auto") -> dict[str, Any]:
    """How far the kernel-model projection (analysis/projection/roofline.py, analysis/projection/kernel_model.py) of this GPU lands
    from the epoch just measured on it: the error a CPU-measured sweep's ``roofline from cpu profile``
    projection carries, and the epoch-level input to the calibration (docs/projection.md).

    The workload profile is taken here, on the GPU run's own ops (one more epoch, untimed); a CPU run of the
    same model records the same ops except where CUDA runs a fused kernel (fused AdamW, cuDNN's LSTM), so
    this is the projector's error on the ops, not on the profiling device.
    """
    from trainbench.analysis.projection.gpus import gpu_for_device, load_gpus
    from trainbench.analysis.projection.kernel_model import check_profile
    from trainbench.analysis.projection.roofline import project, workload_from_metrics
    from trainbench.measure.workload import profile_epoch, profile_metrics

    if device.type != "cuda":
        return {"projection": {"skipped": "not a GPU"}}
    try:
        spec = gpu_for_device(load_gpus(), torch.cuda.get_device_name(device))
        if spec is None:
            return {"projection": {"skipped": f"{torch.cuda.get_device_name(device)} is not in conf/hardware"}}
        prof = profile_epoch(tr, device)
        # the device-neutral profile (kernel groups, chains, host ops) as a run records it; the aggregate rows
        # only where it cannot be projected
        usable = check_profile(prof) is None
        workload = {k: prof[k] for k in PROFILE_KEYS if k in prof} if usable else \
            workload_from_metrics(profile_metrics(prof))
        # at the run's precision (benchmarks/common.build_model leaves TF32 at PyTorch's default: off for
        # matmuls, so an fp32 row is projected at fp32; a bf16 row's matmuls on tensor cores)
        proj = project(workload, spec, precision=precision) if workload else None
        if not proj or proj.get("epoch_ms") is None:
            return {"projection": {"skipped": "no projection", "detail": proj}}
        low, high = proj["epoch_ms_range"]
        return {"projection": {"gpu": spec.name, "method": proj["method"], "projected_ms": proj["epoch_ms"],
                               "projected_range_ms": [low, high], "measured_ms": measured_ms,
                               "error_pct": 100 * (proj["epoch_ms"] - measured_ms) / measured_ms,
                               "measured_in_range": low <= measured_ms <= high, "notes": proj.get("notes"),
                               "precision": proj.get("precision"), "range_basis": proj.get("range_basis"),
                               # what the calibration re-projects (--add-gpu-report: an epoch-level check)
                               "profile": workload if usable else None}}
    except Exception as e:  # the projector's failure is a finding, not a crash of the check
        return {"projection": {"failed": f"{type(e).__name__}: {e}"[:300]}}


#: The schema-1 keys of a workload profile the projection reads (docs/projection.md, workload_profile.json).
PROFILE_KEYS = ("schema", "profiled_on", "precision", "complete", "incomplete_reasons", "optimizer", "kernels",
                "chains", "host")

#: The tensor-core GEMM stage's shapes (b, m, n, k): a large m (batch x time rows) against small to large inner
#: dimensions, where tensor cores lose most of their peak, and square ones for the large-kernel ceiling.
GEMM_SHAPES = tuple((1, m, d, d) for m in (2048, 32768, 196608) for d in (64, 128, 256, 512, 1024, 4096)) + \
    ((1, 196608, 128, 512), (1, 196608, 512, 128), (1, 4096, 4096, 4096), (1, 8192, 8192, 8192))


def tensor_dtypes(capability: tuple[int, int]) -> list[str]:
    """The tensor-core dtypes a GPU of ``capability`` runs: fp16 from Volta (7.0), TF32 and bf16 from Ampere (8.0)."""
    return (["tf32", "bf16", "fp16"] if capability >= (8, 0) else ["fp16"] if capability >= (7, 0) else [])


def time_gemms(device: torch.device, dtypes: list[str], shapes=GEMM_SHAPES, reps: int = 20,
               max_bytes: float | None = None) -> list[dict[str, Any]]:
    """Time one (batched) GEMM per shape and dtype: ``reps`` back-to-back ``torch.matmul`` into a preallocated
    output after 3 warm-up calls, timed with CUDA events (wall clock on a CPU); ``tf32``: fp32 tensors with
    TF32 matmuls allowed. Rows in the format of the calibration's tensor-core table (op, dtype, shape, flops,
    bytes, ms); a shape whose three tensors exceed ``max_bytes`` is left out, one that fails is recorded with
    its error."""
    torch_dtype = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    elem = {"tf32": 4, "fp32": 4, "bf16": 2, "fp16": 2}
    cuda = device.type == "cuda"
    was = torch.backends.cuda.matmul.allow_tf32
    rows: list[dict[str, Any]] = []
    try:
        for dtype in dtypes:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            for b, m, n, k in shapes:
                nbytes = elem[dtype] * b * (m * k + k * n + m * n)
                row = {"op": "gemm", "dtype": dtype, "shape": f"gemm:{b}x{m}x{n}x{k}", "flops": 2.0 * b * m * n * k,
                       "bytes": float(nbytes)}
                if max_bytes is not None and nbytes > max_bytes:
                    continue
                try:
                    x = torch.randn(b, m, k, device=device, dtype=torch_dtype[dtype])
                    w = torch.randn(b, k, n, device=device, dtype=torch_dtype[dtype])
                    out = torch.empty(b, m, n, device=device, dtype=torch_dtype[dtype])
                    for _ in range(3):
                        torch.matmul(x, w, out=out)
                    if cuda:
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        torch.cuda.synchronize(device)
                        start.record()
                        for _ in range(reps):
                            torch.matmul(x, w, out=out)
                        end.record()
                        end.synchronize()
                        row["ms"] = start.elapsed_time(end) / reps
                    else:
                        t0 = time.perf_counter()
                        for _ in range(reps):
                            torch.matmul(x, w, out=out)
                        row["ms"] = (time.perf_counter() - t0) * 1e3 / reps
                    del x, w, out
                except Exception as e:  # out of memory on a small card: recorded, the next shape still runs
                    row["error"] = f"{type(e).__name__}: {e}"[:200]
                    if cuda:
                        torch.cuda.empty_cache()
                rows.append(row)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
    return rows


def tensor_gemm_stage(device: torch.device) -> dict[str, Any]:
    """The tensor-core figures of this GPU (informational, no gate): :func:`time_gemms` at every tensor-core dtype
    it has. ``scripts/calibrate_projection.py --add-gpu-report <gpu-check.json>`` takes them into the
    calibration (docs/projection.md)."""
    t0 = time.perf_counter()
    cap = torch.cuda.get_device_capability(device)
    free, _ = torch.cuda.mem_get_info(device)
    rows = time_gemms(device, tensor_dtypes(cap), max_bytes=0.25 * free)
    return {"device": torch.cuda.get_device_name(device), "capability": f"{cap[0]}.{cap[1]}",
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "method": "20 back-to-back torch.matmul into a preallocated output after 3 warm-up calls, CUDA events; "
                      "tf32: fp32 tensors with torch.backends.cuda.matmul.allow_tf32",
            "rows": rows, "wall_s": round(time.perf_counter() - t0, 1)}


def mlflow_sweep(out_dir: Path, timeout_s: float, epochs: int, warmup: int,
                 models: list[str] | None = None) -> dict[str, Any]:
    """The real thing end to end: ``run.py -m`` (GPU profile) into a SQLite store, then ``analyze.py``.

    The store (database and artifacts) and the report come back as two archives in ``out_dir``.
    """
    import tarfile

    work = Path(tempfile.mkdtemp(prefix="tb-gpu-sweep-"))
    mlruns, reports = work / "mlruns", work / "reports"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    common = [f"paths.mlruns={mlruns}", f"paths.reports={reports}"]
    sweep = [sys.executable, "run.py", "-m", "trainer=default", f"trainer.epochs={epochs}",
             f"trainer.warmup_epochs={warmup}", f"hydra.sweep.dir={work / 'multirun'}", *common]
    if models:
        sweep.append("model=" + ",".join(models))
    res: dict[str, Any] = {"command": " ".join(sweep[1:])}
    t0 = time.perf_counter()
    for step, cmd, share in (("sweep", sweep, 0.85), ("analysis", [sys.executable, "analyze.py", *common], 1.0)):
        left = timeout_s - (time.perf_counter() - t0)
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(left * share, 5))
            res[f"{step}_returncode"] = p.returncode
            res[f"{step}_tail"] = (p.stdout + p.stderr)[-3000:]
        except subprocess.TimeoutExpired:
            res[f"{step}_returncode"] = None
            res[f"{step}_tail"] = f"timed out after {left * share:.0f}s"
    for name, folder in (("mlruns.tar.gz", mlruns), ("reports.tar.gz", reports)):
        if folder.exists():
            with tarfile.open(out_dir / name, "w:gz") as tar:
                tar.add(folder, arcname=folder.name)
            res[name] = str(out_dir / name)
    res["ok"] = res.get("sweep_returncode") == 0 and res.get("analysis_returncode") == 0
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def mamba_kernels_side_by_side(device: torch.device, repeats: int = 3) -> dict[str, Any]:
    """Mamba-2's epoch with the PyTorch scan and with mamba_ssm's fused kernels, interleaved, where both exist."""
    from common import SMALL_DATA, build_model, interleaved, sync_fn

    from trainbench.models.mamba2 import resolve_kernel

    fused, why = resolve_kernel("auto", device)
    if fused != "triton":
        return {"skipped": why}
    with tempfile.TemporaryDirectory(prefix="tb-gpu-check-mamba-") as tmp:
        builds = {k: build_model("mamba2", tmp, device, overrides=(f"model.kernel={k}",),
                                 n_bars=SMALL_DATA["mamba2"]) for k in ("torch", "triton")}
        t = interleaved({k: m.train_epoch for k, m in builds.items()}, repeats=repeats, sync=sync_fn(device))
    return {"torch_epoch_s": t["torch"], "triton_epoch_s": t["triton"], "triton_speedup": t["torch"] / t["triton"]}


def rl_update_variants(device: torch.device, repeats: int = 3) -> dict[str, Any]:
    """DQN and PPO epochs eager / compile / CUDA graphs / both, interleaved (benchmarks/bench_compile.py)."""
    from bench_compile import rl_graph_variants

    from trainbench.models.registry import REGISTRY

    return {s.name: rl_graph_variants(s.name, device, repeats) for s in REGISTRY.specs() if s.cuda_graphs}


def fast_path_stage(device: torch.device) -> dict[str, Any]:
    """Informational stage (never fails the check): the two comparisons above, each error recorded."""
    out: dict[str, Any] = {}
    for key, fn in (("mamba2_kernels", mamba_kernels_side_by_side), ("rl_updates", rl_update_variants)):
        try:
            out[key] = fn(device)
        except Exception as e:
            out[key] = {"failed": repr(e)[:300]}
        print(f"[info] {key}: {json.dumps(out[key], default=str)[:400]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-s", type=float, default=450.0, help="whole-run budget (default 450 s)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--models", nargs="*", default=None, help="registered model names (default: all)")
    ap.add_argument("--size", default="reference", help="model size of the sweep (default: reference)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="exercise the sweep stage on the CPU (fp32, no compile, no self-test or GPU tests); "
                         "for the script's own test: it checks nothing about a GPU")
    ap.add_argument("--out", default=None, help="the figures JSON (default benchmarks/results/<date>-gpu-check-<host>.json)")
    ap.add_argument("--out-dir", default=None,
                    help="write everything here (the GPU kit's $OUT): gpu-check.json after every stage, the "
                         "pytest log, and the MLflow sweep's store and report as archives")
    ap.add_argument("--sweep-epochs", type=int, default=20, help="measured epochs per model in the MLflow sweep")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available() and not args.cpu_dry_run:
        print("gpu-check: no CUDA GPU visible to torch (torch.cuda.is_available() is False; torch "
              f"{torch.__version__}, CUDA build {torch.version.cuda}). Nothing was checked. Run it on a machine "
              "with an NVIDIA GPU and a CUDA build of torch.", file=sys.stderr)
        return EXIT_BAD_INPUT

    from trainbench.models.registry import REGISTRY

    budget = Budget(args.budget_s)
    dry = args.cpu_dry_run
    device = torch.device("cpu" if dry else "cuda")
    name = "cpu (dry run)" if dry else torch.cuda.get_device_name(device)
    models = args.models or REGISTRY.names()
    print(f"gpu-check on {name} (torch {torch.__version__}, CUDA {torch.version.cuda}), budget {args.budget_s:.0f}s")
    report: dict[str, Any] = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
                              "host": socket.gethostname(), "budget_s": args.budget_s, "stages": {}}
    ok = True
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    out_dir = Path(args.out_dir) if args.out_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    default = f"{stamp}-{'cpu-dry-run' if dry else 'gpu-check'}-{socket.gethostname()}.json"
    out = Path(args.out) if args.out else (out_dir / "gpu-check.json" if out_dir
                                           else ROOT / "benchmarks" / "results" / default)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(final: bool = False) -> None:
        """Write what is known so far: a stop at the time limit keeps every finished stage."""
        report["ok"] = bool(ok) if final else None
        report["complete"] = final
        report["seconds"] = round(args.budget_s - budget.left(), 1)
        out.write_text(json.dumps(report, indent=2, default=str))

    if not dry:
        st = selftest(device)
        report["stages"]["sync_selftest"] = st
        ok &= st["ok"]
        save()
        print(f"[{'ok' if st['ok'] else 'FAIL'}] sync self-test: {st['expected_ms']:.0f} ms sleep timed "
              f"{st['measured_ms']:.1f} ms (synchronised), {st['unsynchronised_ms']:.2f} ms (naive)")

    if not args.skip_tests and not dry:
        gt = gpu_tests(min(150.0, budget.left() * 0.3), out_dir / "pytest-gpu.log" if out_dir else None)
        report["stages"]["gpu_tests"] = gt
        ok &= gt["ok"]
        save()
        print(f"[{'ok' if gt['ok'] else 'FAIL'}] pytest -m gpu: {gt['summary']}")

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tb-gpu-check-") as tmp:
        from trainbench.measure.precision import resolve_precision

        resolved = "fp32" if dry else resolve_precision("auto", "cuda", torch.cuda.get_device_capability(device))[0]
        for precision in dict.fromkeys(("fp32", resolved)):  # fp32 and what trainer.precision=auto picks here
            for m in models:
                if budget.left() < 30:
                    rows.append({"model": m, "precision": precision, "outcome": "skipped (budget)"})
                    continue
                try:
                    rows.append(sweep_model(m, precision, tmp, device, args.epochs, args.warmup, size=args.size))
                except Exception as e:
                    traceback.print_exc()
                    rows.append({"model": m, "precision": precision, "outcome": Outcome.FAILED, "error": repr(e)[:300]})
                _print_row(rows[-1])
                report["stages"]["sweep"] = rows
                save()
    report["stages"]["sweep"] = rows
    failed = [r for r in rows if r["outcome"] != Outcome.COMPLETED and not r["outcome"].startswith("skipped")]
    syncs = [r for r in rows if r.get("host_syncs_per_epoch")]
    ok &= not failed
    print(f"[{'ok' if not failed else 'FAIL'}] sweep: {len(rows)} runs, {len(failed)} failed, "
          f"{len(syncs)} with host syncs in the epoch")
    proj = [r for r in rows if "projected_ms" in (r.get("projection") or {})]
    report["stages"]["projection"] = {
        "rule": "calibrated kernel model (analysis/projection/kernel_model.py) of this GPU at the run's precision vs the "
                "measured epoch (train + eval); an input to docs/projection.md's calibration table",
        "rows": [{"model": r["model"], "precision": r["precision"], **r["projection"]} for r in proj]}
    for r in proj:  # the profile once, in the projection stage (what --add-gpu-report reads)
        r["projection"].pop("profile", None)
    for r in proj:
        pr = r["projection"]
        print(f"[info] projection {r['model']:7s} {r['precision']}: {pr['projected_ms']:.1f} ms projected "
              f"[{pr['projected_range_ms'][0]:.1f}, {pr['projected_range_ms'][1]:.1f}] vs {pr['measured_ms']:.1f} "
              f"measured ({pr['error_pct']:+.0f}%)")
    syncs_ok = not syncs
    report["stages"]["host_syncs"] = {"ok": syncs_ok, "rule": "0 host syncs per epoch (training + validation)",
                                      "runs_with_syncs": [{k: r.get(k) for k in ("model", "precision",
                                                           "host_syncs_per_epoch", "host_sync_calls")}
                                                          for r in syncs]}
    ok &= syncs_ok
    print(f"[{'ok' if syncs_ok else 'FAIL'}] host syncs per epoch: "
          + ("0 in every run" if syncs_ok else ", ".join(f"{r['model']} {r['precision']}: "
                                                         f"{r['host_syncs_per_epoch']}" for r in syncs)))
    if not dry:
        try:
            tg = tensor_gemm_stage(device)
        except Exception as e:  # informational: a failure is recorded, not a crash of the check
            tg = {"failed": f"{type(e).__name__}: {e}"[:300]}
        report["stages"]["tensor_gemms"] = tg
        save()
        print(f"[info] tensor-core GEMMs: {len(tg.get('rows', []))} timed at {', '.join(tensor_dtypes(torch.cuda.get_device_capability(device)))} "
              f"({tg.get('wall_s', 0):.0f}s){': ' + tg['failed'] if 'failed' in tg else ''}")
    _, why = _predictor()
    mem = memory_gate(rows, dry) if _predictor()[0] else {"skipped": why, "ok": True}
    report["stages"]["memory_prediction"] = mem
    ok &= mem["ok"]
    print(f"[{'ok' if mem['ok'] else 'FAIL'}] memory prediction: {mem.get('skipped') or mem['summary']}")
    save()
    if out_dir is not None and not dry:
        if budget.left() > 90:
            ms = mlflow_sweep(out_dir, min(budget.left() - 30, 240), args.sweep_epochs, args.warmup, args.models)
            report["stages"]["mlflow_sweep"] = ms
            ok &= ms["ok"]
            save()
            print(f"[{'ok' if ms['ok'] else 'FAIL'}] MLflow sweep + analysis ({ms['wall_s']:.0f}s): "
                  f"{ms.get('analysis_tail', '')[-400:]}")
        else:
            report["stages"]["mlflow_sweep"] = {"skipped": f"budget: {budget.left():.0f}s left"}
    if not dry and budget.left() > 90:
        report["stages"]["fast_paths"] = fast_path_stage(device)
        save()
    compiled: list[dict[str, Any]] = []  # last: compilation takes tens of seconds per model
    with tempfile.TemporaryDirectory(prefix="tb-gpu-check-") as tmp:
        for m in [] if dry else models:
            if budget.left() < 120:
                compiled.append({"model": m, "precision": "fp32", "compile": True, "outcome": "skipped (budget)"})
                continue
            try:
                compiled.append(sweep_model(m, "fp32", tmp, device, args.epochs, max(args.warmup, 2), compile_=True,
                                            size=args.size))
            except Exception as e:
                compiled.append({"model": m, "precision": "fp32", "compile": True, "outcome": "failed",
                                 "error": repr(e)[:300]})
            _print_row(compiled[-1])
            report["stages"]["compile"] = compiled
            save()
    ok &= not [r for r in compiled if r["outcome"] not in ("completed",) and not r["outcome"].startswith("skipped")]
    save(final=True)
    print(f"wrote {out} ({report['seconds']:.0f}s); {'PASSED' if ok else 'FAILED'}")
    return EXIT_OK if ok else EXIT_FAILED


def memory_gate(rows: list[dict[str, Any]], dry: bool = False) -> dict[str, Any]:
    """Every memory prediction within MEMORY_TOLERANCE of the measured peak (a predictor error fails).

    On the CPU dry run there is no VRAM peak to compare with: the rows are listed, the gate passes.
    """
    keys = ("model", "precision", "predicted_peak_mb", "peak_vram_mb", "predicted_vs_measured", "predicted_error")
    listed = [{k: r.get(k) for k in keys} for r in rows if "predicted_peak_mb" in r or "predicted_error" in r]
    bad = []
    for r in listed:
        ratio = r.get("predicted_vs_measured")
        if r.get("predicted_error"):
            bad.append(f"{r['model']}: {r['predicted_error']}")
        elif not dry and (ratio is None or not math.isfinite(ratio) or abs(ratio - 1) > MEMORY_TOLERANCE):
            bad.append(f"{r['model']}: predicted/measured = {ratio}")
    summary = (f"{len(listed)} compared, all within {MEMORY_TOLERANCE:.0%}" if not bad
               else f"outside {MEMORY_TOLERANCE:.0%} or failed: " + "; ".join(bad))
    if dry:
        summary = f"{len(listed)} listed (CPU dry run: no VRAM peak to compare)"
    return {"ok": not bad, "tolerance": MEMORY_TOLERANCE, "rows": listed, "summary": summary}


def _print_row(r: dict[str, Any]) -> None:
    tag = f"{r['model']:7s} {r.get('size', '')} {r['precision']}{' compile' if r.get('compile') else ''}"
    if r["outcome"] != "completed":
        print(f"  {tag:22s} {r['outcome']} {r.get('error') or ''}")
        return
    flops = f" {r['tflops']:.3f} TFLOP/s" if "tflops" in r else ""
    mfu = f" MFU {r['mfu_pct']:.2f}%" if "mfu_pct" in r else ""
    print(f"  {tag:22s} epoch p50 {r['epoch_ms_p50']:9.2f} ms  {r['samples_per_s']:11.0f} samples/s  "
          f"peak {r['peak_vram_mb'] or r['peak_host_mb'] or 0:8.1f} MB  syncs {r.get('host_syncs_per_epoch', '-')}{flops}{mfu}")


if __name__ == "__main__":
    raise SystemExit(main())
