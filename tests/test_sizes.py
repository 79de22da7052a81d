"""Model sizes: each trainer profile composes its size for every model, `size=`/`model.size=` wins, the
experiment bundles still compose at the reference size, a model's YAML holds no defaults of its own, and the
`tiny` size of the tests and smoke runs only shrinks the `small` one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from trainbench import CONF_DIR
from trainbench.compose import compose_run, size_alias
from trainbench.config.run import validate
from trainbench.models.registry import REGISTRY

CONF = CONF_DIR

#: The dimensions each size must give (the published configurations for `reference`).
REFERENCE = {
    "dqn": {"batch_size": 230, "hidden": 128},
    "ppo": {"batch_size": 230, "hidden": 256},
    "mamba2": {"d_model": 256, "n_layers": 4, "d_state": 128, "headdim": 64, "expand": 2, "d_conv": 4,
               "chunk_size": 256, "seq_len": 128, "batch_size": 230},
    "tft": {"hidden": 160, "heads": 1, "encoder_len": 252, "horizons": [1, 2, 3, 4, 5], "dropout": 0.3,
            "lr": 0.01, "batch_size": 64, "max_grad_norm": 0.01},
    "tlob": {"seq_len": 128, "hidden_dim": 40, "num_layers": 4, "num_heads": 1, "batch_size": 128},
}
SMALL = {"mamba2": {"d_model": 32, "chunk_size": 32}, "tft": {"hidden": 16, "encoder_len": 32},
         "tlob": {"seq_len": 32, "hidden_dim": 20}, "dqn": {"hidden": 128}, "ppo": {"hidden": 256}}
# A model without an entry above (a new one) still gets every check below but the published dimensions.


def _model(*overrides):
    return validate(compose_run(list(overrides))).model


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.slow
@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_gpu_profile_is_reference_and_cpu_profiles_are_small(name):
    ref = _model(f"model={name}", "trainer=default")
    assert ref.size == "reference"
    want = REFERENCE.get(name, {})
    assert {k: getattr(ref, k) for k in want} == want
    for profile in ("cpu", "quick"):
        small = _model(f"model={name}", f"trainer={profile}")
        assert small.size == "small"
        want = SMALL.get(name, {})
        assert {k: getattr(small, k) for k in want} == want


@pytest.mark.slow
@pytest.mark.parametrize("size", ["small", "reference", "tiny"])
@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_the_composed_model_is_the_schema_defaults_plus_the_size_file(name, size):
    """Defaults live in the schema only: conf/model/<m>.yaml names the model and picks its size (and, for a
    model on other data, its data), `small` is the schema's defaults and `reference` and `tiny` list only the
    keys they change. So no YAML can override a default except through a size file."""
    spec = REGISTRY.get(name)
    main = _yaml(CONF / "model" / f"{name}.yaml")
    defaults = main.pop("defaults")
    assert defaults[:3] == [f"base_{name}", "_self_", {f"{name}@_here_": "${size}"}]
    assert all(isinstance(d, dict) and all(k.startswith("override /") for k in d) for d in defaults[3:]), defaults
    assert main == {"name": name}  # nothing but the registry key
    size_file = _yaml(CONF / "model" / name / f"{size}.yaml")
    assert size_file["size"] == size
    schema = spec.config_cls()
    restated = {k: v for k, v in size_file.items() if k != "size" and getattr(schema, k) == v}
    assert not restated, f"conf/model/{name}/{size}.yaml restates the schema's defaults {restated}"
    if size == "small":
        assert size_file == {"size": "small"}  # the small size is the schema's defaults
    expected = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(spec.config_cls), size_file))
    composed = _model(f"model={name}", f"size={size}")
    assert composed == expected
    assert (composed == schema) == (size == "small")


def _magnitude(value) -> float:
    """A size key's magnitude: the number, or a list's longest reach (horizons [1, 3] -> 3)."""
    return max(value) if isinstance(value, list) else value


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_tiny_only_shrinks_the_small_size(name):
    """`tiny` keeps the tests fast: every key it sets is a count or width at most the `small` size's."""
    tiny = _yaml(CONF / "model" / name / "tiny.yaml")
    small = REGISTRY.get(name).config_cls()  # the small size is the schema's defaults
    assert tiny.pop("size") == "tiny" and tiny
    grown = {k: (v, getattr(small, k)) for k, v in tiny.items() if _magnitude(v) > _magnitude(getattr(small, k))}
    assert not grown, f"conf/model/{name}/tiny.yaml sets keys above the small size: {grown}"
    assert _model(f"model={name}", "trainer=cpu", "size=tiny").size == "tiny"


def test_explicit_size_wins_over_the_profile_and_model_size_is_an_alias():
    assert size_alias(["model=tft", "model.size=reference", "trainer=cpu"]) == [
        "model=tft", "size=reference", "trainer=cpu"]
    m = _model("model=tft", "trainer=cpu", "model.size=reference")
    assert (m.size, m.hidden, m.encoder_len) == ("reference", 160, 252)
    m = _model("model=mamba2", "trainer=default", "size=small")
    assert (m.size, m.d_model) == ("small", 32)
    # a field override still wins over the size's value
    m = _model("model=tlob", "trainer=default", "model.hidden_dim=64")
    assert (m.size, m.hidden_dim, m.seq_len) == ("reference", 64, 128)


def test_trainer_size_names_the_profiles_size():
    assert validate(compose_run(["trainer=default"])).trainer.size == "reference"
    assert validate(compose_run(["trainer=cpu"])).trainer.size == "small"


@pytest.mark.parametrize("bundle,name", [("mamba2_reference", "mamba2"), ("tft_volatility", "tft"),
                                         ("tlob_paper", "tlob")])
def test_experiment_bundles_are_the_reference_size_whatever_the_profile(bundle, name):
    m = _model(f"experiment={bundle}", "trainer=cpu")
    assert m.name == name and m.size == "reference"
    assert {k: getattr(m, k) for k in REFERENCE[name]} == REFERENCE[name]


@pytest.mark.slow
def test_a_sweep_across_models_composes_each_models_size_without_extra_flags():
    """The jobs Hydra's basic sweeper makes of `-m model=<every registered model> trainer=default`, composed."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    names = REGISTRY.builtin_names()
    parsed = OverridesParser.create().parse_overrides([f"model={','.join(names)}", "trainer=default"])
    (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    assert len(jobs) == len(names)
    assert sorted(_model(*job).name for job in jobs) == names
    for job in jobs:
        m = _model(*job)
        assert m.size == "reference"
        want = REFERENCE.get(m.name, {})
        assert {k: getattr(m, k) for k in want} == want
    jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(
        ["model=tft", "size=small,reference", "trainer=cpu"]), max_batch_size=None)[0]
    assert sorted(_model(*job).hidden for job in jobs) == [16, 160]
