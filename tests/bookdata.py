"""A small in-memory MBP-10 book (MarketData) for tests that build TLOB without DBN I/O."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainbench.data import Book, MarketData


def make_book_data(n: int = 600, seed: int = 0, tick: float = 0.25) -> MarketData:
    """A consistent 10-level book: a random-walk best bid, spread 1-2 ticks, levels one tick apart."""
    rng = np.random.default_rng(seed)
    bid0 = 16_000 + np.cumsum(rng.integers(-1, 2, n))
    ask0 = bid0 + rng.integers(1, 3, n)
    levels = np.zeros((n, 10, 4))
    for j in range(10):
        levels[:, j, 0], levels[:, j, 2] = (ask0 + j) * tick, (bid0 - j) * tick
        levels[:, j, 1], levels[:, j, 3] = rng.integers(1, 60, n), rng.integers(1, 60, n)
    ts = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 1_000_000
    book = Book(ts=ts, levels=levels, symbol="TEST", tick_size=tick)
    return MarketData(name="test-book", schema="mbp-10", path=Path("memory"), synthetic=True, sha256="0" * 64,
                      book=book, extra={"train_frac": 0.8})
