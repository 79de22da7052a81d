"""Intervals that hold when epoch times are autocorrelated and that stay positive.

Coverage is checked on simulated AR(1) epoch series (seeded): the true mean and median are known.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainbench.analysis.statistics.block_bootstrap import block_bootstrap_intervals, block_length
from trainbench.analysis.statistics.stats import (
    autocorrelation,
    batch_means_interval,
    runs_interval,
    t_interval,
)

MU, SD, N, REPS = 100.0, 5.0, 500, 1000


def ar1(rho: float, reps: int = REPS, n: int = N, seed: int = 0) -> np.ndarray:
    """(reps, n) stationary AR(1) series with mean MU, marginal sd SD and lag-one correlation ``rho``."""
    rng = np.random.default_rng([seed, int(rho * 100)])
    e = rng.standard_normal((reps, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    s = np.sqrt(1 - rho**2)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + s * e[:, t]
    return MU + SD * x


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_headline_interval_of_a_single_runs_mean_covers_under_autocorrelation(rho):
    x = ar1(rho)
    cis = np.array([batch_means_interval(row) for row in x])
    cover = np.mean((cis[:, 0] <= MU) & (cis[:, 1] >= MU))
    assert 0.92 <= cover <= 0.975, f"rho={rho}: batch-means interval covers {cover:.3f}"
    if rho == 0.8:  # the old t-interval over epochs does not (about 50%): this test fails on it
        old = np.array([t_interval(row) for row in x])
        assert np.mean((old[:, 0] <= MU) & (old[:, 1] >= MU)) < 0.7


def test_on_independent_epochs_the_new_mean_interval_is_at_most_15_percent_wider():
    x = ar1(0.0)
    new = np.array([batch_means_interval(row) for row in x])
    old = np.array([t_interval(row) for row in x])
    ratio = np.mean(new[:, 1] - new[:, 0]) / np.mean(old[:, 1] - old[:, 0])
    assert 1.0 <= ratio <= 1.15


@pytest.mark.slow  # ~3,000 block bootstraps: about 20 s on a quiet 2-core machine; `make test` runs it
@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_block_bootstrap_median_interval_covers_under_autocorrelation(rho):
    x = ar1(rho, seed=1)
    rng = np.random.default_rng(2)
    ci = np.array([block_bootstrap_intervals([row], rng, resamples=300, percentiles=(50.0,))["intervals"][50.0]
                   for row in x])
    cover = np.mean((ci[:, 0] <= MU) & (ci[:, 1] >= MU))  # the AR(1) median is its mean
    assert 0.90 <= cover <= 0.98, f"rho={rho}: block-bootstrap median interval covers {cover:.3f}"


@pytest.mark.slow
def test_block_bootstrap_on_independent_epochs_is_not_much_wider_than_bca():
    from trainbench.analysis.statistics.stats import bca_interval

    x = ar1(0.0, reps=40, seed=3)
    rng = np.random.default_rng(4)
    new = [block_bootstrap_intervals([row], rng, resamples=1000)["intervals"] for row in x]
    for p, key in ((50.0, "p50"), (95.0, "p95")):
        w_new = np.mean([iv[p][1] - iv[p][0] for iv in new])
        w_old = np.mean([np.subtract(*bca_interval(row, key, 1000, rng)[::-1]) for row in x])
        assert w_new <= 1.15 * w_old, f"p{p:g}: block bootstrap {w_new:.3f} vs BCa {w_old:.3f}"


def test_autocorrelation_estimates_tau_and_ess():
    for rho, lo, hi in ((0.0, 0.7, 1.4), (0.8, 6.0, 12.0)):
        taus = [autocorrelation(row)["tau_int"] for row in ar1(rho, reps=50, seed=5)]
        assert lo <= np.median(taus) <= hi  # true tau = (1 + rho) / (1 - rho): 1 and 9
    a = autocorrelation(ar1(0.8, reps=1, seed=6)[0])
    assert 0.65 <= a["lag1"] <= 0.9 and a["ess"] == pytest.approx(N / a["tau_int"])
    assert autocorrelation(np.full(20, 3.0))["tau_int"] is None


def test_block_length_grows_with_autocorrelation_and_keeps_ten_blocks():
    short = np.median([block_length(r) for r in ar1(0.0, reps=20, seed=7)])
    long = np.median([block_length(r) for r in ar1(0.8, reps=20, seed=7)])
    assert short <= 3 and long >= 10
    assert block_length(ar1(0.99, reps=1, seed=8)[0]) <= N // 10


def test_intervals_of_times_stay_positive():
    # two runs at 3 s and 11 s give [-46,590, 60,830] ms with the plain t-interval
    lo, hi = runs_interval(np.array([3000.0, 11000.0]))
    assert 0 < lo < 3000 and hi > 11000
    old_lo, _ = t_interval(np.array([3000.0, 11000.0]))
    assert old_lo < 0  # what it replaces
    x = np.r_[np.full(5, 1.0), np.full(5, 400.0)]  # a wildly noisy run
    lo, hi = batch_means_interval(x)
    assert lo > 0 and hi > x.mean()
    ci = block_bootstrap_intervals([x, x[::-1]], np.random.default_rng(0), resamples=200)["intervals"]
    assert all(v[0] > 0 for v in ci.values())


def test_block_bootstrap_of_several_runs_and_degenerate_input():
    rng = np.random.default_rng(9)
    runs = list(ar1(0.5, reps=3, seed=10))
    out = block_bootstrap_intervals(runs, rng, resamples=300)
    lo, hi = out["intervals"][50.0]
    assert lo < np.median(np.concatenate(runs)) < hi and len(out["block_lengths"]) == 3
    assert block_bootstrap_intervals([np.arange(5.0)], rng)["intervals"][50.0] is None
    assert block_bootstrap_intervals([np.full(30, 2.0)], rng)["intervals"][95.0] == (2.0, 2.0)


def _old_batch_means(x: np.ndarray, batches: int = 10) -> tuple[float, float]:
    """What the batch-means interval did before issue 29: min(10, epochs) batches whatever the
    autocorrelation (with 12 epochs every batch is one epoch: the naive interval)."""
    from scipy import stats as st

    b = min(batches, x.size)
    bm = np.array([c.mean() for c in np.array_split(x, b)])
    h = st.t.ppf(0.975, b - 1) * bm.std(ddof=1) / np.sqrt(b)
    return x.mean() - h, x.mean() + h


@pytest.mark.parametrize("n,reps", [(12, 1000), (30, 1000), (500, 300)])
def test_batch_means_with_few_epochs_uses_batches_long_against_tau(n, reps):
    # AR(1) at lag-one correlation 0.5 (tau = 3): batches must span >= 5 tau, never one epoch each
    x = ar1(0.5, reps=reps, n=n, seed=11)
    cis = np.array([batch_means_interval(row) for row in x])
    cover = np.mean((cis[:, 0] <= MU) & (cis[:, 1] >= MU))
    assert cover >= 0.91, f"n={n}: batch-means interval covers {cover:.3f}"
    if n <= 30:  # the old rule (10 batches of 1-3 epochs): about 75% at 12 epochs, 89% at 30
        old = np.array([_old_batch_means(row) for row in x])
        old_cover = np.mean((old[:, 0] <= MU) & (old[:, 1] >= MU))
        assert old_cover < (0.85 if n == 12 else cover - 0.015), f"n={n}: old {old_cover:.3f}, new {cover:.3f}"


def test_two_stage_bootstrap_covers_between_run_variation():
    # five runs whose own means scatter (between-run sd 10 ms around 100 ms; AR(1) epochs, sd 3 ms, within):
    # the population median of an epoch is 100 ms. Resampling only within each run ignores the scatter of the
    # runs (it covers ~20%); drawing the runs first, then blocks within each, covers most of the time
    rng = np.random.default_rng(12)
    hits = {True: 0, False: 0}
    reps = 60
    for r in range(reps):
        mus = 100.0 + 10.0 * rng.standard_normal(5)
        runs = [m - MU + (ar1(0.5, reps=1, n=100, seed=1000 + 5 * r + i)[0] - MU) * 3.0 / SD + MU
                for i, m in enumerate(mus)]
        for two in (True, False):
            lo, hi = block_bootstrap_intervals(runs, rng, resamples=300, percentiles=(50.0,),
                                               two_stage=two)["intervals"][50.0]
            hits[two] += lo <= MU <= hi
    assert hits[True] / reps >= 0.75 and hits[False] / reps <= 0.5, hits
    # one run: the two stages are the block bootstrap of that run (the same draws)
    x = ar1(0.5, reps=1, seed=13)[0]
    a = block_bootstrap_intervals([x], np.random.default_rng(1), resamples=200)
    b = block_bootstrap_intervals([x], np.random.default_rng(1), resamples=200, two_stage=False)
    assert a["intervals"] == b["intervals"] and not a["two_stage"]


def test_two_stage_bootstrap_of_runs_of_different_lengths():
    rng = np.random.default_rng(14)
    runs = [100 + rng.standard_normal(40), 130 + rng.standard_normal(400)]
    out = block_bootstrap_intervals(runs, rng, resamples=400)
    lo, hi = out["intervals"][50.0]
    assert out["two_stage"] and lo < 101 and hi > 129  # drawing {short, short} or {long, long} moves the median
