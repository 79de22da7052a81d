"""Means of autocorrelated series shared by the stop rule and the analysis (trainbench.core.timeseries)."""

from __future__ import annotations

import numpy as np

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
