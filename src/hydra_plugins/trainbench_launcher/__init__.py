"""trainbench's launchers as Hydra plugins: Hydra instantiates launchers only from ``hydra_plugins``.

* ``hydra/launcher=local_gpus``: a sweep's jobs in parallel on this machine's GPUs, one job per GPU; the
  logic lives in trainbench.sweep.local_gpus (it needs submitit only when it launches);
* ``hydra/launcher=trainbench_slurm`` (conf/hydra/launcher/slurm_gpu.yaml builds on it), when the slurm extra
  is installed; the logic lives in trainbench.sweep.slurm.
"""

from trainbench.sweep import local_gpus as _local_gpus


class LocalGpusLauncher(_local_gpus.LocalGpusLauncher):
    """A sweep's jobs in parallel on this machine's GPUs, each pinned to its own (CUDA_VISIBLE_DEVICES)."""


assert f"{__name__}.LocalGpusLauncher" == _local_gpus.PLUGIN_TARGET
_local_gpus.register_launcher_configs()

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
