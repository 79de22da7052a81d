"""What a model's ``build`` receives: :class:`MarketData`, one dataset loaded, validated and featurised
(:func:`trainbench.data.loader.load_market_data` makes it; plugins import it from :mod:`trainbench.api`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainbench.data.arrays import Bars, Book

if TYPE_CHECKING:
    from trainbench.data.features import FeatureSet


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
