"""PPO (clipped surrogate, GAE) on the vectorised bar-trading environment (``models/env.py``).

An actor and a critic, two separate MLPs over the same observation (the flattened feature window plus
the one-hot position), initialised as CleanRL does (orthogonal, gain sqrt(2); actor head 0.01, critic
head 1.0). The policy is categorical over short / flat / long. Everything stays on the device: the
environments, the rollout storage (preallocated once), the action sampling (Gumbel-max with the run's
generator), GAE and the minibatch permutations.

One epoch (fixed work, the same for every epoch)::

    rollout:  rollout_steps vectorised steps of num_envs environments, storing
              (obs, action, log-prob, value, reward, done) and bootstrapping from the value of the
              observation that follows the last step
    GAE:      advantages and returns over the rollout (see :func:`gae` for the ``dones`` convention)
    update:   update_epochs passes; each pass shuffles the num_envs * rollout_steps samples
              (torch.randperm on the device) and takes one optimiser step per full minibatch of
              batch_size samples. The last, partial minibatch of a pass is dropped (drop_last), so an
              epoch makes exactly update_epochs * (num_envs * rollout_steps // batch_size) updates
              (``info()["updates_per_epoch"]``); a fresh permutation each pass means a different
              remainder is dropped each time.

The dropped remainder, and why it is kept out. CleanRL never drops anything because its rollout is a
multiple of its minibatch (512 = 4 x 128); the default minibatch of 230 (every model's) does not divide the default
rollout of 64 x 64 = 4,096 samples, so each pass leaves 4,096 - 17 x 230 = 186 samples (4.5%) out. They
are not lost to learning (the next pass reshuffles, and the chance that a sample sits out all four passes
is about 0.045^4 = 4e-6), and dropping them keeps every update the same shape: one compiled graph, one
CUDA graph (``trainer.cuda_graphs``) and equal work per update, which is what the benchmark times. The
run records the share (``model_info.samples_dropped_per_pass`` and ``model_info.samples_dropped_share``);
pick ``model.batch_size`` dividing ``num_envs * rollout_steps`` to drop nothing.

Data parallelism (``trainer.distributed.nproc=N``, CleanRL's multi-GPU PPO): each rank steps ``num_envs / N``
environments of its own (its generator seeded ``seed + rank``) and trains on minibatches of ``batch_size / N``
of its own rollout; DDP averages the gradients. ``model.target_kl`` is refused under it (docs/distributed.md).

``samples_per_epoch`` is ``num_envs * rollout_steps`` environment steps (the throughput unit of RL
benchmarks: CleanRL's SPS counts the same thing). Environments carry on across epochs (auto-reset), as in
CleanRL. An episode that ends at ``episode_len`` is a time-limit truncation (``models/env.py``); PPO
treats it as terminal in GAE, as CleanRL's ppo.py does (``next_done = terminations | truncations``).
Bootstrapping it would need the critic's value of the state before the auto-reset, one more forward pass
per step; the bias reaches only the last ~1/(1 - gamma * lambda) ~ 17 steps of each 240-step episode.
DQN, whose replay buffer rebuilds the true next state for free, does bootstrap through it.

``target_kl`` (optional, off by default): CleanRL stops the update passes once the last minibatch's
approximate KL of a pass exceeds it. Breaking out of a loop on a device value would wait for the device,
so here a device flag is raised instead and every later update of the epoch is undone in place (parameters
and Adam moments restored with ``torch.where``). The epoch therefore still does its fixed work; only the
Adam step counter keeps counting masked steps (it only enters the bias correction, which is ~1 after the
first few hundred steps). ``kl_stopped`` reports the fraction of the epoch's updates that were masked.

On a GPU a minibatch update of these two small MLPs is launch-bound. ``trainer.cuda_graphs`` captures
it (forward, loss, backward, clipped AdamW step) once as a CUDA graph and replays it with each gathered
minibatch copied into static buffers: every minibatch has ``batch_size`` rows (drop_last, above), so
the shapes are static. The learning rate is then a device tensor the annealing fills in place.
``trainer.compile`` compiles the actor-critic's forward, with or without graphs. Not combined with
``target_kl`` (its masking reads optimiser state that is created inside the first update).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainbench.config.models.ppo import SCHEMA, PPOConfig
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.market import MarketData
from trainbench.models.base import (
    BuildContext,
    EpochMeter,
    GraphedUpdate,
    ModelSpec,
    TrainableBase,
    accumulate,
    batches,
    clip_and_step,
    make_optimizer,
    steps,
)
from trainbench.models.env import N_ACTIONS, BarTradingEnv

# --------------------------------------------------------------------------------------------------
# the network
# --------------------------------------------------------------------------------------------------


def _layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (Tanh), as in CleanRL's ppo.py."""

    def __init__(self, obs_dim: int, hidden: int, n_actions: int = N_ACTIONS) -> None:
        super().__init__()
        self.actor = nn.Sequential(_layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(),
                                   _layer(hidden, n_actions, std=0.01))
        self.critic = nn.Sequential(_layer(obs_dim, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(),
                                    _layer(hidden, 1, std=1.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs: (B, obs_dim) -> (action logits (B, n_actions), state value (B,))."""
        return self.actor(obs), self.critic(obs).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# the PPO pieces, as plain functions (tests check them against hand-worked numbers)
# --------------------------------------------------------------------------------------------------


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns over a rollout.

    rewards, values, dones: (T, N); next_value: (N,) -> (advantages (T, N), returns (T, N)).

    Convention: ``dones[t]`` is 1 when step ``t`` ended its episode, i.e. exactly the ``done`` that
    ``BarTradingEnv.step`` returned for that step. The observation after such a step already belongs to a
    fresh episode, so step ``t`` neither bootstraps from the next value nor inherits the next advantage::

        delta_t = r_t + gamma * (1 - dones[t]) * V_{t+1} - V_t
        A_t     = delta_t + gamma * lam * (1 - dones[t]) * A_{t+1}

    with ``V_T = next_value`` (the value of the observation that follows the rollout). This is CleanRL's
    recursion with its ``dones`` shifted by one step (CleanRL stores whether an observation *starts* an
    episode and so also needs a ``next_done``; here ``dones[T-1]`` already says it).
    """
    n = rewards.shape[0]
    adv = torch.empty_like(rewards)
    nonterminal = 1.0 - dones.to(rewards.dtype)
    last = torch.zeros_like(next_value)
    for t in steps(n, site="gae", reverse=True):  # identical steps: the workload profile traces two
        v_next = next_value if t == n - 1 else values[t + 1]
        delta = rewards[t] + gamma * nonterminal[t] * v_next - values[t]
        last = delta + gamma * lam * nonterminal[t] * last
        adv[t] = last
    return adv, adv + values


def clipped_surrogate(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip_coef: float) -> torch.Tensor:
    """PPO's policy loss (to minimise): -mean(min(r * A, clip(r, 1 - c, 1 + c) * A)), r = exp(new - old).

    All inputs (B,) -> 0-d. Where clipping binds, the sample contributes no gradient.
    """
    ratio = (new_logp - old_logp).exp()
    return torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()


def clipped_value_loss(new_v: torch.Tensor, old_v: torch.Tensor, returns: torch.Tensor, clip_coef: float,
                       clip: bool = True) -> torch.Tensor:
    """0.5 * mean(max((v - R)^2, (v_old + clip(v - v_old, +-c) - R)^2)); plain 0.5 * MSE if not ``clip``.

    All inputs (B,) -> 0-d.
    """
    unclipped = (new_v - returns).square()
    if not clip:
        return 0.5 * unclipped.mean()
    v_clipped = old_v + (new_v - old_v).clamp(-clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (v_clipped - returns).square()).mean()


def policy_diagnostics(new_logp: torch.Tensor, old_logp: torch.Tensor,
                       clip_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(approx_kl, clip_frac) for (B,) log-probs: KL estimate mean((r - 1) - log r) (Schulman's k3,
    never negative) and the fraction of samples whose ratio lies outside [1 - c, 1 + c]."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    approx_kl = ((ratio - 1) - log_ratio).mean()
    clip_frac = ((ratio - 1).abs() > clip_coef).float().mean()
    return approx_kl, clip_frac


def normalise(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-8)


# --------------------------------------------------------------------------------------------------
# the update: rollout, minibatch steps, one epoch
# --------------------------------------------------------------------------------------------------


class Rollout:
    """Preallocated device storage for one rollout of ``steps`` x ``num_envs`` transitions."""

    def __init__(self, steps: int, num_envs: int, obs_dim: int, device: torch.device) -> None:
        self.obs = torch.zeros(steps, num_envs, obs_dim, device=device)
        self.actions = torch.zeros(steps, num_envs, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(steps, num_envs, device=device)
        self.values = torch.zeros(steps, num_envs, device=device)
        self.rewards = torch.zeros(steps, num_envs, device=device)  # scaled by reward_scale
        self.dones = torch.zeros(steps, num_envs, device=device)  # step t ended its episode (see gae)
        self.next_value = torch.zeros(num_envs, device=device)


class PPOTrainable(TrainableBase):
    def __init__(self, cfg: PPOConfig, data: MarketData, ctx: BuildContext) -> None:
        fs = data.features
        if fs is None:
            raise ModelDataError("ppo trains on OHLCV bars; this dataset has none. Use an OHLCV data config "
                                 "(e.g. data=6e_ohlcv_1m).")
        world = 1 if ctx.dist is None else ctx.dist.world_size
        cfg.check_world(world)
        # Under data parallelism (CleanRL's multi-GPU PPO): each rank steps num_envs / N environments and
        # trains on minibatches of batch_size / N of its own rollout; DDP averages the gradients.
        num_envs = cfg.num_envs // world
        n_batch = num_envs * cfg.rollout_steps
        mb = int(cfg.batch_size) // world
        if mb > n_batch:
            raise ConfigError(f"model.batch_size={mb} is larger than one rollout (model.num_envs x "
                              f"model.rollout_steps = {n_batch} samples): lower it or lengthen the rollout.")
        if cfg.norm_adv and mb < 2:
            raise ConfigError("model.batch_size must be >= 2 with model.norm_adv=true (a minibatch's advantage "
                              "std needs two samples).")
        need = cfg.window + cfg.episode_len
        self.gen = ctx.generator()
        if ctx.dist is not None:  # each rank its own rollouts (CleanRL: seed + rank)
            self.gen.manual_seed(ctx.seed + ctx.dist.rank)
        try:
            self.env = BarTradingEnv(fs, num_envs, cfg.window, cfg.episode_len, cfg.cost_ticks, self.gen)
        except ValueError:
            raise ModelDataError(
                f"ppo needs episodes of model.window + model.episode_len = {need} consecutive bars inside one "
                f"session of the training split; the data has {len(fs)} bars in all, which is too few. "
                f"Use more bars or lower model.window / model.episode_len.") from None
        self.cfg = cfg
        self.ctx = ctx
        self.device = ctx.device
        self.batch_size = mb * world  # the job's minibatch; this rank trains on self.rank_batch of it
        self.rank_batch = mb
        self.ac = ActorCritic(self.env.obs_dim, cfg.hidden).to(ctx.device)
        self.module = self.ac
        if ctx.cuda_graphs and cfg.target_kl is not None:
            raise ConfigError("trainer.cuda_graphs=true does not combine with model.target_kl (its masked updates "
                              "are not captured): set model.target_kl=null or trainer.cuda_graphs=false.")
        self.opt = make_optimizer(self.ac, cfg.lr, cfg.weight_decay, eps=cfg.adam_eps, impl=ctx.optimizer_impl,
                                  capturable=ctx.cuda_graphs)
        self._graphed: GraphedUpdate | None = None  # captured at the first update (trainer.cuda_graphs)
        self.scaler = ctx.grad_scaler()
        self._fwd = ctx.maybe_compile(self.ac)
        self.storage = Rollout(cfg.rollout_steps, num_envs, self.env.obs_dim, ctx.device)
        self.rank_samples = n_batch  # this rank's rollout
        self.samples_per_epoch = n_batch * world
        self.minibatches_per_pass = n_batch // mb
        self.batch_limit = n_batch
        self.updates_per_epoch = cfg.update_epochs * self.minibatches_per_pass
        # both definitions of an epoch's samples (every rank's), logged as params (harness: *_per_s per epoch):
        # the rollout's env steps (samples_per_epoch), and the samples the updates trained on
        self.env_steps, self.train_samples = n_batch * world, self.updates_per_epoch * mb * world
        self.epoch = 0
        # Stagger the environments' first episodes (each is cut short at a random step) so that episodes
        # end at spread-out times and a rollout shorter than an episode still finishes some of them.
        self.env.k = torch.randint(0, cfg.episode_len, (num_envs,), generator=self.gen, device=self.device)
        self.next_obs = self.env.observe()

    # acting ----------------------------------------------------------------------------------

    def policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs (B, obs_dim) -> (log-probabilities (B, n_actions), values (B,)), in float32."""
        with self.ctx.autocast():
            logits, value = self._fwd(obs)
        return F.log_softmax(logits.float(), dim=-1), value.float()

    def sample(self, logp: torch.Tensor) -> torch.Tensor:
        """Gumbel-max sampling from (B, n_actions) log-probs with the run's generator -> actions (B,)."""
        u = torch.rand(logp.shape, generator=self.gen, device=logp.device).clamp_(min=1e-20)
        return (logp - (-u.log()).log()).argmax(dim=-1)

    @torch.no_grad()
    def collect(self) -> dict[str, torch.Tensor]:
        """One rollout into ``self.storage`` (advantages not yet computed); returns reward diagnostics."""
        s, scale = self.storage, self.cfg.reward_scale
        reward_sum = torch.zeros((), device=self.device)
        for t in steps(self.cfg.rollout_steps):
            s.obs[t] = self.next_obs
            logp, value = self.policy(self.next_obs)
            action = self.sample(logp)
            s.actions[t] = action
            s.logprobs[t] = logp.gather(1, action[:, None]).squeeze(1)
            s.values[t] = value
            self.next_obs, reward, terminated, truncated = self.env.step(action)
            done = terminated | truncated  # see the module doc: the time limit cuts the bootstrap here
            s.rewards[t] = reward * scale
            s.dones[t] = done
            reward_sum += reward.mean()
        s.next_value = self.policy(self.next_obs)[1]
        return {"episode_reward": self.env.pop_episode_stats(),
                "reward_mean": reward_sum / self.cfg.rollout_steps}

    # learning --------------------------------------------------------------------------------

    def losses(self, obs: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor, old_v: torch.Tensor,
               adv: torch.Tensor, returns: torch.Tensor, normalised: bool = False) -> dict[str, torch.Tensor]:
        """The PPO loss of one minibatch (all inputs (B,) but obs (B, obs_dim)) and its parts.

        ``normalised``: ``adv`` is already normalised (over the whole minibatch, before it was split into
        micro-batches); otherwise it is normalised here when ``norm_adv`` is set.
        """
        c = self.cfg
        logp_all, v = self.policy(obs)
        new_logp = logp_all.gather(1, actions[:, None]).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        if c.norm_adv and not normalised:
            adv = normalise(adv)
        loss_policy = clipped_surrogate(new_logp, old_logp, adv, c.clip_coef)
        loss_value = clipped_value_loss(v, old_v, returns, c.clip_coef, c.clip_vloss)
        loss = loss_policy - c.ent_coef * entropy + c.vf_coef * loss_value
        approx_kl, clip_frac = policy_diagnostics(new_logp.detach(), old_logp, c.clip_coef)
        return {"loss": loss, "loss_policy": loss_policy.detach(), "loss_value": loss_value.detach(),
                "entropy": entropy.detach(), "approx_kl": approx_kl, "clip_frac": clip_frac}

    def _step(self, stopped: torch.Tensor | None) -> torch.Tensor:
        """Clip and step; with ``stopped`` (0-d bool) set, the step is undone in place (see module doc)."""
        if stopped is None:
            return clip_and_step(self.ac, self.opt, self.cfg.max_grad_norm, self.scaler,
                                 set_to_none=not self.ctx.cuda_graphs)
        kept = list(self.ac.parameters())
        for p in self.ac.parameters():
            st = self.opt.state.get(p, {})
            kept += [st[k] for k in ("exp_avg", "exp_avg_sq") if k in st]
        saved = [x.detach().clone() for x in kept]
        norm = clip_and_step(self.ac, self.opt, self.cfg.max_grad_norm, self.scaler)
        with torch.no_grad():
            for x, old in zip(kept, saved, strict=True):
                x.copy_(torch.where(stopped, old, x))
        return norm

    def learn_rollout(self) -> dict[str, torch.Tensor]:
        """GAE over ``self.storage``, then ``update_epochs`` passes of minibatch updates; epoch means."""
        c, s = self.cfg, self.storage
        adv, returns = gae(s.rewards, s.values, s.dones, s.next_value, c.gamma, c.gae_lambda)
        n = self.rank_samples
        b_obs, b_act = s.obs.reshape(n, -1), s.actions.reshape(n)
        b_logp, b_v = s.logprobs.reshape(n), s.values.reshape(n)
        b_adv, b_ret = adv.reshape(n), returns.reshape(n)
        meter = EpochMeter()
        stopped = None if c.target_kl is None else torch.zeros((), dtype=torch.bool, device=self.device)
        for _ in range(c.update_epochs):
            for idx in batches(n, self.rank_batch, self.gen, self.device, drop_last=True):
                out = self.optimizer_step((b_obs, b_act, b_logp, b_v, b_adv, b_ret), idx, stopped)
                if stopped is not None:
                    out["kl_stopped"] = stopped
                meter.add(**out)
            if stopped is not None:
                stopped = stopped | (out["approx_kl"] > c.target_kl)
        return meter.means()

    def optimizer_step(self, flat: tuple[torch.Tensor, ...], idx: torch.Tensor,
               stopped: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One optimiser step on minibatch ``idx`` (B,) of the flattened rollout ``flat`` (obs (N, obs_dim),
        actions, log-probs, values, advantages, returns (N,)); replayed as a CUDA graph with
        ``ctx.cuda_graphs`` (captured at the first call), else run eagerly."""
        minibatch = tuple(x[idx] for x in flat)
        if not self.ctx.cuda_graphs:
            return self._optimizer_step(*minibatch, stopped=stopped)
        if self._graphed is None:
            self._graphed = GraphedUpdate(self._optimizer_step, minibatch, (self.ac,), self.opt)
        return self._graphed(*minibatch)

    def _optimizer_step(self, obs: torch.Tensor, act: torch.Tensor, logp: torch.Tensor, v: torch.Tensor,
                adv: torch.Tensor, ret: torch.Tensor, stopped: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The update on one gathered minibatch (obs (B, obs_dim), the rest (B,)), in ``ctx.grad_accum``
        micro-batches."""
        if self.cfg.norm_adv:
            adv = normalise(adv)  # over the whole minibatch, so micro-batches see the same advantages

        def part(sl: slice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            out = self.losses(obs[sl], act[sl], logp[sl], v[sl], adv[sl], ret[sl], normalised=True)
            return out.pop("loss"), out

        loss, parts = accumulate(part, obs.shape[0], self.ctx.grad_accum, self.scaler)
        return {"loss": loss, **parts, Series.GRAD_NORM: self._step(stopped)}

    # the harness's hooks, in HOOK_ORDER ------------------------------------------------------

    def train_epoch(self) -> dict[str, torch.Tensor]:
        lr = self.cfg.lr * max(0.0, 1.0 - self.epoch / self.cfg.target_epochs) if self.cfg.anneal_lr \
            else self.cfg.lr
        for g in self.opt.param_groups:
            if isinstance(g["lr"], torch.Tensor):  # capturable (CUDA graphs): the graph reads this tensor
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        rewards = self.collect()
        out = self.learn_rollout()
        self.epoch += 1
        # torch.full fills on the device; torch.tensor(lr, device=...) would copy from the host and wait.
        return {**out, **rewards, "lr": torch.full((), lr, device=self.device)}

    def memory_step(self, batch_size: int):
        """One rollout, GAE and one minibatch update of ``batch_size`` samples (see TrainableBase)."""
        def step() -> dict[str, torch.Tensor]:
            c, s = self.cfg, self.storage
            self.collect()
            adv, returns = gae(s.rewards, s.values, s.dones, s.next_value, c.gamma, c.gae_lambda)
            n = self.rank_samples
            flat = (s.obs.reshape(n, -1), s.actions.reshape(n), s.logprobs.reshape(n), s.values.reshape(n),
                    adv.reshape(n), returns.reshape(n))
            idx = next(batches(n, batch_size, self.gen, self.device))
            return self._optimizer_step(*(x[idx] for x in flat))  # eager: any batch size

        return step

    def inference(self, batch_size: int):
        t = self.env._random_bars(batch_size)
        obs = self.env.observe_at(t, torch.zeros_like(t))
        ac, fwd = self.ac, self._fwd  # the (compiled, when trainer.compile) module training calls

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            ac.eval()
            with torch.no_grad(), self.ctx.autocast():
                out = fwd(obs)
            ac.train()
            return out

        return forward

    def info(self) -> dict[str, Any]:
        return {**super().info(), "env_steps_per_epoch": self.samples_per_epoch,
                "updates_per_epoch": self.updates_per_epoch,
                "samples_dropped_per_pass": self.samples_per_epoch - self.minibatches_per_pass * self.batch_size,
                "samples_dropped_share": 1.0 - self.minibatches_per_pass * self.batch_size / self.samples_per_epoch,
                "obs_dim": self.env.obs_dim, "cuda_graphs": self.ctx.cuda_graphs}


def build(cfg: PPOConfig, data: MarketData, ctx: BuildContext) -> PPOTrainable:
    return PPOTrainable(cfg, data, ctx)


SPEC = ModelSpec.of(SCHEMA, build, cuda_graphs=True, data_parallel=True)
