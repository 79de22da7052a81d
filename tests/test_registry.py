"""One registry, no silent skips: registry == conf/model/*.yaml == the default sweep."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from trainbench.config import register_configs
from trainbench.models.base import ModelSpec
from trainbench.models.registry import REGISTRY, Registry, UnknownModelError

CONF = Path(__file__).resolve().parents[1] / "conf"


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
    files = {p.stem for p in (CONF / "model").glob("*.yaml")}
    assert set(REGISTRY.names()) == files
    assert _default_sweep_models() == files


def test_each_model_config_names_its_registry_key():
    for p in (CONF / "model").glob("*.yaml"):
        assert f"name: {p.stem}" in p.read_text()
        assert f"base_{p.stem}" in p.read_text()


def test_unknown_model_lists_known_names():
    with pytest.raises(UnknownModelError, match="known models are .*dqn"):
        REGISTRY.get("dqnn")


def test_double_registration_raises():
    r = Registry()
    spec = REGISTRY.get("dqn")
    r.register(spec)
    with pytest.raises(ValueError, match="already registered"):
        r.register(ModelSpec(name="dqn", config_cls=spec.config_cls, build=spec.build))
