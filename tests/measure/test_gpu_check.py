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
