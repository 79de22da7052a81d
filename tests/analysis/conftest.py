"""One temporary sqlite MLflow store per test session (creating one costs seconds); tests use their own
sweep ids in it, or their own experiment."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for analysis_helpers

from analysis_helpers import Store  # noqa: E402


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("mlflow"))
