"""What a model declares, read without importing the model (no torch): its :class:`ModelSchema` (name, config
class, data kind, description, sizes), what composing, validating and explaining the configuration needs, and
its :class:`ModelSpec`, the schema with the ``build`` function that makes the model.

trainbench's own models declare their schema here, in the configuration (:mod:`trainbench.config.models`),
and their spec in their model module (``SPEC = ModelSpec.of(SCHEMA, build, ...)``), so that ``run.py
model=nope``, ``--help`` and ``python -m trainbench.config`` never import torch. A plugin declares its spec
only (``trainbench.api.ModelSpec``, its ``trainbench.models`` entry point): the registry imports it when the
configuration is composed (:mod:`trainbench.models.registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainbench.core.trainable import Trainable

if TYPE_CHECKING:
    from trainbench.config.run import ModelConfig


@dataclass(frozen=True)
class ModelSchema:
    """A model as the configuration knows it, without its code."""

    name: str
    config_cls: type[ModelConfig]
    #: The data kind it trains on: ``bars`` (OHLCV) or ``book`` (MBP-10).
    data_kind: str = "bars"
    description: str = ""
    #: For a model without ``conf/model`` files (a plugin): each size's keys, ``{"small": {"hidden": 32},
    #: "reference": {"hidden": 256}}``, chosen by ``size=...``; a size left out takes the config's defaults.
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry: a model's schema and the function that builds it,
    ``build(cfg, data: MarketData, ctx: BuildContext) -> Trainable``."""

    name: str
    config_cls: type[ModelConfig]
    build: Callable[..., Trainable]
    #: The data kind it trains on: ``bars`` (OHLCV) or ``book`` (MBP-10).
    data_kind: str = "bars"
    description: str = ""
    #: For a model without ``conf/model`` files (a plugin): each size's keys, ``{"small": {"hidden": 32},
    #: "reference": {"hidden": 256}}``, chosen by ``size=...``; a size left out takes the config's defaults.
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    #: Its update can be captured once and replayed as one CUDA graph (``trainer.cuda_graphs``): static
    #: shapes, no host sync, no data-dependent control flow in the training step.
    cuda_graphs: bool = False
    #: It trains as the ranks of a data-parallel job (``trainer.distributed.nproc > 1``), doing what
    #: :data:`trainbench.core.trainable.DATA_PARALLEL` says; without it such a job runs on one rank.
    data_parallel: bool = False

    @classmethod
    def of(cls, schema: ModelSchema, build: Callable[..., Trainable], **options: Any) -> ModelSpec:
        """The spec of a model whose schema is declared apart from its code (trainbench's own)."""
        return cls(name=schema.name, config_cls=schema.config_cls, build=build, data_kind=schema.data_kind,
                   description=schema.description, sizes=dict(schema.sizes), **options)
