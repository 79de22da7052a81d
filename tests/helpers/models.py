"""Every registered model's config at a composed size, and builders for it: the one place tests take them from.

Tests choose a model as a user does: ``model=<name> size=tiny`` composed as run.py composes it (the `tiny`
size, ``conf/model/<name>/tiny.yaml``: the smallest settings that still run every code path, an epoch in
well under a second on one core), plus a command-line override (``"model.batch_size=16"``) where a test
needs another value. A model without a `tiny` size fails :func:`model_config` naming the file to add, so a
new model is never skipped silently.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from hydra.errors import MissingConfigException
from omegaconf import DictConfig, OmegaConf

from helpers.data import data_for
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.models.base import BuildContext, ModelSpec
from trainbench.models.registry import REGISTRY

CPU = torch.device("cpu")


@cache
def _composed(name: str, size: str) -> DictConfig:
    """``model=<name> size=<size>``, composed once per test session (Hydra's compose is the slow part)."""
    try:
        return compose_run([f"model={name}", f"size={size}"])
    except MissingConfigException as e:
        raise KeyError(f"model {name!r} has no `{size}` size: add conf/model/{name}/{size}.yaml ({e})") from None


def model_config(name: str, *overrides: str, size: str = "tiny") -> Any:
    """The validated ``model`` config of ``model=<name> size=<size>`` with ``overrides``: command-line
    ``key=value`` overrides of the composed run config, e.g. ``"model.batch_size=16"``."""
    return validate(OmegaConf.merge(_composed(name, size), OmegaConf.from_dotlist(list(overrides)))).model


def build(spec: ModelSpec, cfg: Any, data: Any = None, seed: int = 0, **ctx: Any) -> Any:
    """``spec.build(cfg, data, BuildContext(**ctx))`` on fresh initial weights (``torch.manual_seed(seed)``);
    ``data`` defaults to :func:`helpers.data.data_for` the model's data kind. ``device`` defaults to CPU."""
    ctx.setdefault("device", CPU)
    torch.manual_seed(seed)
    return spec.build(cfg, data if data is not None else data_for(spec.data_kind), BuildContext(**ctx))


def build_model(name: str, *overrides: str, data: Any = None, size: str = "tiny", seed: int = 0, **ctx: Any) -> Any:
    """The model built from :func:`model_config` (``overrides``, ``size``); ``ctx`` goes to its ``BuildContext``."""
    return build(REGISTRY.get(name), model_config(name, *overrides, size=size), data, seed, **ctx)
