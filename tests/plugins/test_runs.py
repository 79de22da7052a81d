"""Plugins in real jobs: a plugin trains and records its origin while a broken plugin beside it fails alone
with one line (exit 2); model=custom model.spec=... loads a model by path, a bad path is one line (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import mlflow
import pytest

from helpers.plugins import FAKE_LSTM
from helpers.procs import REPO as REPO_ROOT
from trainbench.core import entrypoints as plugins
from trainbench.core.errors import PluginError, UnknownModelError
from trainbench.core.vocab import Outcome, Tag
from trainbench.data import loader
from trainbench.data.in_memory import make_market_data
from trainbench.models.registry import Registry, register_custom_from_argv

PATH = "lstm_forecaster.model:SPEC"


def _tracking(tmp_path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/a",
            "debug=default", "trainer.latency.enabled=false", "trainer.profile_workload=false"]


@pytest.fixture
def registry(fake_dist, example_on_path, clean_config_store, monkeypatch):
    """trainbench's models plus an installed plugin and a broken one, as train.py and Hydra see them."""
    from trainbench import train
    from trainbench.compose import register_configs
    from trainbench.models.registry import register_model_configs

    fake_dist("fake-lstm", "0.3.1", {"fake_lstm": "fake_lstm_plugin:SPEC"},
              modules={"fake_lstm_plugin.py": FAKE_LSTM.format(name="fake_lstm")})
    fake_dist("bad-plugin", "2.0", {"broken": "bad_plugin_missing.model:SPEC"})
    reg = Registry(plugins.sources())
    register_configs()
    for spec in reg.specs():
        clean_config_store.store(group="model", name=f"base_{spec.name}", node=spec.config_cls)
    register_model_configs(clean_config_store, reg)
    monkeypatch.setattr(train, "REGISTRY", reg)
    monkeypatch.setattr(loader, "load_market_data", lambda *a, **k: make_market_data(1500))
    return reg


@pytest.mark.slow
def test_a_plugin_trains_beside_a_broken_one_which_fails_alone_with_one_line(registry, tmp_path, capsys):
    from trainbench.cli import run_job
    from trainbench.compose import compose_run
    from trainbench.train import train_job

    with pytest.raises(SystemExit) as info:
        run_job(compose_run(["model=broken", *_tracking(tmp_path)]))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: model 'broken' (plugin bad-plugin 2.0") and "\n" not in err
    assert "pip uninstall bad-plugin" in err

    cfg = compose_run(["model=fake_lstm", "size=small", "model.window=8", "model.hidden=8",
                       "sweep_id=plugin-run", *_tracking(tmp_path)])
    assert train_job(cfg) == Outcome.COMPLETED
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs(client.get_experiment_by_name("trainbench").experiment_id)
    assert run.data.tags[Tag.MODEL] == "fake_lstm" and run.data.tags[Tag.MODEL_ORIGIN] == "fake-lstm 0.3.1"
    assert run.data.params["model.hidden"] == "8" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED


def test_model_custom_loads_the_spec_from_its_path(example_on_path, clean_config_store, tmp_path, monkeypatch):
    from trainbench.compose import compose_run, register_configs
    from trainbench.config.run import validate

    monkeypatch.chdir(tmp_path)  # a module of the project the user runs from
    (tmp_path / "my_lstm.py").write_text(FAKE_LSTM.format(name="my_lstm"))
    reg = Registry(plugins.sources())
    register_configs()
    argv = ["model=custom", "model.spec=my_lstm:SPEC", "size=reference"]
    register_custom_from_argv(argv, reg)
    model = validate(compose_run(argv)).model
    assert type(model).__name__ == "LSTMForecasterConfig"
    assert (model.name, model.spec, model.size, model.hidden) == ("my_lstm", "my_lstm:SPEC", "reference", 128)
    assert reg.resolve(model).name == "my_lstm" and reg.origin("my_lstm") == "my_lstm:SPEC"
    sys.modules.pop("my_lstm", None)


def test_model_custom_without_a_spec_and_bad_paths_say_what_to_give(example_on_path, capsys):
    from trainbench.config.run import ModelConfig

    reg = Registry(plugins.sources())
    with pytest.raises(UnknownModelError, match=r"model=custom needs model.spec=<package.module>:<SPEC>"):
        reg.resolve(ModelConfig(name="custom"))
    for path, needle in (("lstm_forecaster.model", "not a model spec path"),
                         ("lstm_forecaster.nope:SPEC", "cannot import 'lstm_forecaster.nope'"),
                         ("lstm_forecaster.model:NOPE", "no attribute 'NOPE'"),
                         ("lstm_forecaster.model:LSTMForecasterConfig", "not a trainbench ModelSpec"),
                         ("trainbench.models.dqn:SPEC", None)):
        if needle is None:  # a built-in's own spec by path: the same model, nothing new registered
            assert reg.load_path(path) is reg.get("dqn") and reg.origin("dqn") == "builtin"
            continue
        with pytest.raises(PluginError, match=needle):
            reg.load_path(path)
    bad = ["model=custom", "model.spec=no_such_pkg.mod:SPEC"]
    with pytest.raises(PluginError, match="cannot import"):  # the registry raises; the command line exits
        register_custom_from_argv(bad, reg)
    assert capsys.readouterr().err == ""
    from trainbench.cli import load_custom_model

    with pytest.raises(SystemExit) as info:
        load_custom_model(bad)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: model.spec=no_such_pkg.mod:SPEC: cannot import")


def test_run_py_with_a_bad_spec_path_exits_2_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), "model=custom", "model.spec=nowhere.model:SPEC",
                        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.spec=nowhere.model:SPEC" in lines[0] and "<package.module>:<SPEC>" in lines[0]
    assert not (tmp_path / "mlflow.db").exists()  # nothing opened, nothing recorded


