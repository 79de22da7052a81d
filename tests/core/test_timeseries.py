"""Means of autocorrelated series shared by the stop rule and the analysis (trainbench.core.timeseries)."""

from __future__ import annotations

import numpy as np
import pytest

from trainbench.core.timeseries import BATCH_TAU, batch_means, mser_truncation


def _ar1(rho: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for t in range(1, n):
        x[t] = rho * x[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal()
    return 100.0 + 5.0 * x


def test_batches_are_long_against_tau():
    bm = batch_means(_ar1(0.8, 500, 1))  # tau = 9
    assert bm.long_enough and bm.batch_len >= BATCH_TAU * bm.tau and 2 <= bm.batches <= 10 and bm.tau > 4
    iid = batch_means(_ar1(0.0, 500, 2))
    assert iid.batches == 10 and iid.df == 9
    short = batch_means(_ar1(0.0, 12, 3))  # 12 epochs: two batches of 6, never 10 batches of one epoch
    assert short.batches == 2 and short.batch_len == 6
    assert batch_means(np.array([1.0])) is None
    persistent = batch_means(_ar1(0.95, 12, 4))
    assert persistent.batches == 2


def test_mser5_finds_the_transient_and_refuses_a_ramp():
    rng = np.random.default_rng(5)
    steady = 100.0 + rng.standard_normal(200)
    assert mser_truncation(steady) <= 20
    slow_start = np.r_[np.full(10, 120.0), steady]
    assert mser_truncation(slow_start) >= 10  # MSER may cut a little more, never less
    assert mser_truncation(np.linspace(120.0, 100.0, 100) + 0.01 * rng.standard_normal(100)) is None
    assert mser_truncation(np.arange(7.0)) is None  # fewer than two batches of five


def test_the_fft_autocorrelation_is_statsmodels_and_the_direct_sum():
    """acf is statsmodels' acf(x, nlags=n - 1, fft=True), and both are the direct O(n^2) biased estimator,
    for lengths that are and are not powers of two, and for a series with a trend."""
    from statsmodels.tsa.stattools import acf as sm_acf

    from trainbench.core.timeseries import acf

    series = [_ar1(0.8, 500, 5), _ar1(0.0, 7, 6), _ar1(0.5, 64, 7), np.arange(33.0) ** 1.5]
    for x in series:
        n = x.size
        d = x - x.mean()
        direct = np.array([d[:n - k] @ d[k:] for k in range(n)]) / (d @ d)
        mine = acf(x)
        assert mine.shape == (n,) and mine[0] == 1.0
        np.testing.assert_allclose(mine, direct, atol=1e-12)
        np.testing.assert_allclose(mine, sm_acf(x, nlags=n - 1, fft=True), atol=1e-12)


def test_the_t_quantile_of_the_stop_rule_and_the_run_note_is_scipy_stats():
    """The stop rule and the run's note take the t quantile from scipy.special (a lighter import than
    scipy.stats): the same value as scipy.stats.t.ppf."""
    from scipy import stats

    from trainbench.core.vocab import Summary
    from trainbench.measure.stoprule import Welford, precision
    from trainbench.tracking.run_note import epoch_interval

    w = Welford()
    for v in (10.0, 11.0, 12.5, 9.0):
        w.add(v)
    t = stats.t.ppf(0.975, 3)
    assert w.rel_half_width() == pytest.approx(t * w.std / 2 / w.mean, rel=1e-12)
    lo, hi = epoch_interval({Summary.EPOCH_TIME_MS_MEAN: 10.0, Summary.EPOCH_TIME_MS_STD: 2.0,
                             Summary.EPOCHS_MEASURED: 4})
    assert hi - 10.0 == pytest.approx(t * 2.0 / 2, rel=1e-12) and 10.0 - lo == pytest.approx(hi - 10.0)
    x = _ar1(0.0, 200, 8)
    p = precision(x)
    from trainbench.core.timeseries import batch_means

    bm = batch_means(x[p.truncated:])
    assert p.rel_half_width == pytest.approx(stats.t.ppf(0.975, bm.df) * bm.se / bm.mean, rel=1e-12)
