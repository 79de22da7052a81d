"""Shared fixtures: small in-memory market data (no DBN I/O) and CPU-only, single-thread torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from trainbench.data import MarketData
from trainbench.data.in_memory import make_market_data

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

torch.set_num_threads(1)


@pytest.fixture
def market_data() -> MarketData:
    return make_market_data()


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def shared_data_dir(tmp_path_factory):
    """One data folder for the end-to-end jobs (tracking, sweep, core): the synthetic debug file is generated once."""
    return tmp_path_factory.mktemp("data")