@pytest.mark.slow
def test_run_py_help_lists_the_models_with_their_origins(fake_dist, tmp_path):
    import os

    from helpers.plugins import EXAMPLE

    fake_dist("fake-lstm", "0.3.1", {"fake_lstm": "fake_lstm_plugin:SPEC"},
              modules={"fake_lstm_plugin.py": FAKE_LSTM.format(name="fake_lstm")})
    fake_dist("bad-plugin", "2.0", {"broken": "bad_plugin_missing.model:SPEC"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(EXAMPLE.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), "--help"], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("  ")}
    assert "builtin" in lines["dqn"] and "fake-lstm 0.3.1" in lines["fake_lstm"]
    assert "BROKEN" in lines["broken"] and "pip uninstall bad-plugin" in lines["broken"]
    (options,) = [line for line in r.stdout.splitlines() if line.startswith("model: ")]  # Hydra's option list
    assert "fake_lstm" in options.split(", ") and "broken" in options.split(", ")


def test_a_model_custom_run_reruns_from_its_logged_spec_path(example_on_path, tmp_path, monkeypatch):
    """`rerun=<id>` of a model=custom run finds the model again through the model.spec it logged."""
    from omegaconf import OmegaConf

    import trainbench.models.registry as registry
    from trainbench.core.errors import RerunError
    from trainbench.rerun.configs import typed_config

    monkeypatch.setattr(registry, "REGISTRY", Registry(plugins.sources()))  # the global one stays as it is
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "my_rerun_lstm.py").write_text(FAKE_LSTM.format(name="my_rerun_lstm"))
    original = {"model": {"name": "my_rerun_lstm", "spec": "my_rerun_lstm:SPEC", "hidden": 8, "size": "small"}}
    merged = typed_config(original)
    assert type(OmegaConf.to_object(merged.model)).__name__ == "LSTMForecasterConfig"
    assert (merged.model.spec, merged.model.hidden) == ("my_rerun_lstm:SPEC", 8)
    with pytest.raises(RerunError, match="my_gone_lstm"):
        typed_config({"model": {"name": "my_gone_lstm", "spec": "my_gone_lstm:SPEC"}})
    sys.modules.pop("my_rerun_lstm", None)
