"""A model whose runs serve the fault tests as a clock: the tiny DQN of those tests, each training epoch
followed by a pause of :data:`PACE_S`, so that a run is still in its epoch loop while a test stops a server or
waits for a SLURM time limit, without spending a core on it (a full-speed run burnt 10-30 CPU-s there).

In a child: :data:`PACED` on its command line and :func:`paced_env` as its environment (the tests folder on
``PYTHONPATH``, where ``model.spec`` finds this module).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from helpers.procs import REPO, child_env
from trainbench.models.dqn import SPEC as _DQN
from trainbench.models.dqn import DQNTrainable

#: Seconds of pause after each training epoch.
PACE_S = 0.1


class PacedDQN(DQNTrainable):
    """The DQN, each training epoch followed by the pause."""

    def train_epoch(self) -> Any:
        out = super().train_epoch()
        time.sleep(PACE_S)
        return out


def _build(cfg: Any, data: Any, ctx: Any) -> PacedDQN:
    return PacedDQN(cfg, data, ctx)


SPEC = dataclasses.replace(_DQN, name="paced", build=_build)

#: The paced model at the tiny size of the fault tests (the trainer's options are the test's).
PACED = ["model=custom", "model.spec=helpers.paced_model:SPEC", "model.updates_per_epoch=1", "model.num_envs=2",
         "model.batch_size=8", "model.hidden=8", "model.learning_starts=16", "model.episode_len=8", "model.window=4"]


def paced_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """:func:`helpers.procs.child_env` with the tests folder on ``PYTHONPATH`` too."""
    return child_env(base, **{"PYTHONPATH": f"{REPO / 'src'}:{REPO / 'tests'}", **extra})
