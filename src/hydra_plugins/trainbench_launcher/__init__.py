"""trainbench's SLURM launcher as a Hydra plugin: Hydra instantiates launchers only from ``hydra_plugins``.

The logic lives in trainbench.sweep.slurm; this registers ``hydra/launcher=trainbench_slurm``
(conf/hydra/launcher/slurm_gpu.yaml builds on it) when the slurm extra is installed.
"""

try:
    import hydra_plugins.hydra_submitit_launcher.submitit_launcher  # noqa: F401  (the slurm extra)
except ImportError:
    pass
else:
    from trainbench.sweep import slurm as _slurm

    class SlurmLauncher(_slurm.SlurmLauncher):
        """hydra_submitit_launcher's SLURM launcher with a check before submitting and a watch while waiting."""

    assert f"{__name__}.SlurmLauncher" == _slurm.PLUGIN_TARGET
    _slurm.register_launcher_configs()
