"""Market data: DBN files in (real or generated), bars/book arrays and model-ready features out.

- :mod:`trainbench.data.dbn` reads Databento DBN files (OHLCV, MBP-10) and validates them.
- :mod:`trainbench.data.dbn_write` writes them (records laid out as ``databento_dbn`` encodes them).
- :mod:`trainbench.data.synth` generates synthetic markets (6E-like bars, an MBP-10 book) and writes them.
- :mod:`trainbench.data.features` turns bars into causal, normalised features on the device.
- :func:`trainbench.data.loader.load_market_data` is what the harness calls: config in, MarketData out.
- :mod:`trainbench.data.arrays` holds what a file gives (``Bars``, ``Book``), :mod:`trainbench.data.market` what
  a model receives (``MarketData``).
"""

from __future__ import annotations

from trainbench.core.errors import DataError as DataError  # public: trainbench.data.DataError
