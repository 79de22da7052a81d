"""One registry, no silent skips: trainbench's entry points == conf/model/*.yaml, and the registry == the
default sweep == the default training plan (plugins: tests/plugins/)."""

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from trainbench import CONF_DIR
from trainbench.compose import register_configs
from trainbench.config.analyze import DecisionConfig
from trainbench.core import entrypoints as plugins
from trainbench.core.errors import UnknownModelError
from trainbench.models.base import ModelSpec
from trainbench.models.registry import REGISTRY, Registry

ROOT = Path(__file__).resolve().parents[1]
CONF = CONF_DIR
#: conf/model files that are not a model: model=custom loads one from model.spec
NOT_MODELS = {"custom"}


def _default_sweep_models() -> set[str]:
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
        spec = cfg.hydra.sweeper.params.model
        options = GlobalHydra.instance().config_loader().get_group_options("model")
        (override,) = OverridesParser.create().parse_overrides([f"model={spec}"])
        return set(override.value().filter(options)) if hasattr(override.value(), "filter") else \
            set(override.sweep_string_iterator())


def test_registry_config_files_and_default_sweep_agree():
    files = {p.stem for p in (CONF / "model").glob("*.yaml")} - NOT_MODELS
    builtin = {e.name for e in REGISTRY.entries() if e.origin == "builtin"}
    assert builtin == files  # every built-in model has its conf/model file, and no file lacks a model
    assert _default_sweep_models() == set(REGISTRY.names())  # installed plugins too, model=custom not
    assert set(REGISTRY.names()) >= files


def test_each_model_config_names_its_registry_key():
    for p in (CONF / "model").glob("*.yaml"):
        if p.stem not in NOT_MODELS:
            assert f"name: {p.stem}" in p.read_text()
        assert f"base_{p.stem}" in p.read_text()


def test_the_builtin_models_are_the_entry_points_of_trainbench_itself():
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["trainbench.models"]
    # as the installed distribution's metadata lists them (setuptools writes them sorted by name)
    assert [(s.name, s.value) for s in plugins.builtin_sources()] == sorted(table.items())
    for name, value in table.items():
        assert value == f"trainbench.models.{name}:SPEC" and REGISTRY.get(name).name == name
        assert REGISTRY.origin(name) == "builtin"


def test_each_builtin_model_declares_its_schema_apart_from_its_code():
    """The configuration's schema of each built-in model (trainbench.config.models, torch-free) is the one its
    SPEC is built on: the same config class, data kind and description; and one exists for every entry point."""
    from trainbench.config.models import SCHEMAS

    assert set(SCHEMAS) == set(REGISTRY.builtin_names())
    for name, schema in SCHEMAS.items():
        spec = REGISTRY.get(name)
        assert (spec.config_cls, spec.data_kind, spec.description) == (
            schema.config_cls, schema.data_kind, schema.description), name
        assert spec.config_cls.__module__ == f"trainbench.config.models.{name}" and spec.description
        assert REGISTRY.schema(name) is schema


def test_composing_reads_schemas_without_loading_a_builtin_model():
    """A fresh registry answers what composing needs (schemas, the --help listing) with no built-in entry loaded;
    a built-in model that fails to load is listed as broken once it was asked for."""
    from trainbench.core.entrypoints import builtin_sources
    from trainbench.models.registry import describe_models

    reg = Registry(builtin_sources())
    assert [s.name for s in reg.schemas()] == sorted(REGISTRY.builtin_names())
    assert "book  TLOB" in describe_models(reg)
    assert not any(e.loaded for e in reg.declared())
    entry = reg.declared()[0]
    entry.loaded, entry.error = True, f"model {entry.name!r} cannot be loaded: boom"
    assert reg.schema(entry.name) is None and f"BROKEN: model {entry.name!r} cannot be loaded" in describe_models(reg)


def test_the_default_training_plan_is_every_registered_model():
    assert DecisionConfig().plan == plugins.model_names()
    assert set(DecisionConfig().plan) >= set(REGISTRY.names())
    assert "plan" not in yaml.safe_load((CONF / "decision" / "default.yaml").read_text())
    from trainbench.compose import compose_run

    assert list(compose_run(config_name="analyze").decision.plan) == plugins.model_names()


def test_unknown_model_lists_known_names():
    with pytest.raises(UnknownModelError, match="known models are .*dqn"):
        REGISTRY.get("dqnn")


def test_double_registration_raises():
    r = Registry()
    spec = REGISTRY.get("dqn")
    r.register(spec)
    with pytest.raises(ValueError, match="already registered"):
        r.register(ModelSpec(name="dqn", config_cls=spec.config_cls, build=spec.build))
