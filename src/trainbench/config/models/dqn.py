"""DQN's config: its keys with their types, ranges and docs, and its
:data:`SCHEMA`, read without importing the model (:mod:`trainbench.models.dqn`, which imports torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.config.models.spec import ModelSchema
from trainbench.config.run import ModelConfig
from trainbench.config.shared import param


@dataclass
class DQNConfig(ModelConfig):
    name: str = param("dqn", "Registry key.")
    batch_size: Any = param(230, "Transitions per gradient update.")
    target_epochs: int = param(1000, "Epochs the training plan needs; the decision projects time from it.", ge=1)
    lr: float = param(2.5e-4, "Adam learning rate.", gt=0)
    max_grad_norm: float = param(10.0, "Global gradient-norm clip (SB3 uses 10); 0 disables.", ge=0)
    window: int = param(32, "Bars of features in one observation.", ge=1)
    hidden: int = param(128, "Width of the two hidden layers of the Q-network.", ge=1)
    num_envs: int = param(32, "Environments stepped side by side.", ge=1)
    episode_len: int = param(240, "Bars per episode (240 one-minute bars = 4 hours).", ge=1)
    updates_per_epoch: int = param(100, "Environment steps (x num_envs) and gradient updates per epoch.", ge=1)
    gamma: float = param(0.99, "Discount factor.", ge=0, le=1)
    tau: float = param(0.005, "Polyak rate of the target network per update (1.0 = hard copy).", gt=0, le=1)
    buffer_size: int = param(50_000, "Replay buffer capacity (transitions).", ge=1)
    learning_starts: int = param(5_000, "Random-action transitions collected before the first epoch.", ge=0)
    eps_start: float = param(1.0, "Initial exploration rate.", ge=0, le=1)
    eps_end: float = param(0.05, "Final exploration rate.", ge=0, le=1)
    eps_decay_epochs: int = param(100, "Epochs over which epsilon falls linearly to eps_end.", ge=1)
    cost_ticks: float = param(0.5, "Transaction cost per unit of position change, in ticks.", ge=0)


SCHEMA = ModelSchema(name="dqn", config_cls=DQNConfig, data_kind="bars",
                     description="Double DQN with a device replay buffer on the bar-trading environment")
