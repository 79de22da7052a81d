"""Epochs from evidence on synthetic curves with a known answer (analysis/plan/curves.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainbench.analysis.plan.curves import (
    CONFIGURED,
    EARLY_STOPPING,
    EXTRAPOLATED,
    CurveRule,
    early_stop_epoch,
    estimate_model,
    estimate_run,
    stop_epoch,
)
from trainbench.core.vocab import Series


def _exp_curve(b: float, n: int, noise: float, seed: int) -> np.ndarray:
    x = np.arange(1, n + 1)
    return 0.5 + np.exp(-b * x) + np.random.default_rng(seed).normal(0, noise, n)


def _plateau_epoch(b: float, threshold: float) -> int:
    """First e with f(e) - f(e+1) < threshold (f(1) - c) for f = c + exp(-b x): e > 1 + ln((1 - e^-b)/thr)/b."""
    return math.floor(1 + math.log((1 - math.exp(-b)) / threshold) / b) + 1


def test_an_exponential_approach_extrapolates_to_its_known_plateau_epoch() -> None:
    b, rule = 0.03, CurveRule()
    truth = _plateau_epoch(b, rule.threshold)  # 114: far beyond the 50 measured epochs
    est = estimate_run({Series.VAL_LOSS: _exp_curve(b, 50, 0.003, 0)}, rule, np.random.default_rng(1))
    assert est.basis == EXTRAPOLATED and est.curve == Series.VAL_LOSS
    assert est.epochs_range[0] <= truth <= est.epochs_range[1] + 2
    assert est.epochs == pytest.approx(truth, rel=0.1)
    assert max(est.families, key=est.families.get) == "exponential"


def test_stop_epoch_of_a_power_law_is_where_its_slope_falls_below_the_threshold() -> None:
    # f = 2 + 3 x^-0.5: f(e) - f(e+1) ~ 1.5 e^-1.5 < 0.001 * 3  =>  e ~ 63
    e = stop_epoch(lambda x: 2 + 3 * x ** -0.5, 2.0, 0.001, 10_000)
    assert e is not None and 62 <= e <= 64


def test_a_curve_that_already_stopped_improving_gives_the_early_stopping_epoch() -> None:
    y = np.r_[np.exp(-0.3 * np.arange(20)), np.zeros(30)]
    est = estimate_run({Series.VAL_LOSS: y}, CurveRule(patience=10, min_delta=0.01), np.random.default_rng(0))
    assert est.basis == EARLY_STOPPING
    # the last improvement larger than 1% of the range is at epoch index k with exp(-0.3k) - exp(-0.3(k+1)) ...:
    # the rule fires `patience` epochs after the last epoch that beat the best by more than 0.01
    assert est.epochs == early_stop_epoch(y, 10, 0.01)
    assert 15 <= est.epochs <= 30 and est.epochs_range == [est.epochs, est.epochs]


def test_early_stopping_counts_patience_from_the_last_real_improvement() -> None:
    y = [5, 4, 3, 3, 3, 3]
    assert early_stop_epoch(y, patience=3, min_delta=0.0) == 6  # best at epoch 3, three idle epochs after it
    assert early_stop_epoch(y, patience=4, min_delta=0.0) is None


def test_a_diverging_curve_is_refused_and_says_why() -> None:
    est = estimate_run({Series.VAL_LOSS: np.linspace(1.0, 2.0, 40)}, CurveRule(), np.random.default_rng(0))
    assert est.epochs is None and est.basis.startswith(CONFIGURED) and "diverging" in est.basis
    # early stopping cannot fire (patience longer than the curve): the trend rule refuses it
    est = estimate_run({Series.VAL_LOSS: np.linspace(1.0, 2.0, 40)}, CurveRule(patience=50), np.random.default_rng(0))
    assert est.epochs is None and "last third is worse" in est.basis


def test_an_overfitting_curve_stops_early_at_its_minimum_plus_patience() -> None:
    # validation loss falls for four epochs, then rises (overfitting): early stopping's case, not a refusal
    y = np.r_[[1.0, 0.9, 0.85, 0.8], np.linspace(0.82, 1.3, 30)]
    est = estimate_run({Series.VAL_LOSS: y}, CurveRule(patience=10), np.random.default_rng(0))
    assert (est.basis, est.epochs) == (EARLY_STOPPING, 4 + 10)


def test_too_few_epochs_are_refused_and_say_why() -> None:
    est = estimate_run({Series.VAL_LOSS: np.linspace(1.0, 0.5, 6)}, CurveRule(min_epochs=10), np.random.default_rng(0))
    assert est.epochs is None and "too few" in est.basis


def test_rl_reads_the_episodic_return_with_higher_is_better() -> None:
    x = np.arange(1, 61)
    ret = 10 - 10 * np.exp(-0.02 * x)  # still rising: no early stop, extrapolated
    est = estimate_run({"loss": np.ones(60), "episode_reward": ret}, CurveRule(), np.random.default_rng(0))
    assert est.curve == "episode_reward" and est.basis == EXTRAPOLATED
    assert est.epochs == pytest.approx(_plateau_epoch(0.02, 0.001), rel=0.1)


def test_several_seeds_widen_the_range() -> None:
    rule = CurveRule()
    one = estimate_model([{Series.VAL_LOSS: _exp_curve(0.03, 50, 0.003, 0)}], rule, np.random.default_rng(0))
    three = estimate_model([{Series.VAL_LOSS: _exp_curve(b, 50, 0.003, s)} for s, b in enumerate((0.03, 0.025, 0.04))],
                           rule, np.random.default_rng(0))
    assert three.basis == EXTRAPOLATED
    assert three.epochs_range[0] < one.epochs_range[0] and three.epochs_range[1] > one.epochs_range[1]
    assert three.epochs_range[0] <= _plateau_epoch(0.04, 0.001) and three.epochs_range[1] >= _plateau_epoch(0.025, 0.001)


def test_no_usable_run_falls_back_naming_the_first_reason() -> None:
    est = estimate_model([{Series.VAL_LOSS: np.linspace(1, 0.9, 3)}], CurveRule(), np.random.default_rng(0))
    assert est.epochs is None and est.basis.startswith(f"{CONFIGURED}: 3 epochs")
