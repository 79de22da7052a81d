"""Test-side name for the in-memory market data of :mod:`trainbench.data.memory`."""

from trainbench.data.memory import make_market_data, random_walk_bars

__all__ = ["make_market_data", "random_walk_bars"]
