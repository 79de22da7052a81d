"""An out-of-memory error in epoch 3 of 5, through train_job into a real MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

import trainbench.data.loader as loader
import trainbench.train as train
from trainbench.compose import compose_run
from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Summary, Tag
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import ModelSpec
from trainbench.models.registry import REGISTRY


class _OOMRegistry:
    """The real registry, except that the model's epochs raise CUDA's OOM error from the fourth on."""

    def __getattr__(self, attr):  # origin(), names(), ...: the real registry's
        return getattr(REGISTRY, attr)

    def resolve(self, model_cfg):
        return self.get(model_cfg.name)

    def get(self, name):
        spec = REGISTRY.get(name)

        def build(cfg, data, ctx):
            tr = spec.build(cfg, data, ctx)
            real, count = tr.train_epoch, [0]

            def train_epoch():
                if count[0] == 3:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
                count[0] += 1
                return real()

            tr.train_epoch = train_epoch
            return tr

        return ModelSpec(name=spec.name, config_cls=spec.config_cls, build=build, data_kind=spec.data_kind)


@pytest.mark.slow
def test_oom_in_epoch_3_of_5_is_a_failed_run_with_outcome_oom_and_three_epochs(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "REGISTRY", _OOMRegistry())
    monkeypatch.setattr(loader, "load_market_data", lambda *a, **k: make_market_data())
    cfg = compose_run(["model=dqn", "debug=default", "trainer.epochs=5", "trainer.warmup_epochs=0",
                       "model.updates_per_epoch=2", "model.learning_starts=64", "trainer.latency.enabled=false",
                       f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/a",
                       "sweep_id=oom-test"])
    with pytest.raises(train.JobFailed) as info:
        train.train_job(cfg)
    assert info.value.outcome == Outcome.OOM
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run = client.get_run(info.value.run_id)
    assert run.info.status == "FAILED" and run.data.tags[Tag.OUTCOME] == Outcome.OOM
    assert "out of memory" in run.data.tags[Tag.ERROR]
    assert [m.step for m in client.get_metric_history(run.info.run_id, Series.EPOCH_TIME_MS)] == [0, 1, 2]
    assert run.data.metrics[Summary.EPOCHS_MEASURED] == 3 and run.data.metrics[Summary.PEAK_HOST_MB_AT_FAILURE] > 0
    epochs = json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.EPOCHS, str(tmp_path))).read_text())
    assert len(epochs[Series.EPOCH_TIME_MS]) == 3 and len(epochs["loss"]) == 3
    fit = json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.MEMORY_FIT, str(tmp_path))).read_text())
    assert fit["source"] == "config" and fit["plan"] == {"micro": 230, "accum": 1, "optimiser": 230}
    assert run.data.params[ParamKey.BATCH_SIZE_RESOLVED] == "230" and run.data.tags[Tag.BATCH_SIZE_SOURCE] == "config"
