"""Rerun a past training run from what MLflow holds, and say what differs from the original.

    python run.py rerun=<run_id>                      # same config, seed and data file as that run
    python run.py rerun=<run_id> trainer.device=cuda  # ... with that one value changed (reported)
    python run.py -m rerun=<id1>,<id2>                # several runs, as a sweep of reruns

The original's resolved ``config/config.yaml`` is the config of the rerun: it is merged onto the typed
schemas (this version's ``RunConfig`` and the model's config class) so that a key this version no longer
knows fails with a message, and a key added since takes its default (reported). What is not part of the
experiment comes from the current invocation: ``tracking.*`` (where to look and where to log) and
``paths.*`` (this checkout). Any other override given with ``rerun=`` replaces the original's value and is
listed under ``config`` in the diff.

Before anything trains, :func:`~trainbench.rerun.orchestrate.prepare_rerun` compares the original with
this machine: git commit and dirty tree (and the hash of the uncommitted diff), Python, torch, CUDA/cuDNN
and package versions, the device, the CPU, torch's thread count and the data file's sha256. It prints that
table and returns it; the run then logs it as ``rerun_diff.json`` with the tags ``rerun_of``,
``rerun_differs`` and ``rerun_data_match``. After training,
:func:`~trainbench.rerun.orchestrate.check_losses` compares the per-epoch losses with the original's
(``rerun_losses_identical``).

One module per job:

- :mod:`~trainbench.rerun.fetch`: the original run from MLflow (config, overrides, environment, epochs);
- :mod:`~trainbench.rerun.configs`: the rerun's config and what it changes;
- :mod:`~trainbench.rerun.environment`: the original's setup against this machine, and the printed table;
- :mod:`~trainbench.rerun.losses`: the per-epoch series compared exactly;
- :mod:`~trainbench.rerun.orchestrate`: ``rerun=<run_id>`` from start to end;
- :mod:`~trainbench.rerun.hydra_pickle`: Hydra's ``--experimental-rerun`` and its pickle, without secrets
  (what a secret is, and its removal, is :mod:`trainbench.core.secrets`'s alone; the Hydra callback that
  writes the pickle is :class:`trainbench.sweep.callbacks.SaveJobConfig`);
- :mod:`~trainbench.rerun.names`: every tag, artifact and series name the package reads or writes.

The entry points ``cli.py`` calls are importable from the package itself; :func:`run_rerun` is imported when
asked for (it needs torch, MLflow and the job's modules; the Hydra callback that writes a job's pickle only
needs :mod:`~trainbench.rerun.hydra_pickle`, and a command refused for bad input loads neither).
"""

from typing import Any

from trainbench.rerun.hydra_pickle import hydra_rerun

__all__ = ["hydra_rerun", "run_rerun"]


def __getattr__(name: str) -> Any:
    if name == "run_rerun":
        from trainbench.rerun.orchestrate import run_rerun

        return run_rerun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
