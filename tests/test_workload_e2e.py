"""A CPU run through run.py records its workload: model size, resolved precision and its reason, how the
measurement stopped, and for a supervised model the validation pass per epoch."""

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_cpu_run_records_size_precision_and_the_validation_pass(tmp_path):
    cmd = [sys.executable, "run.py", "debug=default", "model=mamba2", "model.seq_len=32", "trainer=cpu",
           "trainer.epochs=2", "trainer.warmup_epochs=1", "trainer.latency.enabled=false",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
           f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    params, tags = run.data.params, run.data.tags
    assert params["model.size"] == "small" and tags["model_size"] == "small" and "__small__" in run.info.run_name
    assert params["trainer.precision"] == "auto" and params["trainer.precision_resolved"] == "fp32"
    assert "cpu" in params["trainer.precision_reason"] and params["trainer.tf32_resolved"] == "False"
    assert tags["stop_reason"] == "max_epochs" and params["train_samples"] == params["samples_per_epoch"]
    for key in ("val_loss", "eval_time_ms", "loss", "epoch_time_ms"):
        assert [h.step for h in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2], key
    assert run.data.metrics["epoch_total_ms_mean"] > run.data.metrics["epoch_time_ms_mean"]
