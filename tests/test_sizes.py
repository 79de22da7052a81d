"""Model sizes: each trainer profile composes its size for every model, `size=`/`model.size=` wins, and the
experiment bundles still compose at the reference size."""

from __future__ import annotations

import pytest

from trainbench.config import compose_run, size_alias
from trainbench.schema import validate

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


def _model(*overrides):
    return validate(compose_run(list(overrides))).model


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_gpu_profile_is_reference_and_cpu_profiles_are_small(name):
    ref = _model(f"model={name}", "trainer=default")
    assert ref.size == "reference"
    assert {k: getattr(ref, k) for k in REFERENCE[name]} == REFERENCE[name]
    for profile in ("cpu", "quick"):
        small = _model(f"model={name}", f"trainer={profile}")
        assert small.size == "small"
        assert {k: getattr(small, k) for k in SMALL[name]} == SMALL[name]


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


def test_a_sweep_across_models_composes_each_models_size_without_extra_flags():
    """The jobs Hydra's basic sweeper makes of `-m model=dqn,mamba2,tft,tlob trainer=default`, composed."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(["model=dqn,mamba2,tft,tlob", "trainer=default"])
    (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    assert len(jobs) == 4
    for job in jobs:
        m = _model(*job)
        assert m.size == "reference"
        assert {k: getattr(m, k) for k in REFERENCE[m.name]} == REFERENCE[m.name]
    jobs = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(
        ["model=tft", "size=small,reference", "trainer=cpu"]), max_batch_size=None)[0]
    assert sorted(_model(*job).hidden for job in jobs) == [16, 160]
