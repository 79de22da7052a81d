"""Double DQN on the vectorised bar-trading environment (``models/env.py``).

Online Q-network and a Polyak-averaged target network; the online network picks the next action and
the target network values it (double DQN); Huber loss; global gradient-norm clipping; a linear
epsilon schedule over epochs. The replay buffer lives on the device and stores each transition as
``(bar, position, action, reward, terminated, truncated)``: observations are rebuilt from the feature
windows when sampled, so a transition costs 6 numbers instead of a whole window, and nothing crosses
to the host.

Episode ends (``models/env.py``): the TD target is ``r + gamma * (1 - terminated) * Q_target(s', a*)``.
Only a terminal state cuts the bootstrap; an episode cut at its time limit (``truncated``) still
bootstraps from ``s'``, the state the step really led to (bar t + 1 with the new position, rebuilt from
the buffer, never the auto-reset observation). Treating the time limit as terminal would teach the
network that the last bar of every episode ends the world, a bias the Markov state cannot explain
(Pardo et al., "Time Limits in Reinforcement Learning", 2018).

On a GPU an update of this small network is a few dozen tiny kernels, so its time is mostly launch
overhead. ``trainer.cuda_graphs`` captures the whole update (forward, backward, clipped AdamW step,
target lerp) once as a CUDA graph and replays it with each sampled batch copied into static buffers
(the batch size is fixed, so the shapes are static); ``trainer.compile`` compiles the Q-network's
forward, with or without graphs. Sampling and the environment step stay outside the graph.

One epoch (fixed work, the same for every epoch)::

    repeat updates_per_epoch times:
        one vectorised step of num_envs environments (epsilon-greedy), stored in the buffer
        one gradient update on batch_size transitions sampled uniformly from the buffer
        target <- target + tau * (online - target)

so an epoch is ``updates_per_epoch * num_envs`` environment steps and ``updates_per_epoch *
batch_size`` training samples (``samples_per_epoch``, the throughput unit). Before the first epoch
(outside any timing) the buffer is filled with ``learning_starts`` random-action transitions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainbench.config.models.dqn import SCHEMA, DQNConfig
from trainbench.core.errors import ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.market import MarketData
from trainbench.models.base import (
    BuildContext,
    GraphedUpdate,
    ModelSpec,
    TrainableBase,
    accumulate,
    clip_and_step,
    make_optimizer,
    steps,
)
from trainbench.models.env import N_ACTIONS, BarTradingEnv

# --------------------------------------------------------------------------------------------------
# the network and the replay buffer
# --------------------------------------------------------------------------------------------------


#: The fields of a sampled batch, in the order a captured update takes them.
BATCH_FIELDS = ("bar", "pos", "action", "reward", "terminated", "truncated")


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, hidden: int, n_actions: int = N_ACTIONS) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: (B, obs_dim) -> Q-values (B, n_actions)."""
        return self.net(obs)


