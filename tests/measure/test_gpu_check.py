"""scripts/gpu_check.py: a clear non-zero exit without a GPU, and its sweep stage exercised on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from trainbench.core.vocab import Outcome, Series

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_exits_2_with_a_message_without_a_gpu(tmp_path, capsys):
    assert _load().main(["--out", str(tmp_path / "r.json")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_cpu_dry_run_sweeps_and_writes_its_report(tmp_path):
    out = tmp_path / "r.json"
    assert _load().main(["--cpu-dry-run", "--models", "dqn", "--epochs", "1", "--warmup", "1",
                         "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["stages"]["sweep"]
    assert row["model"] == "dqn" and row["outcome"] == Outcome.COMPLETED
    assert row["host_syncs_per_epoch"] == 0 and row[Series.SAMPLES_PER_S] > 0 and row["tflops"] > 0
    assert "skipped" in report["stages"]["memory_prediction"] or report["stages"]["memory_prediction"]["rows"]
    assert report["ok"] is True


def test_tensor_dtypes_follow_the_architecture():
    mod = _load()
    assert mod.tensor_dtypes((6, 1)) == [] and mod.tensor_dtypes((7, 0)) == ["fp16"]
    assert mod.tensor_dtypes((7, 5)) == ["fp16"] and mod.tensor_dtypes((8, 6)) == ["tf32", "bf16", "fp16"]


def test_timed_gemms_are_rows_of_the_calibrations_tensor_table():
    """The tensor-core stage's timing, exercised on the CPU with tiny shapes: rows the calibration reads
    (scripts/calibrate_projection.py --add-gpu-report), too-large shapes left out, TF32 setting restored."""
    mod = _load()
    before = torch.backends.cuda.matmul.allow_tf32
    rows = mod.time_gemms(torch.device("cpu"), ["tf32", "bf16"], shapes=((1, 32, 16, 8), (2, 8, 8, 8), (1, 4096, 4096, 4096)),
                          reps=2, max_bytes=1e6)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert [(r["dtype"], r["shape"]) for r in rows] == [("tf32", "gemm:1x32x16x8"), ("tf32", "gemm:2x8x8x8"),
                                                        ("bf16", "gemm:1x32x16x8"), ("bf16", "gemm:2x8x8x8")]
    r = rows[0]
    assert r["op"] == "gemm" and r["flops"] == 2 * 32 * 16 * 8 and r["bytes"] == 4 * (32 * 8 + 8 * 16 + 32 * 16)
    assert rows[2]["bytes"] == r["bytes"] / 2 and all(x["ms"] > 0 for x in rows)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_tensor_gemm_stage_times_every_tensor_dtype_of_the_gpu():
    mod = _load()
    stage = mod.tensor_gemm_stage(torch.device("cuda"))
    timed = [r for r in stage["rows"] if "ms" in r]
    cap = torch.cuda.get_device_capability()
    assert {r["dtype"] for r in timed} == set(mod.tensor_dtypes(cap)) and stage["device"] and stage["date"]
    big = [r for r in timed if r["shape"] == "gemm:1x4096x4096x4096"]
    assert all(r["flops"] / (r["ms"] * 1e-3) > 1e12 for r in big)  # tensor cores, not a CPU fallback
