"""`model.batch_size=auto` on a CPU through run.py: a labelled prediction for the card, logged to the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.vocab import Artifact, Outcome, ParamKey, Summary, Tag

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_auto_batch_on_cpu_predicts_for_the_4gb_card(tmp_path):
    cmd = [sys.executable, "run.py", "debug=default", "model=tft", "model.batch_size=auto", "hardware=rtx3050ti_4gb",
           "trainer.device=cpu", "model.max_batch_size=64", "trainer.epochs=1", "trainer.warmup_epochs=0",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
           f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "PREDICTION (fake-tensor trace on cpu; no GPU used): tft on hardware=rtx3050ti_4gb" in p.stdout
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    t, params, m = run.data.tags, run.data.params, run.data.metrics
    assert t["outcome"] == Outcome.COMPLETED and t[Tag.BATCH_SIZE_SOURCE] == "predicted"
    assert t[Tag.PREDICTED_BATCH_SIZE] == "64" and t[Tag.PREDICTED_FITS] == "true"  # the small TFT fits 64 easily
    assert params[ParamKey.BATCH_SIZE] == "auto" and params[ParamKey.BATCH_SIZE_RESOLVED] == "64"
    assert params[ParamKey.MEMORY_BUDGET_MB] == "4096.0" and params[ParamKey.MEMORY_BUDGET_SOURCE] == "hardware.vram_mb"
    assert 0 < m[Summary.PREDICTED_PEAK_VRAM_MB] < m[Summary.PREDICTED_PEAK_VRAM_RESERVED_MB] < 4096
    assert Summary.PEAK_VRAM_MB_MAX not in m  # a CPU run never reports a measured VRAM figure
    fit = json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.MEMORY_FIT, str(tmp_path))).read_text())
    assert [pr["batch_size"] for pr in fit["search"]["probes"]] == [32, 64]
    assert all(pr["fits"] for pr in fit["search"]["probes"]) and fit["prediction"]["peak_mb"] > 0
