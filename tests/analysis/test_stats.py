"""Statistics on known samples (no MLflow)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from trainbench.analysis.statistics.stats import (
    bca_interval,
    describe,
    drift,
    gradient_health,
    loss_trend,
    outlier_mask,
    t_interval,
)
from trainbench.core.vocab import GradientHealth, LossTrend


def test_t_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    samples = rng.normal(10.0, 2.0, size=(2000, 20))
    hits = 0
    for x in samples:
        lo, hi = t_interval(x)
        hits += lo <= 10.0 <= hi
    assert 0.93 <= hits / 2000 <= 0.97


def test_t_interval_needs_two_values():
    assert t_interval(np.array([3.0])) is None
    lo, hi = t_interval(np.array([1.0, 3.0]))
    assert lo < 2.0 < hi


def _planted() -> np.ndarray:
    # 200 evenly spread normal quantiles (|z| <= 2.33: inside both rules' fences) plus 5 planted spikes
    base = 10.0 + 0.1 * st.norm.ppf(np.linspace(0.01, 0.99, 200))
    return np.concatenate([base[:50], [20.0, 25.0], base[50:], [18.0, 30.0, 2.0]])


@pytest.mark.parametrize("rule,expected", [("iqr", 5), ("mad", 5), ("none", 0)])
def test_outlier_rules_find_exactly_the_planted_outliers(rule, expected):
    x = _planted()
    mask = outlier_mask(x, rule)
    assert int(mask.sum()) == expected
    if expected:
        assert set(x[mask]) == {20.0, 25.0, 18.0, 30.0, 2.0}


def test_describe_and_bca_interval_on_a_known_sample():
    x = np.random.default_rng(0).normal(100.0, 5.0, 400)
    d = describe(x)
    assert d["mean"] == pytest.approx(x.mean()) and d["std"] == pytest.approx(x.std(ddof=1))
    assert d["cv"] == pytest.approx(d["std"] / d["mean"]) and d["min"] <= d["p50"] <= d["p95"] <= d["p99"]
    rng = np.random.default_rng(1)
    lo, hi = bca_interval(x, "p50", 500, rng)
    assert lo < np.median(x) < hi and hi - lo < 3
    lo95, hi95 = bca_interval(x, "p95", 500, rng)
    assert lo95 < np.percentile(x, 95) < hi95 and lo95 > hi
    assert bca_interval(np.full(50, 2.0), "p50", 200, rng) == (2.0, 2.0)
    assert bca_interval(x[:5], "p50", 200, rng) is None


def test_describe_single_value_has_no_spread():
    d = describe(np.array([4.0]))
    assert d["mean"] == 4.0 and d["std"] is None and d["cv"] is None


def test_drift_needs_a_trend_and_an_effect_size():
    rng = np.random.default_rng(3)
    flat = rng.normal(10, 0.2, 300)
    ramp = flat + np.linspace(0, 2.0, 300)  # +20% by the end: throttling
    tiny = flat + np.linspace(0, 0.2, 300)  # significant but only ~2%
    assert drift(ramp)["drifting"] and drift(ramp)["change"] > 0.1
    assert not drift(flat)["drifting"]
    assert not drift(tiny)["drifting"]


def test_loss_trend_and_gradient_health():
    assert loss_trend(np.linspace(1, 0.2, 100))["trend"] == "converging"
    assert loss_trend(np.linspace(1, 3, 100))["trend"] == "diverging"
    assert loss_trend(np.array([1.0, np.nan, 2.0]))["trend"] == LossTrend.NON_FINITE
    assert loss_trend(np.linspace(-1, -2, 50))["trend"] == "converging"  # negative losses (policy gradient)
    assert gradient_health(np.full(10, 0.5)) == GradientHealth.HEALTHY
    assert gradient_health(np.array([0.5, np.inf])) == GradientHealth.NON_FINITE == LossTrend.NON_FINITE
    assert gradient_health(np.array([0.5, 0.5, 0.5, 5e3])) == GradientHealth.EXPLODING  # 10,000 x the median
    assert gradient_health(np.full(30, 1e-12)) == GradientHealth.VANISHING
    # the run's warmup is dropped, as for the run's tag
    assert gradient_health(np.r_[np.inf, np.full(10, 0.5)], warmup_epochs=1) == GradientHealth.HEALTHY


def test_analysis_never_imports_models_or_bench():
    import ast
    from pathlib import Path

    import trainbench.analysis as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                assert not n.startswith(("trainbench.models", "trainbench.measure", "torch")), f"{path.name}: {n}"
