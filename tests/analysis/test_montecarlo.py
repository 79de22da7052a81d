"""The Monte Carlo total against cases computed by hand (analysis/plan/montecarlo.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from trainbench.analysis.plan.montecarlo import Quantity, recommend, total_hours


def test_fixed_factors_give_the_hand_computed_total_with_no_spread() -> None:
    # 600 s/epoch x 2 (data) x 100 epochs = 33.3 h, plus 360 s x 1 x 50 = 5 h -> 38.33 h
    s = total_hours({"a": {"epoch_ms": 600_000.0, "data_scale": 2.0, "epochs": 100},
                     "b": {"epoch_ms": 360_000.0, "epochs": 50}}, samples=1000)
    assert s["median"] == pytest.approx(115 / 3, rel=1e-9) and s["interval90"][0] == pytest.approx(115 / 3, rel=1e-9)
    assert s["p_within"] == 0.0 and s["p_over"] == 0.0 and s["dominant"] is None


def test_one_log_normal_factor_matches_its_closed_form() -> None:
    # hours = 24 x E, E log-normal with median 1 and 5-95% range [0.5, 2]: sigma = ln 2 / z_0.95
    sigma = math.log(2) / norm.ppf(0.95)
    s = total_hours({"a": {"epoch_ms": 3_600_000.0, "epochs": Quantity(24.0, 12.0, 48.0, coverage=0.9)}},
                    samples=200_000, seed=3)
    assert s["median"] == pytest.approx(24.0, rel=0.01)
    assert s["interval90"] == pytest.approx([12.0, 48.0], rel=0.02)
    # P(total < 24) = 0.5, P(total > 48) = 1 - Phi(ln 2 / sigma) = 0.05
    assert s["p_within"] == pytest.approx(0.5, abs=0.01)
    assert s["p_over"] == pytest.approx(1 - norm.cdf(math.log(2) / sigma), abs=0.005)
    assert s["dominant"] == "epochs" and s["shares"] == {"epochs": 1.0}


def test_the_dominant_source_is_the_widest_factor() -> None:
    s = total_hours({"a": {"epoch_ms": Quantity(1e6, 0.95e6, 1.05e6, 0.95), "data_scale": Quantity(10, 9, 11),
                           "epochs": Quantity(10, 3, 40)}}, samples=20_000)
    assert s["dominant"] == "epochs" and s["shares"]["epochs"] > 0.9


def test_models_in_parallel_take_the_busiest_gpu() -> None:
    s = total_hours({"a": {"epoch_ms": 3_600_000.0, "epochs": 10}, "b": {"epoch_ms": 3_600_000.0, "epochs": 4},
                     "c": {"epoch_ms": 3_600_000.0, "epochs": 5}}, gpus=2, samples=100)
    assert s["median"] == pytest.approx(10.0)  # a alone; b + c = 9 on the other GPU


def test_samples_are_used_as_given() -> None:
    s = total_hours({"a": {"epoch_ms": 3_600_000.0, "epochs": np.array([10.0, 30.0, 50.0])}}, samples=30_000)
    assert set(np.round(np.unique(s["samples"]), 9)) == {10.0, 30.0, 50.0}
    assert s["p_within"] == pytest.approx(1 / 3, abs=0.02) and s["p_over"] == pytest.approx(1 / 3, abs=0.02)


def test_the_recommendation_follows_the_probability_levels() -> None:
    assert recommend({"p_within": 0.95, "p_over": 0.0}, 0.9, 0.5) == "local_gpu"
    assert recommend({"p_within": 0.6, "p_over": 0.1}, 0.9, 0.5) == "user_choice"
    assert recommend({"p_within": 0.1, "p_over": 0.6}, 0.9, 0.5) == "cloud"
    assert recommend({"p_within": None}, 0.9, 0.5) == "insufficient_data"


def test_an_unmeasured_alpha_spans_the_epochs_between_the_same_steps_and_the_same_epochs() -> None:
    from trainbench.analysis.plan.montecarlo import AlphaFactor

    # 100 epochs on the measured data, 16x the windows planned: alpha uniform on [0, 1] puts the planned
    # epochs between 100 / 16 (the same steps) and 100 (the same epochs), log-uniformly: median 100 / 4
    s = total_hours({"a": {"epoch_ms": 3_600_000.0, "epochs": 100.0, "data_alpha": AlphaFactor(16.0, None, 0.0, 1.0)}},
                    samples=100_000, seed=1)
    assert s["median"] == pytest.approx(25.0, rel=0.02)
    assert s["interval90"] == pytest.approx([100 / 16 * 16 ** 0.05, 100 * 16 ** -0.05], rel=0.02)
    assert s["dominant"] == "epochs' data exponent (alpha)"
    # a measured alpha narrows it: alpha 0.3 [0.25, 0.35] gives 100 x 16^-0.7 at the median
    m = total_hours({"a": {"epoch_ms": 3_600_000.0, "epochs": 100.0, "data_alpha": AlphaFactor(16.0, 0.3, 0.25, 0.35)}},
                    samples=100_000, seed=1)
    assert m["median"] == pytest.approx(100 * 16 ** -0.7, rel=0.02)
    assert m["interval90"] == pytest.approx([100 * 16 ** -0.75, 100 * 16 ** -0.65], rel=0.03)
