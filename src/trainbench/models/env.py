"""A vectorised bar-trading environment in torch, shared by DQN and PPO.

``num_envs`` independent episodes run side by side over one :class:`~trainbench.data.features.FeatureSet`.
All state lives on the device as (num_envs,) tensors; a step is a handful of tensor ops for every
environment at once, and finished episodes restart at random offsets through ``torch.where`` (no
Python loop over environments, no host synchronisation).

An episode starts at bar ``s``: the agent first sees the window of ``window`` bars ending at bar
``t = s + window - 1`` and holds ``episode_len`` positions, one per bar. Every episode lies inside one
segment (one instrument, no session gap) and one split, so it never straddles instruments or gaps.

Actions 0, 1, 2 mean short, flat, long (position -1, 0, +1). Taking action ``a`` at bar ``t`` sets the
position ``p' = a - 1`` for the move from ``t`` to ``t + 1``, and pays (in ticks)::

    reward = p' * (close_ticks[t + 1] - close_ticks[t]) - cost_ticks * |p' - p|

Observation: the feature window (window, F) flattened, followed by the one-hot current position (3).

Episode ends. An episode ends only because it reached ``episode_len`` steps: a time limit, not a state
of the market (the observation has no clock; the bar after the last step exists and continues the same
session). :meth:`BarTradingEnv.step` therefore reports it as ``truncated``, not ``terminated``
(Gymnasium's distinction): a learner should bootstrap from the value of the state after a truncated
step, and only a terminated step has no future. This environment never terminates; ``terminated`` is
kept (all False) so that learners are written against the general contract.
"""

from __future__ import annotations

import torch

from trainbench.data.features import FeatureSet

N_ACTIONS = 3


class BarTradingEnv:
    def __init__(self, features: FeatureSet, num_envs: int, window: int, episode_len: int,
                 cost_ticks: float, generator: torch.Generator, split: str = "train") -> None:
        self.fs = features
        self.device = features.values.device
        self.num_envs = num_envs
        self.window = window
        self.episode_len = episode_len
        self.cost_ticks = cost_ticks
        self.gen = generator
        # episode starts: the window plus episode_len further bars (each step needs bar t + 1) in one segment
        self.starts = features.window_starts(window, horizon=episode_len, split=split)
        if self.starts.numel() == 0:
            raise ValueError(f"no episode of window {window} + {episode_len} bars fits in one segment of the "
                             f"{split} split ({len(features)} bars)")
        self.windows = features.windows(window)  # (N - window + 1, window, F) strided view
        self.obs_dim = window * features.n_features + N_ACTIONS
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # current bar index
        self.k = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # step within episode
        self.pos = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # -1, 0, +1
        self.ep_return = torch.zeros(num_envs, device=self.device)
        self.done_return_sum = torch.zeros((), device=self.device)
        self.done_count = torch.zeros((), device=self.device)
        self.last_episode_mean = torch.zeros((), device=self.device)  # what pop_episode_stats repeats
        self.reset()

    def _random_bars(self, n: int) -> torch.Tensor:
        i = torch.randint(0, self.starts.numel(), (n,), generator=self.gen, device=self.device)
        return self.starts[i] + (self.window - 1)

    def reset(self) -> torch.Tensor:
        self.t = self._random_bars(self.num_envs)
        self.k.zero_()
        self.pos.zero_()
        self.ep_return.zero_()
        return self.observe()

    def observe_at(self, t: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Observations (B, obs_dim) for bars ``t`` (B,) and positions ``pos`` (B,) in {-1, 0, 1}."""
        win = self.windows[t - (self.window - 1)]  # (B, window, F)
        onehot = torch.nn.functional.one_hot(pos + 1, N_ACTIONS).to(win.dtype)
        return torch.cat([win.flatten(1), onehot], dim=1)

    def observe(self) -> torch.Tensor:
        return self.observe_at(self.t, self.pos)

    def rewards(self, t: torch.Tensor, pos: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Reward in ticks of taking ``action`` at bars ``t`` holding ``pos`` (all (B,))."""
        new_pos = action - 1
        move = self.fs.close_ticks[t + 1] - self.fs.close_ticks[t]
        return new_pos.to(move.dtype) * move - self.cost_ticks * (new_pos - pos).abs().to(move.dtype)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Apply actions (num_envs,) -> (next_obs (num_envs, obs_dim), reward, terminated, truncated),
        the last three (num_envs,), all on the device.

        ``terminated``: the step reached a terminal state (never here, see the module doc).
        ``truncated``: the episode hit its time limit ``episode_len`` with this step. For an episode
        that ended either way, ``next_obs`` is already the first observation of the fresh episode that
        replaced it (auto-reset); the state the step really led to is bar ``t + 1`` with the new
        position, which :meth:`observe_at` rebuilds.
        """
        reward = self.rewards(self.t, self.pos, action)
        self.pos = action - 1
        self.t = self.t + 1
        self.k = self.k + 1
        self.ep_return += reward
        terminated = torch.zeros_like(self.k, dtype=torch.bool)
        truncated = self.k >= self.episode_len
        done = terminated | truncated
        self.done_return_sum += (self.ep_return * done).sum()
        self.done_count += done.sum()
        fresh = self._random_bars(self.num_envs)
        self.t = torch.where(done, fresh, self.t)
        self.k = torch.where(done, torch.zeros_like(self.k), self.k)
        self.pos = torch.where(done, torch.zeros_like(self.pos), self.pos)
        self.ep_return = torch.where(done, torch.zeros_like(self.ep_return), self.ep_return)
        return self.observe(), reward, terminated, truncated

    def pop_episode_stats(self) -> torch.Tensor:
        """Mean return (ticks) of the episodes finished since the last call.

        When none finished since (an epoch shorter than an episode, or one that ends between two episode
        ends), the previous call's mean is repeated, as SB3's ``ep_rew_mean`` keeps its window: a 0 there
        would read as a return of 0 and make the learning curve alternate between the return and 0. Before
        the first episode ends it is 0. NaN-free and computed on the device (no host sync).
        """
        finished = self.done_count > 0
        mean = torch.where(finished, self.done_return_sum / self.done_count.clamp(min=1), self.last_episode_mean)
        self.last_episode_mean = mean
        self.done_return_sum = torch.zeros((), device=self.device)
        self.done_count = torch.zeros((), device=self.device)
        return mean
