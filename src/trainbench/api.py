"""What a model of your own needs from trainbench: one import for model authors (docs/own-models.md).

A model is a package that exports ``SPEC = ModelSpec(name, config_cls, build, data_kind, ...)`` and
declares it as an entry point of the group ``trainbench.models`` (or is loaded ad hoc with
``python run.py model=custom model.spec=<package.module>:SPEC``):

- its config: a dataclass subclass of :class:`ModelConfig` whose fields are made with :func:`param`
  (doc and range, checked before the run opens; :class:`ConfigError` for a cross-field rule);
- ``build(cfg, data, ctx)``: gets the config, the :class:`MarketData` (``data.features``, a
  :class:`FeatureSet` of OHLCV bar features on the device, or ``data.book``, an MBP-10 :class:`Book`) and the
  :class:`BuildContext` (device, seed, precision, gradient accumulation, optimiser implementation), and
  returns a :class:`Trainable`, usually a :class:`TrainableBase` subclass using the helpers below;
- ``python -m trainbench.check <package.module>:SPEC`` (or :func:`assert_conforms` in a test) checks that
  it measures honestly.

The names here are the supported surface; the rest of trainbench may change between versions.
"""

from trainbench.config.run import ModelConfig
from trainbench.config.shared import param
from trainbench.conformance import Check, assert_conforms, run_checks
from trainbench.core.errors import ConfigError, ConformanceError, DataError, ModelDataError
from trainbench.data.arrays import Bars, Book
from trainbench.data.features import FeatureSet
from trainbench.data.market import MarketData
from trainbench.models.base import (
    HOOK_ORDER,
    INFO_KEYS,
    BuildContext,
    Describes,
    EpochMeter,
    Evaluates,
    ModelSpec,
    StepsForMemory,
    Trainable,
    TrainableBase,
    WritesArtifacts,
    accumulate,
    batches,
    clip_and_step,
    count_params,
    evaluate,
    make_optimizer,
)

__all__ = [
    "HOOK_ORDER", "INFO_KEYS", "Bars", "Book", "BuildContext", "Check", "ConfigError", "ConformanceError", "DataError",
    "Describes", "EpochMeter", "Evaluates", "FeatureSet", "MarketData", "ModelConfig", "ModelDataError", "ModelSpec",
    "StepsForMemory", "Trainable", "TrainableBase", "WritesArtifacts",
    "accumulate", "assert_conforms", "batches", "clip_and_step", "count_params", "evaluate", "make_optimizer",
    "param", "run_checks",
]
