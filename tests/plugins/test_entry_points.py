"""Plugins by entry point: found with their origin, loaded lazily, a broken one fails alone and loudly,
duplicates refused, and a plugin takes part in model=<name>, sizes and the default sweep like a built-in."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from helpers.plugins import FAKE_LSTM
from trainbench import CONF_DIR
from trainbench.core import entrypoints as plugins
from trainbench.core.errors import PluginError
from trainbench.models.base import ModelSpec
from trainbench.models.registry import Registry, describe_models, register_model_configs

BUILTIN = ["dqn", "mamba2", "ppo", "tft", "tlob"]  # by name
CONF = str(CONF_DIR)


def _registry() -> Registry:
    return Registry(plugins.sources())


def _install_fake_lstm(fake_dist) -> None:
    fake_dist("fake-lstm", "0.3.1", {"fake_lstm": "fake_lstm_plugin:SPEC"},
              modules={"fake_lstm_plugin.py": FAKE_LSTM.format(name="fake_lstm")})


def test_builtins_come_first_by_name():
    """By name, as the installed metadata lists them: the same in an editable and a non-editable install."""
    assert plugins.model_names()[:5] == BUILTIN
    assert [s.origin for s in plugins.builtin_sources()] == ["builtin"] * 5


def test_a_plugin_is_found_with_its_distribution_as_origin(fake_dist, example_on_path):
    before = plugins.model_names()
    _install_fake_lstm(fake_dist)
    after = plugins.model_names()  # torch-free: the default training plan
    assert after[:5] == BUILTIN and sorted(after) == sorted(before + ["fake_lstm"])
    reg = _registry()
    assert reg.get("fake_lstm").name == "fake_lstm"
    assert reg.origin("fake_lstm") == "fake-lstm 0.3.1"
    assert reg.origin("dqn") == "builtin"
    listing = describe_models(reg)
    assert "fake-lstm 0.3.1" in listing and "BROKEN" not in listing


def test_the_plan_default_follows_the_entry_points(fake_dist, example_on_path):
    from trainbench.config.analyze import DecisionConfig

    before = DecisionConfig().plan
    assert before[:5] == BUILTIN and before == plugins.model_names()
    _install_fake_lstm(fake_dist)
    assert DecisionConfig().plan == plugins.model_names() and set(DecisionConfig().plan) == {*before, "fake_lstm"}


def test_a_broken_plugin_is_one_error_naming_it_and_other_models_still_work(fake_dist):
    fake_dist("bad-plugin", "2.0", {"broken": "bad_plugin_missing.model:SPEC"})
    reg = _registry()
    assert "broken" in plugins.model_names()  # declared, so the analysis reports it as not measured
    with pytest.raises(PluginError) as info:
        reg.get("broken")
    msg = str(info.value)
    assert "broken" in msg and "bad-plugin 2.0" in msg and "bad_plugin_missing" in msg
    assert "pip uninstall bad-plugin" in msg and "\n" not in msg
    assert reg.get("dqn").name == "dqn"  # the others load
    assert "broken" not in reg.names() and "dqn" in reg.names()
    assert "BROKEN" in describe_models(reg)


def test_a_spec_that_is_not_a_model_spec_or_misnamed_is_refused_with_the_fix(fake_dist, example_on_path):
    fake_dist("odd-plugin", "1.0", {"notspec": "odd_notspec:SPEC", "misnamed": "lstm_forecaster.model:SPEC",
                                    "noattr": "odd_notspec:NOPE"},
              modules={"odd_notspec.py": "SPEC = 42\n"})
    reg = _registry()
    for name, needle in (("notspec", "not a trainbench ModelSpec"), ("misnamed", "SPEC.name is 'lstm_forecaster'"),
                         ("noattr", "no attribute 'NOPE'")):
        with pytest.raises(PluginError, match=needle):
            reg.get(name)


def test_duplicate_names_are_refused(fake_dist, example_on_path):
    twin = FAKE_LSTM.format(name="twin")
    fake_dist("twin-a", "1.0", {"twin": "twin_a:SPEC"}, modules={"twin_a.py": twin})
    fake_dist("twin-b", "1.0", {"twin": "twin_b:SPEC"}, modules={"twin_b.py": twin})
    fake_dist("squatter", "1.0", {"dqn": "lstm_forecaster.model:SPEC"})
    reg = _registry()
    with pytest.raises(PluginError, match="declared by more than one plugin.*twin-a 1.0.*twin-b 1.0"):
        reg.get("twin")
    assert reg.get("dqn").build.__module__ == "trainbench.models.dqn"  # the built-in keeps its name
    assert reg.origin("dqn") == "builtin"
    listing = describe_models(reg)
    assert "squatter 1.0" in listing and "taken by a built-in model" in listing
    assert plugins.model_names().count("dqn") == 1
    with pytest.raises(ValueError, match="already registered"):
        reg.register(ModelSpec(name="dqn", config_cls=reg.get("dqn").config_cls, build=reg.get("dqn").build))


def test_reserved_and_invalid_names_are_refused(fake_dist, example_on_path):
    fake_dist("weird", "1.0", {"custom": "lstm_forecaster.model:SPEC", "base_x": "lstm_forecaster.model:SPEC"})
    reg = _registry()
    assert "custom" not in reg.names() and "base_x" not in reg.names()
    assert sum("reserved" in (e.error or "") for e in reg.refused) == 2


def _sweep(overrides: list[str] = ()) -> set[str]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
        options = GlobalHydra.instance().config_loader().get_group_options("model")
        (override,) = OverridesParser.create().parse_overrides([f"model={cfg.hydra.sweeper.params.model}"])
        return set(override.value().filter(options))


def test_a_plugin_composes_like_a_builtin_model_with_its_sizes(fake_dist, example_on_path, clean_config_store):
    from trainbench.compose import compose_run, register_configs
    from trainbench.config.run import validate

    _install_fake_lstm(fake_dist)
    fake_dist("bad-plugin", "2.0", {"broken": "bad_plugin_missing.model:SPEC"})
    reg = _registry()
    register_configs()
    for spec in reg.specs():
        clean_config_store.store(group="model", name=f"base_{spec.name}", node=spec.config_cls)
    register_model_configs(clean_config_store, reg)
    small = validate(compose_run(["model=fake_lstm", "size=small"])).model
    ref = validate(compose_run(["model=fake_lstm", "size=reference"])).model
    assert type(small).__name__ == "LSTMForecasterConfig" and small.name == "fake_lstm"
    assert (small.size, small.hidden, small.window) == ("small", 32, 32)
    assert (ref.size, ref.hidden, ref.window) == ("reference", 128, 128)
    # the default sweep: every model, plugins included (the broken one too, so that it fails loudly)
    assert _sweep() == set(reg.names()) | {"broken"}
    assert {"fake_lstm", *BUILTIN} <= _sweep()
    with pytest.raises(PluginError, match="bad-plugin 2.0"):  # what train_job asks for
        reg.resolve(validate(compose_run(["model=broken"])).model)
