"""The arrays a market data file holds: :class:`Bars` (OHLCV) and :class:`Book` (an MBP-10 order book), as
:mod:`trainbench.data.dbn` reads them and :mod:`trainbench.data.synth` generates them (plugins import them from
:mod:`trainbench.api`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Bars:
    """OHLCV bars of one or more instruments, sorted by (instrument, ts); each instrument contiguous.

    All arrays have shape (N,). Prices are floats in the instrument's currency (DBN fixed-point / 1e9).
    """

    ts: np.ndarray  # int64 ns since the epoch, UTC
    instrument: np.ndarray  # int64 index into `symbols` (0..K-1), not the Databento instrument_id
    open: np.ndarray  # float64
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray  # float64
    symbols: list[str]  # raw symbol per instrument index
    instrument_ids: list[int]  # Databento instrument_id per instrument index
    tick_size: np.ndarray  # float64 (K,): from the config when known, else inferred from prices
    schema: str = "ohlcv-1m"
    # int64 (N,) Databento instrument_id of each bar, or None. It differs from the instrument's first id
    # where a continuous symbol (ES.c.0) rolls to the next contract; features start a new segment there.
    contract: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class Book:
    """A Level-2 (MBP-10) order book of one instrument after each event.

    ``levels`` has shape (E, 10, 4): per level, in LOBSTER order, ask price, ask size, bid price,
    bid size (level 0 is the best). Prices are floats; an empty level has NaN price and size 0.
    """

    ts: np.ndarray  # int64 ns (E,), ts_recv
    levels: np.ndarray  # float64 (E, 10, 4)
    symbol: str
    tick_size: float
    skipped: int = 0  # leading events of the file dropped because one side of the book was still empty

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def mid(self) -> np.ndarray:
        return (self.levels[:, 0, 0] + self.levels[:, 0, 2]) / 2.0
