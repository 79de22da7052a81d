"""How sweeps reach a cluster: trainbench's SLURM launcher (``hydra/launcher=slurm_gpu``)."""
