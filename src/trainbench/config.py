"""Hydra registration of the schemas, composing run.py's config in code, and the key reference.

The schemas (types, ranges, docs) are in :mod:`trainbench.schema` (run.py) and
:mod:`trainbench.analysis.schema` (analyze.py); each model's own config class is in its model module.
This module registers them in Hydra's ConfigStore under ``base_*`` names, the models' from the
registry, so it is the one place that needs the model registry (and torch) to know the config.

``python -m trainbench.config`` prints every key with its type, default and doc, every registered
model's keys included.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from trainbench.analysis.schema import (
    AnalysisConfig,
    CompareConfig,
    DecisionConfig,
    register_analysis_configs,
)
from trainbench.schema import (
    DataConfig,
    HardwareConfig,
    ModelConfig,
    RunConfig,
    TrackingConfig,
    TrainerConfig,
)


def register_configs(include_models: bool = True) -> None:
    """Register the schemas under `base_*` names (YAML files extend them via their defaults list).

    ``include_models`` imports the model registry (and torch); analyze.py passes False.
    """
    cs = ConfigStore.instance()
    cs.store(name="base_run", node=RunConfig)
    cs.store(group="data", name="base_data", node=DataConfig)
    cs.store(group="trainer", name="base_trainer", node=TrainerConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
    cs.store(group="tracking", name="base_tracking", node=TrackingConfig)
    register_analysis_configs()
    if include_models:
        from trainbench.models.registry import REGISTRY

        for spec in REGISTRY.specs():
            cs.store(group="model", name=f"base_{spec.name}", node=spec.config_cls)
        from trainbench.models.registry import register_model_configs

        register_model_configs(cs)  # plugins without conf/model files, and model=custom


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
    return str(tp).replace("typing.", "").replace("trainbench.schema.", "").replace("NoneType", "None")


def size_alias(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``model.size=X`` on the command line means the ``size`` group choice ``size=X``.

    The size is a config group (it swaps the model's size-dependent keys); overriding only the key would
    leave the dimensions of the other size under its name. Other overrides pass through unchanged.
    """
    return ["size=" + o[len("model.size="):] if o.startswith("model.size=") else o for o in overrides]


def compose_run(overrides: list[str] | tuple[str, ...] = (), root: str | None = None,
                config_name: str = "config") -> DictConfig:
    """Compose run.py's config outside a Hydra app (benchmarks, the GPU check, tests).

    ``root`` is the project root holding ``conf/`` (default: this checkout); ``paths.root`` is set to
    it, since ``${hydra:runtime.cwd}`` only resolves inside a Hydra run.
    """
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainbench import REPO_ROOT

    root_path = Path(root) if root else REPO_ROOT
    register_configs(include_models=config_name == "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(root_path / "conf"), version_base="1.3"):
        return compose(config_name, overrides=[f"paths.root={root_path}", *size_alias(overrides)])


def reference(models: bool = True) -> list[tuple[str, str, str, str]]:
    """Every key of run.py's and analyze.py's config as (key, type, default, doc); with ``models``, every
    registered model's keys as ``model.<field>`` rows of its own config class, model by model."""
    rows = []
    for section, schema in (("data", DataConfig), ("trainer", TrainerConfig), ("hardware", HardwareConfig),
                            ("tracking", TrackingConfig), ("model", ModelConfig), ("decision", DecisionConfig),
                            ("analysis", AnalysisConfig), ("compare", CompareConfig)):
        rows.extend(describe(schema, section + "."))
    if models:
        from trainbench.models.registry import REGISTRY

        for spec in REGISTRY.specs():
            rows.append((f"# model={spec.name}", spec.config_cls.__name__, "", spec.description))
            rows.extend(describe(spec.config_cls, "model."))
    return rows


if __name__ == "__main__":  # python -m trainbench.config: print every key with its type, default and doc
    for key, type_, default, doc in reference():
        print(f"{key:40s} {type_:16s} {default:14s} {doc}")
    from trainbench.models.registry import describe_models

    print("\n" + describe_models())
