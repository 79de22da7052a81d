"""The key reference: every config key with its type, default and doc (``python -m trainbench.config``).

Read from the schemas' dataclass fields (``param(doc=...)`` metadata), so the reference cannot drift from
the schemas. A model's own keys come from its config class, which the caller passes in (the model
registry stands above the configuration: :mod:`trainbench.config.__main__` asks it).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterable
from typing import Any

from trainbench.config.analyze import AnalysisConfig, CompareConfig, DecisionConfig, ProjectionConfig
from trainbench.config.run import DataConfig, ModelConfig, TrainerConfig
from trainbench.config.shared import HardwareConfig, TrackingConfig


def describe(schema: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, doc) rows for every field of a schema, nested ones included."""
    hints = typing.get_type_hints(schema)
    rows = []
    for f in dataclasses.fields(schema):
        key = prefix + f.name
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            rows.extend(describe(type(default), key + "."))
            continue
        if isinstance(default, enum.Enum):
            default = default.value
        rows.append((key, _type_name(hints.get(f.name, f.type)), repr(default), f.metadata.get("doc", "")))
    return rows


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "|".join(m.value for m in tp)
    if isinstance(tp, type) and not typing.get_args(tp):
        return "Any" if tp is Any else tp.__name__
    return str(tp).replace("typing.", "").replace("trainbench.config.run.", "").replace("NoneType", "None")


def reference(model_specs: Iterable[Any] = ()) -> list[tuple[str, str, str, str]]:
    """Every key of run.py's and analyze.py's config as (key, type, default, doc); then, for each of
    ``model_specs`` (the registry's specs: name, config class, description), its keys as ``model.<field>``
    rows of its own config class, model by model."""
    rows = []
    for section, schema in (("data", DataConfig), ("trainer", TrainerConfig), ("hardware", HardwareConfig),
                            ("tracking", TrackingConfig), ("model", ModelConfig), ("decision", DecisionConfig),
                            ("analysis", AnalysisConfig), ("compare", CompareConfig),
                            ("projection", ProjectionConfig)):
        rows.extend(describe(schema, section + "."))
    for spec in model_specs:
        rows.append((f"# model={spec.name}", spec.config_cls.__name__, "", spec.description))
        rows.extend(describe(spec.config_cls, "model."))
    return rows
