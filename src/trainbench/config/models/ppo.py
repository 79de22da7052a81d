"""PPO's config: its keys with their types, ranges and docs, and its
:data:`SCHEMA`, read without importing the model (:mod:`trainbench.models.ppo`, which imports torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.config.models.spec import ModelSchema
from trainbench.config.run import ModelConfig
from trainbench.config.shared import param
from trainbench.core.errors import ConfigError


@dataclass
class PPOConfig(ModelConfig):
    name: str = param("ppo", "Registry key.")
    batch_size: Any = param(230, "Minibatch size: samples per optimiser step.")
    target_epochs: int = param(2000, "Epochs the training plan needs; the decision projects time from it.", ge=1)
    lr: float = param(2.5e-4, "Adam learning rate (CleanRL's 2.5e-4).", gt=0)
    adam_eps: float = param(1e-5, "Adam epsilon (CleanRL uses 1e-5 for PPO).", gt=0)
    anneal_lr: bool = param(True, "Lower the learning rate linearly from lr to 0 over target_epochs epochs.")
    max_grad_norm: float = param(0.5, "Global gradient-norm clip (CleanRL: 0.5); 0 disables.", ge=0)
    window: int = param(32, "Bars of features in one observation.", ge=1)
    hidden: int = param(256, "Width of the two hidden layers of the actor and of the critic.", ge=1)
    num_envs: int = param(64, "Environments stepped side by side.", ge=1)
    rollout_steps: int = param(64, "Steps of every environment per rollout (one rollout per epoch).", ge=1)
    episode_len: int = param(240, "Bars per episode (240 one-minute bars = 4 hours).", ge=1)
    update_epochs: int = param(4, "Passes over the rollout per epoch, each in shuffled minibatches.", ge=1)
    gamma: float = param(0.99, "Discount factor.", ge=0, le=1)
    gae_lambda: float = param(0.95, "GAE lambda.", ge=0, le=1)
    clip_coef: float = param(0.2, "Clip range of the probability ratio (and of the value change).", gt=0)
    clip_vloss: bool = param(True, "Clip the value loss around the rollout's values (CleanRL's default).")
    norm_adv: bool = param(True, "Normalise advantages to zero mean, unit std within each minibatch.")
    vf_coef: float = param(0.5, "Weight of the value loss.", ge=0)
    ent_coef: float = param(0.01, "Weight of the entropy bonus.", ge=0)
    target_kl: float | None = param(None, "Mask the epoch's remaining updates once a pass ends with approx-KL "
                                          "above this (no host sync); null disables.", gt=0)
    reward_scale: float = param(0.1, "Rewards (ticks) are multiplied by this for GAE and the critic, so that "
                                     "value targets are O(1); reported rewards stay in ticks.", gt=0)
    cost_ticks: float = param(0.5, "Transaction cost per unit of position change, in ticks.", ge=0)

    def check_world(self, world: int) -> None:
        """Raise :class:`ConfigError` for a setting that cannot run across ``world`` ranks (docs/distributed.md):
        checked at start-up, before any rank starts (ModelConfig.check_world), and by each rank's build."""
        if self.num_envs % world:
            raise ConfigError(f"model.num_envs={self.num_envs} are the job's environments, split across its {world} "
                              f"ranks (trainer.distributed): use a multiple of {world}.")
        if world > 1 and self.target_kl is not None:
            raise ConfigError("model.target_kl does not combine with trainer.distributed (each rank would stop on "
                              "its own KL and the ranks' weights would part): set model.target_kl=null or "
                              "trainer.distributed.nproc=1.")


SCHEMA = ModelSchema(name="ppo", config_cls=PPOConfig, data_kind="bars",
                     description="PPO (clipped surrogate, GAE) with device rollouts on the bar-trading environment")
