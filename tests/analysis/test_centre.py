"""The one centre of a model's epoch time (issue 29, items 5, 6, 8): the hours' mean uses every counted epoch,
one estimator gives both that mean and the across-run interval's centre, and two runs give a usable interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainbench.analysis.fields import to_json
from trainbench.analysis.runs import RunRecord
from trainbench.analysis.statistics.stats import model_centre, model_stats, outlier_mask
from trainbench.config.analyze import AnalysisConfig
from trainbench.core.vocab import Artifact, Outcome, Series


def _rec(name: str, times: np.ndarray, warmup: int = 0, **series: np.ndarray) -> RunRecord:
    return RunRecord(run_id=name, run_name=name, model="dqn", device="cpu", sweep_id="s", outcome=Outcome.COMPLETED,
                     status="FINISHED", start_time=0, warmup_epochs=warmup, target_epochs=None, params={}, tags={},
                     metrics={}, series={Series.EPOCH_TIME_MS: np.asarray(times, dtype=float), **series},
                     series_source=Artifact.EPOCHS)


def _stats(*runs: RunRecord) -> dict:
    cfg = AnalysisConfig()
    cfg.bootstrap_resamples = 200
    return to_json(model_stats(list(runs), cfg, np.random.default_rng(0)))


def _noisy(mean: float, n: int, rel: float, seed: int) -> np.ndarray:
    return mean * (1 + rel * np.random.default_rng(seed).standard_normal(n))


def test_hours_mean_uses_every_counted_epoch_outliers_included():
    # 200 epochs at ~100 ms with 8 slow ones (a checkpoint, a GC pause): training pays for them; Tukey's fences
    # flag them and the typical-epoch statistics leave them out, the mean behind the hours does not
    t = _noisy(100.0, 200, 0.01, 1)
    t[::25] = 400.0
    busy = np.zeros(202)
    busy[2 + 3] = 1.0  # one contaminated epoch after the warmup: dropped from everything
    times = np.r_[500.0, 500.0, t]  # two warmup epochs
    s = _stats(_rec("a", times, warmup=2, contaminated=busy))
    e = s[Series.EPOCH_TIME_MS]
    counted = np.delete(t, 3)
    assert s["epochs_in_mean"] == counted.size == 199
    assert e["mean"] == pytest.approx(counted.mean())  # 112 ms; the trimmed mean was 100 ms (12% low)
    out = outlier_mask(counted)
    assert e["mean_typical"] == pytest.approx(counted[~out].mean())
    assert e["mean"] > 1.1 * e["mean_typical"]
    assert out.sum() >= 8 and e["centre"]["outliers_included"] == out.sum()
    assert s["outliers_removed"] == out.sum() + 1  # the outliers and the contaminated epoch
    assert e["max"] < 200  # typical epoch time: outliers excluded, and said so
    lo, hi = e["ci95_mean"]
    assert lo < e["mean"] < hi and lo > e["mean_typical"] * 0.95


def test_one_centre_for_hours_and_interval_with_runs_of_different_lengths():
    # a short run (30 epochs) at 140 ms and a long one (600 epochs) at 100 ms: the pooled mean (~102) and the
    # mean of run means (120) differ; the report must use one estimator for both the mean and the interval
    a = _rec("short", _noisy(140.0, 30, 0.02, 2))
    b = _rec("long", _noisy(100.0, 600, 0.02, 3))
    s = _stats(a, b)
    e = s[Series.EPOCH_TIME_MS]
    lo, hi = e["ci95_mean"]
    assert math.sqrt(lo * hi) == pytest.approx(e["mean"], rel=1e-9)  # the log-scale interval's centre
    c = model_centre([a.series[Series.EPOCH_TIME_MS], b.series[Series.EPOCH_TIME_MS]])
    assert e["mean"] == pytest.approx(c.mean) and e["ci95_mean_method"] == "random_effects"
    assert e["centre"]["estimator"].startswith("random-effects")
    # runs that disagree far beyond their own noise weigh about alike (between-run variance dominates)
    w = e["centre"]["weights"]
    assert w[0] == pytest.approx(0.5, abs=0.05) and 115 < e["mean"] < 125
    assert e["mean_pooled"] == pytest.approx(np.r_[a.series[Series.EPOCH_TIME_MS], b.series[Series.EPOCH_TIME_MS]].mean())


def test_runs_that_agree_weigh_by_their_precision():
    a = _rec("short", _noisy(100.0, 20, 0.02, 4))
    b = _rec("long", _noisy(100.0, 800, 0.02, 5))
    e = _stats(a, b)[Series.EPOCH_TIME_MS]
    assert e["centre"]["weights"][1] > e["centre"]["weights"][0]  # the more precise run weighs more
    assert e["mean"] == pytest.approx(e["mean_pooled"], rel=0.005)


def test_two_runs_that_disagree_give_a_usable_interval_and_ask_for_seeds():
    # issue 29: two held-out runs around 100 ms that disagree 3.7x got 5 ms .. 9,657,602 ms (t on 1 df)
    a = _rec("0", _noisy(42.0, 60, 0.03, 6))
    b = _rec("1", _noisy(155.0, 60, 0.03, 7))
    s = _stats(a, b)
    e = s[Series.EPOCH_TIME_MS]
    lo, hi = e["ci95_mean"]
    assert 15 < lo < 0.6 * e["mean"] and 1.6 * e["mean"] < hi < 500, (lo, hi)  # wide, and usable
    assert 90 < e["mean"] < 110 and hi / lo < 20
    assert e["ci95_mean_basis"] == "runs" and "independent runs" in e["ci95_mean_why"]
    assert s["autocorrelation"]["recommend_more_seeds"]
    assert any("at least 3 seeds" in w for w in s["stability"]["warnings"])


def test_one_short_run_says_its_batches_are_too_short():
    x = 100 + 5 * np.cumsum(np.random.default_rng(8).standard_normal(12)) / 3  # strongly persistent
    s = _stats(_rec("cpu", x))
    e = s[Series.EPOCH_TIME_MS]
    # tau ~ 5: two batches of 6 epochs are shorter than 5 tau; the report says so and asks for more seeds
    assert e["ci95_mean_basis"] == "batch_means" and e["centre"]["batches"] == 2
    assert not e["centre"]["batches_long_enough"] and e["centre"]["tau_int"] > 2.4
    assert "too few" in e["ci95_mean_why"] and s["autocorrelation"]["recommend_more_seeds"]
    assert any("too short for batches" in w for w in s["stability"]["warnings"])


def test_gradient_health_in_the_report_uses_the_tag_words_and_reads_old_tags():
    from trainbench.core.vocab import GradientHealth, Tag

    spiky = np.r_[np.full(29, 1.0), 5e3]
    a = _rec("a", _noisy(100.0, 30, 0.01, 9), grad_norm=np.full(30, 3e3))  # large but steady: healthy
    b = _rec("b", _noisy(100.0, 30, 0.01, 10), grad_norm=spiky)
    s = _stats(a, b)
    assert [p[Tag.GRADIENT_HEALTH] for p in s["per_run"]] == [GradientHealth.HEALTHY, GradientHealth.EXPLODING]
    assert s["stability"][Tag.GRADIENT_HEALTH] == GradientHealth.EXPLODING
    # a run recorded before one vocabulary, without norms: its tag said "nonfinite"
    old = _rec("old", _noisy(100.0, 30, 0.01, 11))
    old.tags[Tag.GRADIENT_HEALTH] = "nonfinite"
    s = _stats(a, old)
    assert s["per_run"][1][Tag.GRADIENT_HEALTH] == GradientHealth.NON_FINITE
    assert s["stability"][Tag.GRADIENT_HEALTH] == GradientHealth.NON_FINITE
    assert any("gradients non-finite" in w for w in s["stability"]["warnings"])


@pytest.mark.slow
@pytest.mark.parametrize("k,between", [(2, 0.1), (2, 0.3), (3, 0.1), (5, 0.3)])
def test_across_run_interval_covers_with_few_runs_and_stays_usable(k, between):
    # run means ~ N(100, (between x 100)^2), 60 AR(1) epochs each (lag-one 0.5, sd 3 ms): the interval of the
    # population mean must cover ~95% and, with two runs, not be the t on one df (median hi/lo ~3 at 10%)
    rng = np.random.default_rng([k, int(between * 100)])
    hits, ratios = 0, []
    reps = 300
    for _ in range(reps):
        mus = 100.0 * (1 + between * rng.standard_normal(k))
        runs = []
        for m in mus:
            e = rng.standard_normal(60)
            x = np.empty(60)
            x[0] = e[0]
            for t in range(1, 60):
                x[t] = 0.5 * x[t - 1] + math.sqrt(0.75) * e[t]
            runs.append(m + 3.0 * x)
        lo, hi = model_centre(runs).ci
        hits += lo <= 100.0 <= hi
        ratios.append(hi / lo)
    assert hits / reps >= 0.88, hits / reps
    if k == 2 and between == 0.1:
        assert np.median(ratios) < 2.2
