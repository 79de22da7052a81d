"""Every model's epochs are a function of the seed: the same seed gives bit-identical losses, another seed
does not (so the seed really reaches the model's sampling): what makes a rerun bit-exact."""

from __future__ import annotations

import os

import pytest
import torch

from helpers.data import data_for
from helpers.models import model_config
from trainbench.data.market import MarketData
from trainbench.models.base import BuildContext
from trainbench.models.registry import REGISTRY
from trainbench.models.runtime import seed_everything

CUBLAS = "CUBLAS_WORKSPACE_CONFIG"


def _losses(name: str, seed: int, deterministic: bool, data: MarketData) -> list[dict[str, float]]:
    spec = REGISTRY.get(name)
    saved = (os.environ.get(CUBLAS), torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    seed_everything(seed, deterministic)  # what train_job does before build
    try:
        t = spec.build(model_config(name), data,
                       BuildContext(device=torch.device("cpu"), seed=seed, deterministic=deterministic))
        return [{k: float(v) for k, v in t.train_epoch().items()} for _ in range(2)]
    finally:
        # global state: never leak into other tests (the memory predictor reads CUBLAS_WORKSPACE_CONFIG)
        torch.use_deterministic_algorithms(False)
        env, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved
        if env is None:
            os.environ.pop(CUBLAS, None)
        else:
            os.environ[CUBLAS] = env


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
@pytest.mark.slow
def test_same_seed_same_epochs_other_seed_other_epochs(name):
    kind = REGISTRY.get(name).data_kind
    data = data_for(kind, 2000 if kind == "bars" else None)
    a = _losses(name, 5, True, data)
    assert a == _losses(name, 5, True, data)  # every loss part and diagnostic, exactly
    assert a == _losses(name, 5, False, data)  # on CPU the flag changes nothing at a fixed thread count
    assert a[0]["loss"] != _losses(name, 6, True, data)[0]["loss"]
