"""Market data: DBN files in (real or generated), bars/book arrays and model-ready features out.

- :mod:`trainbench.data.dbn` reads Databento DBN files (OHLCV, MBP-10) and validates them.
- :mod:`trainbench.data.dbn_write` writes them (records laid out as ``databento_dbn`` encodes them).
- :mod:`trainbench.data.synth` generates synthetic markets (6E-like bars, an MBP-10 book) and writes them.
- :mod:`trainbench.data.features` turns bars into causal, normalised features on the device.
- :func:`trainbench.data.loader.load_market_data` is what the harness calls: config in, MarketData out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainbench.core.errors import DataError as DataError  # public: trainbench.data.DataError

if TYPE_CHECKING:
    from trainbench.data.features import FeatureSet


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


@dataclass
class MarketData:
    """What a model's ``build`` receives: one dataset, loaded, validated, featurised on the device."""

    name: str
    schema: str
    path: Path
    synthetic: bool
    sha256: str
    bars: Bars | None = None
    book: Book | None = None
    features: FeatureSet | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "book" if self.book is not None else "bars"

    def info(self) -> dict[str, Any]:
        """Logged with every run: what the timings were measured on."""
        out: dict[str, Any] = {"path": str(self.path), "schema": self.schema, "synthetic": self.synthetic,
                               "sha256": self.sha256}
        if self.bars is not None:
            out.update(n_bars=len(self.bars), instruments=",".join(self.bars.symbols),
                       start=str(np.datetime64(int(self.bars.ts.min()), "ns")),
                       end=str(np.datetime64(int(self.bars.ts.max()), "ns")))
        if self.book is not None:
            out.update(n_events=len(self.book), instruments=self.book.symbol,
                       start=str(np.datetime64(int(self.book.ts[0]), "ns")),
                       end=str(np.datetime64(int(self.book.ts[-1]), "ns")))
        return out
