"""PPO's default epoch on 10,000 one-minute bars: its time, environment steps per second, and how it splits
between the rollout (``collect``: num_envs x rollout_steps env steps with no-grad policy forwards) and the
update (``learn``: GAE plus update_epochs passes of minibatch steps).

Each repeat times one rollout and then one update of the same epoch, each waited for on the device; the
figures are medians over repeats after one untimed epoch. CPU runs use one thread, as the CPU profile does.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch
from common import Result

from trainbench.data import Bars, MarketData
from trainbench.data.features import compute_features
from trainbench.models.base import BuildContext
from trainbench.models.ppo import PPOConfig, build


def _bars(n: int, seed: int = 0, tick: float = 0.00005) -> Bars:
    """A random walk of minute bars on 6E's tick grid (one instrument, no gap)."""
    rng = np.random.default_rng(seed)
    close = np.round(1.08 / tick) * tick + np.cumsum(rng.integers(-3, 4, size=n)) * tick
    open_ = np.concatenate([[close[0]], close[:-1]])
    high = np.maximum(open_, close) + rng.integers(0, 3, size=n) * tick
    low = np.minimum(open_, close) - rng.integers(0, 3, size=n) * tick
    ts = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 60_000_000_000
    return Bars(ts=ts, instrument=np.zeros(n, dtype=np.int64), open=open_, high=high, low=low, close=close,
                volume=rng.integers(1, 500, size=n).astype(float), symbols=["6EH4"], instrument_ids=[1],
                tick_size=np.array([tick]))


def run(quick: bool) -> list[Result]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    label = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (1 thread)"
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    bars = _bars(10_000)
    data = MarketData(name="bench", schema="ohlcv-1m", path=Path("memory"), synthetic=True, sha256="0" * 64,
                      bars=bars, features=compute_features(bars, device=str(device)))
    torch.manual_seed(0)
    agent = build(PPOConfig(), data, BuildContext(device=device, seed=0))
    agent.train_epoch()
    sync()
    rollout, update = [], []
    for _ in range(3 if quick else 10):
        t0 = time.perf_counter()
        agent.collect()
        sync()
        t1 = time.perf_counter()
        agent.learn()
        sync()
        rollout.append(t1 - t0)
        update.append(time.perf_counter() - t1)
    r, u = statistics.median(rollout), statistics.median(update)
    epoch = statistics.median(a + b for a, b in zip(rollout, update, strict=True))
    steps = agent.samples_per_epoch
    details = {**agent.info(), "num_envs": agent.cfg.num_envs, "rollout_steps": agent.cfg.rollout_steps}
    return [
        Result("ppo.epoch_s", epoch, "s", device=label, details=details),
        Result("ppo.env_steps_per_s", steps / epoch, "steps/s", device=label),
        Result("ppo.rollout_s", r, "s", device=label),
        Result("ppo.update_s", u, "s", device=label),
        Result("ppo.rollout_share", 100 * r / (r + u), "%", device=label),
        Result("ppo.rollout_env_steps_per_s", steps / r, "steps/s", device=label),
    ]
