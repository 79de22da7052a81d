"""In-memory market data for tests that build models without DBN I/O: bars and a 10-level book."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from trainbench.config.run import DataConfig
from trainbench.data.arrays import Book
from trainbench.data.in_memory import book_market_data, make_market_data
from trainbench.data.market import MarketData

__all__ = ["FOUR", "SIX_E", "book_data", "data_config", "data_for", "make_book_data", "make_market_data",
           "random_book"]

#: Instruments for the DBN writer and generator tests: Euro FX alone, and four contracts of the 90-day set (one
#: given as an attribute object, as a Hydra config would).
SIX_E = {"symbol": "6EH4", "instrument_id": 42, "tick_size": 0.00005, "price": 1.08, "daily_vol": 0.005,
         "volume": 800.0}
FOUR = [
    {"symbol": "ESH4", "instrument_id": 1, "tick_size": 0.25, "price": 4800.0, "daily_vol": 0.01, "volume": 1200},
    SimpleNamespace(symbol="NQH4", instrument_id=2, tick_size=0.25, price=17500.0, daily_vol=0.013, volume=400),
    {"symbol": "ZNH4", "instrument_id": 3, "tick_size": 1 / 64, "price": 110.0, "daily_vol": 0.004, "volume": 700},
    SIX_E,
]

TICK = 0.25


def random_book(n: int = 400, seed: int = 0, empty_frac: float = 0.0, tick: float = TICK) -> Book:
    """A consistent 10-level book on a ``tick`` grid: a random-walk best bid, spread 1-2 ticks, levels one
    tick apart, positive sizes; ``empty_frac`` of the deeper levels (1..9) left empty."""
    rng = np.random.default_rng(seed)
    bid0 = 16_000 + np.cumsum(rng.integers(-1, 2, n))  # in ticks
    ask0 = bid0 + rng.integers(1, 3, n)
    levels = np.zeros((n, 10, 4))
    for j in range(10):
        levels[:, j, 0] = (ask0 + j) * tick
        levels[:, j, 2] = (bid0 - j) * tick
        levels[:, j, 1] = rng.integers(1, 60, n)
        levels[:, j, 3] = rng.integers(1, 60, n)
    if empty_frac:
        empty = rng.random((n, 10, 2)) < empty_frac
        empty[:, 0] = False
        for side, (px, sz) in enumerate(((0, 1), (2, 3))):
            # an empty level empties every level behind it too, as in a real book
            e = np.logical_or.accumulate(empty[:, :, side], axis=1)
            levels[:, :, px][e] = np.nan
            levels[:, :, sz][e] = 0.0
    ts = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 1_000_000
    return Book(ts=ts, levels=levels, symbol="TEST", tick_size=tick)


def book_data(book: Book, train_frac: float = 0.8) -> MarketData:
    """``book`` as the MarketData a book model is built on (the first ``train_frac`` of events train)."""
    return book_market_data(book, train_frac)


def make_book_data(n: int = 600, seed: int = 0, tick: float = TICK) -> MarketData:
    """A random book of ``n`` events as MarketData (:func:`random_book`, :func:`book_data`)."""
    return book_data(random_book(n, seed, tick=tick))


def data_for(kind: str, n: int | None = None, device: str = "cpu") -> MarketData:
    """Data of a model's kind (``ModelSpec.data_kind``): ``n`` bars (default 10,000) or book events (600)."""
    if kind == "book":
        return make_book_data(n or 600)
    if kind == "bars":
        return make_market_data(n or 3000, device=device)
    raise ValueError(f"no test data of kind {kind!r}")


def data_config(**kw) -> DataConfig:
    """A small synthetic bars ``DataConfig`` (600 bars at data/t.dbn.zst); keywords override."""
    return DataConfig(**{"name": "t", "synthetic": True, "path": "data/t.dbn.zst", "n_bars": 600, **kw})
