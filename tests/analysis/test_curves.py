"""Epochs from evidence on synthetic curves with a known answer (analysis/plan/curves.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainbench.analysis.plan.curves import (
    CONFIGURED,
    EARLY_STOPPING,
    EXTRAPOLATED,
    FAMILIES,
    OVERFITTING,
    WORSENING,
    CurveRule,
    _fit,
    diverged_after,
    early_stop,
    early_stop_epoch,
    estimate_model,
    estimate_run,
    stop_epoch,
    stop_epochs,
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
    assert est.basis == EARLY_STOPPING and est.epochs == early_stop_epoch(y, 10, 0.01)
    # the curve is within 1% of its range of zero from epoch ~16: the best epoch is uncertain over the flat
    # stretch, and the range says so (first and last epoch as good as the best, plus the patience)
    assert 20 <= est.epochs <= 30 and est.epochs_range[0] <= est.epochs <= est.epochs_range[1]
    assert est.epochs_range[1] - est.epochs_range[0] >= 5 and not est.labels


def test_early_stopping_counts_patience_from_the_last_real_improvement() -> None:
    y = [5, 4, 3, 3, 3, 3]
    assert early_stop_epoch(y, patience=3, min_delta=0.0) == 6  # best at epoch 3, three idle epochs after it
    assert early_stop_epoch(y, patience=4, min_delta=0.0) is None


def test_the_patience_grows_with_the_curve() -> None:
    # best at epoch 200, then flat: patience max(10, 0.1 x 200) = 20 epochs, not 10
    y = np.r_[np.linspace(2.0, 1.0, 200), np.ones(60)]
    stop = early_stop(y, CurveRule(patience=10, patience_growth=0.1))
    assert stop is not None and stop.patience >= 19 and stop.epoch == stop.best + stop.patience
    assert early_stop(y, CurveRule(patience=10, patience_growth=0.0)).patience == 10


@pytest.mark.parametrize("seed", range(5))
def test_noise_many_times_the_per_epoch_gain_never_stops_a_curve_improving_on_trend(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # PPO-like: 0.6 -> 0.3 over 500 epochs (0.0006 per epoch), noise 0.01 (17x the per-epoch gain)
    steady = np.linspace(0.6, 0.3, 500) + rng.normal(0, 0.01, 500)
    assert early_stop(steady, CurveRule()) is None
    est = estimate_run({Series.LOSS: steady}, CurveRule(), rng)
    assert est.basis != EARLY_STOPPING and est.epochs_range != [12, 12]
    assert est.basis.startswith(CONFIGURED) and "no flattening" in est.basis  # nothing to read a plateau off
    # the same noise on a slow exponential approach (its plateau epoch by the threshold rule: 362): no early
    # stop on noise, and the extrapolation's range holds the plateau
    x = np.arange(1, 501)
    slow = 0.3 + 0.3 * np.exp(-x / 300) + rng.normal(0, 0.01, 500)
    assert early_stop(slow, CurveRule()) is None
    est = estimate_run({Series.VAL_LOSS: slow}, CurveRule(), rng)
    truth = _plateau_epoch(1 / 300, 0.001)
    assert est.basis == EXTRAPOLATED and est.epochs_range[0] <= truth <= est.epochs_range[1] + 2


@pytest.mark.parametrize("seed", range(3))
def test_a_rising_loss_gives_no_early_stop_and_is_labelled_worse_than_its_start(seed: int) -> None:
    # DQN-like: the loss rises 0.225 -> 0.273 over 500 epochs under noise 0.01
    y = np.linspace(0.225, 0.273, 500) + np.random.default_rng(seed).normal(0, 0.01, 500)
    est = estimate_run({Series.LOSS: y}, CurveRule(), np.random.default_rng(0))
    assert est.epochs is None and est.basis.startswith(CONFIGURED) and "never improved" in est.basis
    assert est.diverged_after is not None and est.diverged_after < 100 and est.worsened == WORSENING
    assert any(lab.startswith("worse than its start after epoch") for lab in est.labels)


def test_a_curve_that_falls_then_climbs_above_its_start_is_labelled_worse_than_its_start() -> None:
    # falls for 15 epochs, then climbs to three times its start: early stopping is kept, and labelled
    y = np.r_[np.linspace(1.0, 0.3, 15), np.linspace(0.35, 3.0, 40)] + np.random.default_rng(0).normal(0, 0.01, 55)
    est = estimate_run({Series.VAL_LOSS: y}, CurveRule(), np.random.default_rng(0))
    assert est.basis == EARLY_STOPPING and abs(est.diverged_after - 15) <= 1 and est.worsened == WORSENING
    assert est.labels == [f"worse than its start after epoch {est.diverged_after}: its val_loss climbed above its "
                          "starting value"]
    # an overfitting curve that stays below its start is not labelled
    ok = np.r_[np.linspace(1.0, 0.3, 15), np.linspace(0.31, 0.5, 40)]
    assert diverged_after(ok, CurveRule()) is None


def test_a_short_curve_never_gives_a_point_range() -> None:
    # 12 epochs that improve and level off: too short for early stopping (curves.min_epochs_stop), labelled;
    # extrapolated with a range, or refused, never 12 [12-12]
    for seed in range(5):
        y = 0.5 + np.exp(-0.4 * np.arange(1, 13)) + np.random.default_rng(seed).normal(0, 0.01, 12)
        est = estimate_run({Series.VAL_LOSS: y}, CurveRule(), np.random.default_rng(seed))
        assert est.basis != EARLY_STOPPING
        assert any(lab.startswith("too short for early stopping") for lab in est.labels) or \
            early_stop(y, CurveRule()) is None
        if est.epochs is not None:
            assert est.epochs_range[1] > est.epochs_range[0]
        else:
            assert est.basis.startswith(CONFIGURED)


def test_the_vectorised_stop_epochs_equal_the_exact_search() -> None:
    rng = np.random.default_rng(0)
    for name, fn in FAMILIES.items():
        x = np.arange(1, 61, dtype=float)
        y = 0.5 + np.exp(-0.05 * x) + rng.normal(0, 0.002, 60)
        p, _, _ = _fit(name, x, y)
        draws = np.vstack([p, p * 1.05, p * 0.95])
        got = stop_epochs(fn, draws, 0.001, 100_000)
        for row, g in zip(draws, got, strict=True):
            want = stop_epoch(lambda t, row=row, fn=fn: fn(t, *row), row[0], 0.001, 100_000)
            assert g == (100_000 if want is None else want), name


def test_a_diverging_curve_is_refused_and_says_why() -> None:
    est = estimate_run({Series.VAL_LOSS: np.linspace(1.0, 2.0, 40)}, CurveRule(), np.random.default_rng(0))
    assert est.epochs is None and est.basis.startswith(CONFIGURED) and "never improved" in est.basis
    assert est.diverged_after == 1
    # early stopping cannot fire (patience longer than the curve): the trend rule refuses it
    est = estimate_run({Series.VAL_LOSS: np.linspace(1.0, 2.0, 40)}, CurveRule(patience=50), np.random.default_rng(0))
    assert est.epochs is None and "last third is worse" in est.basis


def test_an_overfitting_curve_stops_early_at_its_minimum_plus_patience() -> None:
    # validation loss falls for four epochs, then rises (overfitting): early stopping's case, not a refusal
    y = np.r_[[1.0, 0.9, 0.85, 0.8], np.linspace(0.82, 1.3, 30)]
    est = estimate_run({Series.VAL_LOSS: y}, CurveRule(patience=10), np.random.default_rng(0))
    assert est.basis == EARLY_STOPPING and abs(est.epochs - (4 + 10)) <= 1
    assert est.diverged_after is not None  # it climbs above its starting value: labelled as well


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


def test_seeds_that_agree_narrow_a_wide_range() -> None:
    rule = CurveRule()
    noisy_run = [{Series.VAL_LOSS: _exp_curve(0.03, 50, 0.01, 0)}]  # noisy: a wide range on its own
    wide = estimate_model(noisy_run, rule, np.random.default_rng(0))
    agree = estimate_model(noisy_run + [{Series.VAL_LOSS: _exp_curve(0.03, 50, 0.002, s)} for s in (1, 2, 3)],
                           rule, np.random.default_rng(0))
    truth = _plateau_epoch(0.03, 0.001)
    assert agree.epochs_range[0] <= truth <= agree.epochs_range[1] + 2
    assert agree.epochs_range[1] - agree.epochs_range[0] < wide.epochs_range[1] - wide.epochs_range[0]


def test_no_usable_run_falls_back_naming_the_first_reason() -> None:
    est = estimate_model([{Series.VAL_LOSS: np.linspace(1, 0.9, 3)}], CurveRule(), np.random.default_rng(0))
    assert est.epochs is None and est.basis.startswith(f"{CONFIGURED}: 3 epochs")


@pytest.mark.parametrize("seed", range(3))
def test_a_val_loss_that_climbs_while_the_training_loss_falls_overfits(seed: int) -> None:
    """mamba2 on the default data: its training loss falls 0.37 -> 0.26 while its val_loss climbs 0.27 -> 0.34:
    overfitting, not a divergence. With a flat training loss (noise only) the same val_loss is only worse than
    its start; a reward that falls below its start says so."""
    rng = np.random.default_rng(seed)
    val = np.linspace(0.268, 0.336, 14) + rng.normal(0, 0.002, 14)
    train = np.linspace(0.371, 0.262, 14) + rng.normal(0, 0.002, 14)
    est = estimate_run({Series.VAL_LOSS: val, Series.LOSS: train}, CurveRule(), np.random.default_rng(0))
    assert est.diverged_after is not None and est.worsened == OVERFITTING
    assert est.labels[0].startswith(f"overfits after epoch {est.diverged_after}: its val_loss climbed above its "
                                    "starting value while its training loss fell")
    flat = 0.3 + rng.normal(0, 0.002, 14)
    est = estimate_run({Series.VAL_LOSS: val, Series.LOSS: flat}, CurveRule(), np.random.default_rng(0))
    assert est.worsened == WORSENING and est.labels[0].startswith("worse than its start after epoch")
    reward = -np.linspace(18, 85, 14) + rng.normal(0, 0.5, 14)  # higher is better
    est = estimate_run({"episode_reward": reward}, CurveRule(), np.random.default_rng(0))
    assert est.worsened == WORSENING and "episode_reward fell below its starting value" in est.labels[0]


def test_several_runs_overfit_only_when_every_climbing_run_does() -> None:
    val = np.linspace(0.27, 0.34, 20)
    fall, flat = np.linspace(0.37, 0.26, 20), np.full(20, 0.3)
    both = estimate_model([{Series.VAL_LOSS: val, Series.LOSS: fall}] * 2, CurveRule(), np.random.default_rng(0))
    mixed = estimate_model([{Series.VAL_LOSS: val, Series.LOSS: fall}, {Series.VAL_LOSS: val, Series.LOSS: flat}],
                           CurveRule(), np.random.default_rng(0))
    assert both.worsened == OVERFITTING and mixed.worsened == WORSENING
    assert mixed.labels[0].startswith("run 1: overfits") and mixed.labels[1].startswith("run 2: worse than its start")