class ReplayBuffer:
    """A circular buffer of (bar, position, action, reward, terminated, truncated) on the device.

    ``size`` and the write pointer are Python ints: every step adds exactly ``num_envs`` transitions,
    so they are known without asking the device.
    """

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.capacity = capacity
        self.bar = torch.zeros(capacity, dtype=torch.long, device=device)
        self.pos = torch.zeros(capacity, dtype=torch.long, device=device)
        self.action = torch.zeros(capacity, dtype=torch.long, device=device)
        self.reward = torch.zeros(capacity, device=device)
        self.terminated = torch.zeros(capacity, device=device)  # 1.0: no bootstrap from the next state
        self.truncated = torch.zeros(capacity, device=device)  # 1.0: time limit (recorded; still bootstraps)
        self.ptr = 0
        self.size = 0

    def add(self, bar: torch.Tensor, pos: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
            terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Append (n,) tensors of each field, overwriting the oldest rows when full."""
        n = bar.shape[0]
        idx = (torch.arange(n, device=bar.device) + self.ptr) % self.capacity
        self.bar[idx] = bar
        self.pos[idx] = pos
        self.action[idx] = action
        self.reward[idx] = reward
        self.terminated[idx] = terminated.to(self.terminated.dtype)
        self.truncated[idx] = truncated.to(self.truncated.dtype)
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``n`` rows drawn uniformly with replacement: a dict of (n,) tensors, one per field."""
        i = torch.randint(0, self.size, (n,), generator=generator, device=self.bar.device)
        return {"bar": self.bar[i], "pos": self.pos[i], "action": self.action[i], "reward": self.reward[i],
                "terminated": self.terminated[i], "truncated": self.truncated[i]}


# --------------------------------------------------------------------------------------------------
# the update: acting, the double-DQN loss, one epoch
# --------------------------------------------------------------------------------------------------


class DQNTrainable(TrainableBase):
    def __init__(self, cfg: DQNConfig, data: MarketData, ctx: BuildContext) -> None:
        fs = data.features
        if fs is None:
            raise ModelDataError("dqn trains on OHLCV bars; this dataset has none. Use an OHLCV data config "
                                 "(e.g. data=6e_ohlcv_1m).")
        need = cfg.window + cfg.episode_len
        self.gen = ctx.generator()
        try:
            self.env = BarTradingEnv(fs, cfg.num_envs, cfg.window, cfg.episode_len, cfg.cost_ticks, self.gen)
        except ValueError:
            raise ModelDataError(
                f"dqn needs episodes of model.window + model.episode_len = {need} consecutive bars inside one "
                f"session of the training split; the data has {len(fs)} bars in all, which is too few. "
                f"Use more bars or lower model.window / model.episode_len.") from None
        self.cfg = cfg
        self.ctx = ctx
        self.batch_size = int(cfg.batch_size)
        self.q = QNetwork(self.env.obs_dim, cfg.hidden).to(ctx.device)
        self.target = QNetwork(self.env.obs_dim, cfg.hidden).to(ctx.device)
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)
        self.module = self.q
        self.opt = make_optimizer(self.q, cfg.lr, cfg.weight_decay, impl=ctx.optimizer_impl,
                                  capturable=ctx.cuda_graphs)
        self._graphed: GraphedUpdate | None = None  # captured at the first update (trainer.cuda_graphs)
        self.scaler = ctx.grad_scaler()
        self.buffer = ReplayBuffer(cfg.buffer_size, ctx.device)
        self.samples_per_epoch = cfg.updates_per_epoch * self.batch_size
        self.env_steps_per_epoch = cfg.updates_per_epoch * cfg.num_envs
        # both definitions of an epoch's samples, logged as params (harness: *_per_s per epoch)
        self.train_samples, self.env_steps = self.samples_per_epoch, self.env_steps_per_epoch
        self.epoch = 0
        self._q_fwd = ctx.maybe_compile(self.q)
        self._prefill(cfg.learning_starts)

    def _prefill(self, n: int) -> None:
        for _ in range(-(-n // self.env.num_envs)):
            a = torch.randint(0, N_ACTIONS, (self.env.num_envs,), generator=self.gen, device=self.ctx.device)
            self._env_step(a)

    def epsilon(self) -> float:
        frac = min(self.epoch / self.cfg.eps_decay_epochs, 1.0)
        return self.cfg.eps_start + frac * (self.cfg.eps_end - self.cfg.eps_start)

    def act(self, obs: torch.Tensor, eps: float) -> torch.Tensor:
        with torch.no_grad(), self.ctx.autocast():
            greedy = self._q_fwd(obs).argmax(dim=1)
        n = obs.shape[0]
        rand = torch.randint(0, N_ACTIONS, (n,), generator=self.gen, device=obs.device)
        explore = torch.rand(n, generator=self.gen, device=obs.device) < eps
        return torch.where(explore, rand, greedy)

    def _env_step(self, action: torch.Tensor) -> torch.Tensor:
        bar, pos = self.env.t, self.env.pos
        _, reward, terminated, truncated = self.env.step(action)
        self.buffer.add(bar, pos, action, reward, terminated, truncated)
        return reward

    def td_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Huber loss of Q(s, a) against r + gamma * (1 - terminated) * Q_target(s', argmax_a' Q(s', a')).

        ``s'`` is rebuilt as bar + 1 with the position the action set, also after a truncated step.
        """
        obs = self.env.observe_at(batch["bar"], batch["pos"])
        next_obs = self.env.observe_at(batch["bar"] + 1, batch["action"] - 1)
        with torch.no_grad(), self.ctx.autocast():
            next_a = self._q_fwd(next_obs).argmax(dim=1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_a).squeeze(1).float()
            target = batch["reward"] + self.cfg.gamma * (1.0 - batch["terminated"]) * next_q
        with self.ctx.autocast():
            q_sa = self._q_fwd(obs).gather(1, batch["action"].unsqueeze(1)).squeeze(1).float()
        return F.smooth_l1_loss(q_sa, target), q_sa.detach().mean()

    def optimizer_step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient update on a sampled batch (each field (batch_size,)); replayed as a CUDA graph
        with ``ctx.cuda_graphs`` (captured at the first call), else run eagerly."""
        if not self.ctx.cuda_graphs:
            return self._optimizer_step(batch)
        inputs = tuple(batch[k] for k in BATCH_FIELDS)
        if self._graphed is None:
            self._graphed = GraphedUpdate(lambda *xs: self._optimizer_step(dict(zip(BATCH_FIELDS, xs, strict=True))),
                                          inputs, (self.q, self.target), self.opt)
        return self._graphed(*inputs)

    def _optimizer_step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The update itself, in ``ctx.grad_accum`` micro-batches: TD loss, backward, clipped step, lerp."""
        def part(sl: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss, q_mean = self.td_loss({k: v[sl] for k, v in batch.items()})
            return loss, {"q_mean": q_mean}

        loss, parts = accumulate(part, batch["bar"].shape[0], self.ctx.grad_accum, self.scaler)
        grad_norm = clip_and_step(self.q, self.opt, self.cfg.max_grad_norm, self.scaler,
                                  set_to_none=not self.ctx.cuda_graphs)
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.q.parameters()), self.cfg.tau)
        return {"loss": loss, Series.GRAD_NORM: grad_norm, **parts}

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        eps = self.epsilon()
        loss_sum = torch.zeros((), device=self.ctx.device)
        norm_sum = torch.zeros((), device=self.ctx.device)
        q_sum = torch.zeros((), device=self.ctx.device)
        reward_sum = torch.zeros((), device=self.ctx.device)
        for _ in steps(self.cfg.updates_per_epoch):
            reward_sum += self._env_step(self.act(self.env.observe(), eps)).mean()
            out = self.optimizer_step(self.buffer.sample(self.batch_size, self.gen))
            loss_sum += out["loss"]
            norm_sum += out[Series.GRAD_NORM]
            q_sum += out["q_mean"]
        self.epoch += 1
        n = self.cfg.updates_per_epoch
        return {"loss": loss_sum / n, "loss_td": loss_sum / n, Series.GRAD_NORM: norm_sum / n, "q_mean": q_sum / n,
                "reward_mean": reward_sum / n, "episode_reward": self.env.pop_episode_stats(),
                "epsilon": torch.full((), eps, device=self.ctx.device)}

    def memory_step(self, batch_size: int):
        """One environment step and one update on ``batch_size`` transitions (see TrainableBase)."""
        def step() -> dict[str, torch.Tensor]:
            self._env_step(self.act(self.env.observe(), self.epsilon()))
            return self._optimizer_step(self.buffer.sample(batch_size, self.gen))  # eager: any batch size

        return step

    def inference(self, batch_size: int):
        t = self.env._random_bars(batch_size)
        obs = self.env.observe_at(t, torch.zeros_like(t))
        q, fwd = self.q, self._q_fwd  # the (compiled, when trainer.compile) module training calls

        def forward() -> torch.Tensor:
            q.eval()
            with torch.no_grad(), self.ctx.autocast():
                out = fwd(obs)
            q.train()
            return out

        return forward

    def info(self) -> dict[str, Any]:
        return {**super().info(), "env_steps_per_epoch": self.env_steps_per_epoch,
                "obs_dim": self.env.obs_dim, "cuda_graphs": self.ctx.cuda_graphs}


def build(cfg: DQNConfig, data: MarketData, ctx: BuildContext) -> DQNTrainable:
    return DQNTrainable(cfg, data, ctx)


SPEC = ModelSpec.of(SCHEMA, build, cuda_graphs=True)
