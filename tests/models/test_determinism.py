"""Every model's epochs are a function of the seed: the same seed gives bit-identical losses, another seed
does not (so the seed really reaches the model's sampling): the rerun guarantee of issue 8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from trainbench.data import Book, MarketData
from trainbench.data.memory import make_market_data
from trainbench.models.base import BuildContext
from trainbench.models.registry import REGISTRY
from trainbench.train import seed_everything

TINY = {
    "dqn": dict(window=8, hidden=32, num_envs=8, episode_len=20, updates_per_epoch=5, buffer_size=500,
                learning_starts=64, batch_size=32),
    "ppo": dict(window=8, hidden=32, num_envs=8, rollout_steps=16, episode_len=20, update_epochs=2, batch_size=32),
    "mamba2": dict(d_model=16, n_layers=2, d_state=8, headdim=8, chunk_size=8, seq_len=24, batch_size=16),
    "tft": dict(hidden=8, heads=2, encoder_len=12, horizons=[1, 3, 5], batch_size=16, dropout=0.1,
                interpret_windows=32),
    "tlob": dict(seq_len=8, hidden_dim=8, num_layers=2, batch_size=16, horizon=4, smooth=2),
}


def _book(n: int = 600, seed: int = 0) -> MarketData:
    rng = np.random.default_rng(seed)
    bid0 = 16_000 + np.cumsum(rng.integers(-1, 2, n))
    ask0 = bid0 + rng.integers(1, 3, n)
    levels = np.zeros((n, 10, 4))
    for j in range(10):
        levels[:, j, 0], levels[:, j, 2] = (ask0 + j) * 0.25, (bid0 - j) * 0.25
        levels[:, j, 1], levels[:, j, 3] = rng.integers(1, 60, n), rng.integers(1, 60, n)
    ts = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 1_000_000
    book = Book(ts=ts, levels=levels, symbol="TEST", tick_size=0.25)
    return MarketData(name="book", schema="mbp-10", path=Path("memory"), synthetic=True, sha256="0" * 64,
                      book=book, extra={"train_frac": 0.8})


def _losses(name: str, seed: int, deterministic: bool, data: MarketData) -> list[dict[str, float]]:
    spec = REGISTRY.get(name)
    seed_everything(seed, deterministic)  # what train_job does before build
    try:
        t = spec.build(spec.config_cls(name=name, **TINY[name]), data,
                       BuildContext(device=torch.device("cpu"), seed=seed, deterministic=deterministic))
        return [{k: float(v) for k, v in t.train_epoch().items()} for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)  # global state: never leak into other tests


def test_every_registered_model_is_covered():
    assert sorted(TINY) == REGISTRY.names()


@pytest.mark.parametrize("name", sorted(TINY))
def test_same_seed_same_epochs_other_seed_other_epochs(name):
    data = _book() if name == "tlob" else make_market_data(2000)
    a = _losses(name, 5, True, data)
    assert a == _losses(name, 5, True, data)  # every loss part and diagnostic, exactly
    assert a == _losses(name, 5, False, data)  # on CPU the flag changes nothing at a fixed thread count
    assert a[0]["loss"] != _losses(name, 6, True, data)[0]["loss"]
