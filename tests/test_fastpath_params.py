"""Each fast-path switch a run used is recorded in its MLflow params, so timings compare like with like."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from trainbench.compose import compose_run
from trainbench.core.vocab import FAST_PATH_KEYS, Outcome, ParamKey
from trainbench.train import train_job


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store and one data file for all runs here (creating a store costs seconds)."""
    return tmp_path_factory.mktemp("fastpaths")


def _run(tmp_path, *overrides: str) -> dict[str, str]:
    cfg = compose_run(["debug=default", "model=dqn", "model.updates_per_epoch=5", "model.learning_starts=256",
                       "trainer.latency.enabled=false", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                       f"tracking.artifact_location={tmp_path}/artifacts", f"paths.data_dir={tmp_path}/data",
                       "sweep_id=fastpaths", *overrides])
    assert train_job(cfg) == Outcome.COMPLETED
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].data.params


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.slow
def test_precision_is_recorded_in_params(store, precision):
    params = _run(store, f"trainer.precision={precision}")
    assert params[ParamKey.TRAINER_PRECISION] == precision
    assert params[ParamKey.TRAINER_COMPILE] == "False" and params[ParamKey.TRAINER_OPTIMIZER_IMPL] == "auto"
    assert set(FAST_PATH_KEYS) <= set(params)


def test_compile_and_optimizer_impl_are_recorded_in_params(store, monkeypatch):
    compiled = []

    def fake_compile(module, **kwargs):  # the real one takes ~30 s on a CPU; the switch is what is tested
        compiled.append(module)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    params = _run(store, "trainer.compile=true", "trainer.optimizer_impl=forloop", "trainer.precision=bf16")
    assert compiled, "trainer.compile=true did not reach the model's build"
    assert params[ParamKey.TRAINER_COMPILE] == "True"
    assert params[ParamKey.TRAINER_OPTIMIZER_IMPL] == "forloop"
    assert params[ParamKey.TRAINER_PRECISION] == "bf16"


def test_cuda_graphs_on_a_cpu_is_ignored_with_the_reason_and_denormals_flushed(store):
    params = _run(store, "trainer.cuda_graphs=true")
    assert params["trainer.cuda_graphs"] == "True"
    assert params[ParamKey.CUDA_GRAPHS_RESOLVED] == "False"
    assert "cpu has no CUDA graphs" in params[ParamKey.CUDA_GRAPHS_REASON]
    assert params[ParamKey.CPU_FLUSH_DENORMAL] in ("True", "False")  # False only where the CPU cannot flush
