"""The Hydra callbacks (sweep/callbacks.py): conf/config.yaml names them in their order; a sweep's start
tags a new experiment as model training once and a tagged one never again; the SLURM callback leaves other
launchers alone and fails a sweep whose SLURM jobs ended without a result; each job's config is pickled."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from trainbench import CONF_DIR
from trainbench.tracking.conventions import CUSTOM_MODEL_DEVELOPMENT, EXPERIMENT_KIND_TAG


def _sweep_config(tmp_path, *overrides):
    """run.py -m's config as the sweep's callbacks get it (the hydra section included)."""
    from hydra import compose, initialize_config_dir

    from trainbench.compose import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", return_hydra_config=True, overrides=[
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
            f"paths.root={tmp_path}", f"hydra.sweep.dir={tmp_path}/multi", *overrides])


def test_the_config_names_the_three_callbacks_of_this_module(tmp_path):
    from hydra.utils import instantiate

    from trainbench.sweep import callbacks

    named = _sweep_config(tmp_path).hydra.callbacks
    # the output folder's check before Hydra makes it; the launchers' checks next: they end the sweep last
    assert list(named) == ["output_dir", "launcher_checks", "tracking", "save_job_config"]
    made = [type(instantiate(c)) for c in named.values()]
    assert made == [callbacks.OutputDirCallback, callbacks.LauncherChecksCallback, callbacks.TrackingCallback,
                    callbacks.SaveJobConfig]


@pytest.fixture
def kind_tag_writes(monkeypatch):
    """Every write of the experiment-kind tag, by any MlflowClient (at creation or afterwards)."""
    from mlflow.tracking import MlflowClient

    writes: list[str] = []
    set_tag, create = MlflowClient.set_experiment_tag, MlflowClient.create_experiment

    def counted_set_tag(self, experiment_id, key, value):
        if key == EXPERIMENT_KIND_TAG:
            writes.append(f"set_experiment_tag {value}")
        return set_tag(self, experiment_id, key, value)

    def counted_create(self, name, artifact_location=None, tags=None):
        if EXPERIMENT_KIND_TAG in (tags or {}):
            writes.append(f"create_experiment {tags[EXPERIMENT_KIND_TAG]}")
        return create(self, name, artifact_location=artifact_location, tags=tags)

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", counted_set_tag)
    monkeypatch.setattr(MlflowClient, "create_experiment", counted_create)
    return writes


def _start_sweep(config) -> None:
    """What `run.py -m` does against the store before and as its first job starts."""
    from hydra.core.hydra_config import HydraConfig

    from trainbench.sweep.callbacks import TrackingCallback
    from trainbench.tracking.connection import connect

    cb = TrackingCallback()
    try:
        cb.on_multirun_start(config)
        assert cb.sweep_run is not None
        connect(config.tracking)  # the job's own connect (train.run_job)
        cb.sweep_run.end()
    finally:
        HydraConfig.instance().cfg = None  # the callback set it for the sweep


@pytest.mark.slow
def test_a_sweep_start_tags_a_new_experiment_once_and_a_tagged_one_never(tmp_path, kind_tag_writes, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr("trainbench.sweep.jobs.install_stop_handlers", lambda: None)  # not in the test process
    config = _sweep_config(tmp_path)
    _start_sweep(config)
    assert kind_tag_writes == [f"create_experiment {CUSTOM_MODEL_DEVELOPMENT}"]
    _start_sweep(config)  # the next sweep on that store
    assert len(kind_tag_writes) == 1
    # an experiment made without the tag (by hand, by an older trainbench) gets it once
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp_id = client.create_experiment("by-hand")
    _start_sweep(_sweep_config(tmp_path, "tracking.experiment=by-hand"))
    assert kind_tag_writes[1:] == [f"set_experiment_tag {CUSTOM_MODEL_DEVELOPMENT}"]
    assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND_TAG] == CUSTOM_MODEL_DEVELOPMENT


def test_the_slurm_callback_leaves_other_launchers_alone_and_fails_a_sweep_with_lost_jobs(monkeypatch, capsys):
    from trainbench.sweep import slurm
    from trainbench.sweep.callbacks import LauncherChecksCallback

    def no_check(request):
        raise AssertionError("preflight ran for a launcher that is not trainbench_slurm")

    monkeypatch.setattr(slurm, "preflight", no_check)
    cb = LauncherChecksCallback()
    cb.on_multirun_start(OmegaConf.create({"hydra": {"launcher": {
        "_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}}}))
    cb.on_multirun_end(OmegaConf.create({}))  # no SLURM job was lost: the sweep's own exit stands
    monkeypatch.setattr(slurm, "_LOST", ["12_0", "12_1"])
    with pytest.raises(SystemExit) as e:
        cb.on_multirun_end(OmegaConf.create({}))
    assert e.value.code == 1 and "2 SLURM job(s) ended without a result: 12_0, 12_1" in capsys.readouterr().err


def test_each_jobs_config_is_pickled_for_hydras_rerun(tmp_path):
    from trainbench.sweep.callbacks import SaveJobConfig

    cfg = OmegaConf.create({"x": 1, "hydra": {"output_subdir": ".hydra", "runtime": {"output_dir": str(tmp_path)}}})
    SaveJobConfig().on_job_start(cfg)
    assert pickle.loads((tmp_path / ".hydra" / "config.pickle").read_bytes()).x == 1


def test_a_jobs_config_is_pickled_whole_under_a_launcher_that_reimports_its_plugins(tmp_path, monkeypatch):
    """Under hydra/launcher=submitit_local the launcher's config class is imported again in the job, and the
    typed config no longer pickles: config.pickle holds Hydra's node as plain values under Hydra's own type
    (what --experimental-rerun reads), never an empty file."""
    import hydra_plugins.hydra_submitit_launcher.config as submitit_config
    from hydra.conf import HydraConf
    from omegaconf import open_dict

    from trainbench.sweep.callbacks import SaveJobConfig

    cfg = _sweep_config(tmp_path, "hydra/launcher=submitit_local", "model=dqn")
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path / "job")
        cfg.hydra.job.num = 0
    monkeypatch.setattr(submitit_config, "LocalQueueConf", type("LocalQueueConf", (), {}))  # imported again
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(cfg)
    SaveJobConfig().on_job_start(cfg)
    saved = pickle.loads((tmp_path / "job" / ".hydra" / "config.pickle").read_bytes())
    assert OmegaConf.get_type(saved, "hydra") is HydraConf and saved.model.name == "dqn"
    assert saved.hydra.launcher._target_ == cfg.hydra.launcher._target_
