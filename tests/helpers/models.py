"""Tiny configs of every registered model, and builders for them: the one place tests take them from.

``TINY`` holds each model's smallest sizes that still exercise every code path (an epoch in well under a
second on one core). A model registered without an entry fails :func:`tiny_config` with a message, so a
new model is never skipped silently: add its tiny sizes here.
"""

from __future__ import annotations

from typing import Any

import torch

from helpers.data import data_for
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.models.base import BuildContext, ModelSpec
from trainbench.models.registry import REGISTRY

CPU = torch.device("cpu")

TINY: dict[str, dict[str, Any]] = {
    "dqn": dict(window=8, hidden=32, num_envs=8, episode_len=20, updates_per_epoch=3, buffer_size=500,
                learning_starts=64, batch_size=32),
    "ppo": dict(window=8, hidden=32, num_envs=8, rollout_steps=8, episode_len=20, update_epochs=1, batch_size=32),
    "mamba2": dict(d_model=16, n_layers=1, d_state=8, headdim=8, chunk_size=8, seq_len=24, batch_size=64),
    "tft": dict(hidden=8, heads=2, encoder_len=12, horizons=[1, 3], batch_size=64, interpret_windows=32),
    "tlob": dict(seq_len=8, hidden_dim=8, num_layers=1, batch_size=64, horizon=4, smooth=2),
}


def tiny_config(name: str, **overrides: Any) -> Any:
    """The model's schema at its tiny sizes (``TINY``), with ``overrides``."""
    spec = REGISTRY.get(name)
    if name not in TINY:
        raise KeyError(f"no tiny sizes for model {name!r}: add them to TINY in tests/helpers/models.py")
    return spec.config_cls(**{**TINY[name], **overrides})


def small_config(name: str, **overrides: Any) -> Any:
    """The model's composed and validated `small` size (``size=small``), with ``overrides`` set on it."""
    cfg = validate(compose_run([f"model={name}", "size=small"])).model
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def build(spec: ModelSpec, cfg: Any, data: Any = None, seed: int = 0, **ctx: Any) -> Any:
    """``spec.build(cfg, data, BuildContext(**ctx))`` on fresh initial weights (``torch.manual_seed(seed)``);
    ``data`` defaults to :func:`helpers.data.data_for` the model's data kind. ``device`` defaults to CPU."""
    ctx.setdefault("device", CPU)
    torch.manual_seed(seed)
    return spec.build(cfg, data if data is not None else data_for(spec.data_kind), BuildContext(**ctx))


def build_tiny(name: str, data: Any = None, **ctx: Any) -> Any:
    """The model built at its tiny sizes (:func:`tiny_config`); ``ctx`` goes to its ``BuildContext``."""
    return build(REGISTRY.get(name), tiny_config(name), data, **ctx)
