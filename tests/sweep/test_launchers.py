"""The launcher configs in conf/hydra/launcher/ compose, and slurm_gpu becomes the sbatch script it says."""

import pytest
from omegaconf import OmegaConf

submitit = pytest.importorskip("submitit", reason="the slurm extra (pip install .[slurm]) is not installed")


def _launcher(name, *overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainbench import CONF_DIR
    from trainbench.compose import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={name}", "hydra.sweep.dir=/tmp/sweep", *overrides],
                      return_hydra_config=True)
    return cfg.hydra.launcher


def test_slurm_gpu_makes_an_sbatch_script_with_gpus_time_memory_and_partition(tmp_path, monkeypatch):
    fake = tmp_path / "bin"  # submitit's SLURM executor insists on finding srun; nothing runs it here
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 1\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{__import__('os').environ['PATH']}")
    launcher = _launcher("slurm_gpu", "hydra.launcher.partition=h100", "hydra.launcher.timeout_min=720",
                         "hydra.job.name=bench")
    assert launcher._target_.endswith("SlurmLauncher")
    from trainbench.sweep.slurm import OWN_KEYS  # trainbench's launcher keeps these to itself

    params = {k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items()
              if k not in ("_target_", "submitit_folder", "max_num_timeout", *OWN_KEYS)}
    # the mapping hydra_submitit_launcher applies before submitting (BaseSubmititLauncher.launch)
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    ex = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = ex._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    for line in ("#SBATCH --partition=h100", "#SBATCH --gpus-per-node=1", "#SBATCH --time=720",
                 "#SBATCH --mem=64GB", "#SBATCH --cpus-per-task=8", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --signal=USR2@120", "export OMP_NUM_THREADS=8"):
        assert line in script, line


def test_local_launchers_compose():
    assert _launcher("submitit_local")._target_.endswith("LocalLauncher")
    local = _launcher("local_jobs")
    assert local._target_.endswith("LocalLauncher") and local.tasks_per_node == 1


def test_local_gpus_is_a_hydra_launcher_with_its_devices_from_the_command_line():
    from trainbench.sweep.local_gpus import PLUGIN_TARGET

    launcher = _launcher("local_gpus", "hydra.launcher.devices=[2,3]")
    assert launcher._target_ == PLUGIN_TARGET and list(launcher.devices) == [2, 3] and launcher.gpus_per_job == 1
    assert _launcher("local_gpus").devices is None  # every GPU of the machine
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    assert PLUGIN_TARGET in {f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Launcher)}
