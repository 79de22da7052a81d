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


@pytest.fixture(scope="session")
def reference_tft_step():
    """One training step of the reference-size TFT (``experiment=tft_volatility``, 1,200 synthetic bars)
    profiled on this CPU by measure/workload.py (``profile_callable``; ~7 CPU-s): the tests that project it
    share it. Tests using it carry ``pytest.mark.xdist_group(analysis_helpers.REFERENCE_TFT)``."""
    import torch

    from trainbench.compose import compose_run
    from trainbench.config.run import validate
    from trainbench.data.in_memory import make_market_data
    from trainbench.measure.workload import profile_callable
    from trainbench.models.base import BuildContext
    from trainbench.models.registry import REGISTRY

    cpu = torch.device("cpu")
    obj = validate(compose_run(["experiment=tft_volatility"]))
    tft = REGISTRY.get("tft").build(obj.model, make_market_data(1200), BuildContext(device=cpu))
    return profile_callable(tft.memory_step(tft.batch_size), cpu)
