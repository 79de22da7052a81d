"""A CPU run through run.py records its workload: model size, resolved precision and its reason, how the
measurement stopped, and for a supervised model the validation pass per epoch."""

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.vocab import ParamKey, Series, StopReason, Summary, Tag

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
    assert params[ParamKey.MODEL_SIZE] == "small" and tags[Tag.MODEL_SIZE] == "small" and "__small__" in run.info.run_name
    assert params[ParamKey.TRAINER_PRECISION] == "auto" and params[ParamKey.PRECISION_RESOLVED] == "fp32"
    assert "cpu" in params[ParamKey.PRECISION_REASON] and params[ParamKey.TF32_RESOLVED] == "False"
    assert tags[Tag.STOP_REASON] == StopReason.MAX_EPOCHS and params[ParamKey.TRAIN_SAMPLES] == params[ParamKey.SAMPLES_PER_EPOCH]
    for key in (Series.VAL_LOSS, Series.EVAL_TIME_MS, "loss", Series.EPOCH_TIME_MS):
        assert [h.step for h in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2], key
    assert run.data.metrics[Summary.EPOCH_TOTAL_MS_MEAN] > run.data.metrics[Summary.EPOCH_TIME_MS_MEAN]
