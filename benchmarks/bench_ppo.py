"""PPO's default epoch on 10,000 one-minute bars: its time, environment steps per second, and how it splits
between the rollout (``collect``: num_envs x rollout_steps env steps with no-grad policy forwards) and the
update (``learn``: GAE plus update_epochs passes of minibatch steps).

Each repeat times one rollout and then one update of the same epoch, each waited for on the device; the
figures are medians over repeats after one untimed epoch. CPU runs use one thread, as the CPU profile does.
"""

from __future__ import annotations

import statistics
import time

import torch
from common import Result, bench_device, cpu_threads, sync_fn

from trainbench.data.in_memory import make_market_data
from trainbench.measure.hardware import hardware_label
from trainbench.models.base import BuildContext
from trainbench.models.ppo import PPOConfig, build


def run(quick: bool) -> list[Result]:
    device = bench_device()
    with cpu_threads(1):
        return _run(quick, device)


def _run(quick: bool, device: torch.device) -> list[Result]:
    label = hardware_label(device)
    sync = sync_fn(device)
    data = make_market_data(n=10_000, device=str(device))
    torch.manual_seed(0)
    agent = build(PPOConfig(), data, BuildContext(device=device, seed=0))
    agent.train_epoch()
    sync()
    rollout, update = [], []
    for _ in range(3 if quick else 10):
        sync()
        t0 = time.perf_counter()
        agent.collect()
        sync()
        t1 = time.perf_counter()
        agent.learn_rollout()
        sync()
        rollout.append(t1 - t0)
        update.append(time.perf_counter() - t1)
    r, u = statistics.median(rollout), statistics.median(update)
    epoch = statistics.median(a + b for a, b in zip(rollout, update, strict=True))
    steps = agent.samples_per_epoch
    details = {**agent.info(), "num_envs": agent.cfg.num_envs, "rollout_steps": agent.cfg.rollout_steps,
               "repeats": len(rollout)}
    return [
        Result("ppo.epoch_s", epoch, "s", device=label, details=details),
        Result("ppo.env_steps_per_s", steps / epoch, "steps/s", device=label),
        Result("ppo.rollout_s", r, "s", device=label),
        Result("ppo.update_s", u, "s", device=label),
        Result("ppo.rollout_share", 100 * r / (r + u), "%", device=label),
        Result("ppo.rollout_env_steps_per_s", steps / r, "steps/s", device=label),
    ]
