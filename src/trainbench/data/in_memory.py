"""In-memory market data (random-walk minute bars with features on the device, or a given order book; no DBN
I/O) for tests, benchmarks and the conformance check."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainbench.data.arrays import Bars, Book
from trainbench.data.features import compute_features
from trainbench.data.market import MarketData


def random_walk_bars(n: int = 3000, n_instruments: int = 1, seed: int = 0, tick: float = 0.00005,
                     price: float = 1.08) -> Bars:
    """Minute bars on the tick grid, one contiguous block per instrument, with an overnight gap."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_instruments):
        steps = rng.integers(-3, 4, size=n)
        close = np.round(price / tick) * tick + np.cumsum(steps) * tick
        open_ = np.concatenate([[close[0]], close[:-1]])
        high = np.maximum(open_, close) + rng.integers(0, 3, size=n) * tick
        low = np.minimum(open_, close) - rng.integers(0, 3, size=n) * tick
        t = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 60_000_000_000
        t[n // 2:] += np.int64(3_600_000_000_000)  # a one-hour session gap halfway
        parts.append((t, np.full(n, k), open_, high, low, close, rng.integers(1, 500, size=n).astype(float)))
    cat = [np.concatenate([p[i] for p in parts]) for i in range(7)]
    return Bars(ts=cat[0], instrument=cat[1].astype(np.int64), open=cat[2], high=cat[3], low=cat[4],
                close=cat[5], volume=cat[6], symbols=[f"SYM{k}" for k in range(n_instruments)],
                instrument_ids=list(range(1, n_instruments + 1)), tick_size=np.full(n_instruments, tick))


def make_market_data(n: int = 3000, n_instruments: int = 1, seed: int = 0,
                     device: str = "cpu") -> MarketData:
    bars = random_walk_bars(n, n_instruments, seed)
    return MarketData(name="test", schema="ohlcv-1m", path=Path("memory"), synthetic=True, sha256="0" * 64,
                      bars=bars, features=compute_features(bars, device=device))


def book_market_data(book: Book, train_frac: float = 0.8, name: str = "test-book") -> MarketData:
    """``book`` as the MarketData a book model is built on: the first ``train_frac`` of its events train."""
    return MarketData(name=name, schema="mbp-10", path=Path("memory"), synthetic=True, sha256="0" * 64,
                      book=book, extra={"train_frac": train_frac})
