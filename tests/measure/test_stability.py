import numpy as np

from trainbench.core import vocab as contract
from trainbench.core.vocab import GradientHealth, LossTrend
from trainbench.measure.stability import first_nonfinite, gradient_health, loss_trend


def test_loss_trend_compares_first_and_last_tenth():
    t = loss_trend([10.0] * 10 + [5.0] * 80 + [1.0] * 10)
    assert (t.trend, t.start, t.end) == ("converging", 10.0, 1.0)
    assert loss_trend([1.0] * 10 + [2.0] * 10).trend == "diverging"
    assert loss_trend([1.0, 1.01, 0.99, 1.0]).trend == "flat"
    assert loss_trend([1.0]).trend == "unknown"


def test_gradient_health():
    assert gradient_health([1.0, 1.2, 0.9]) == GradientHealth.HEALTHY == "healthy"
    assert gradient_health([1.0, float("inf")]) == GradientHealth.NON_FINITE == LossTrend.NON_FINITE
    assert gradient_health([1.0, 1.0, 1.0, 5000.0]) == GradientHealth.EXPLODING
    assert gradient_health([1e-9, 2e-9]) == GradientHealth.VANISHING


def test_the_run_tag_and_the_report_give_one_verdict_in_one_set_of_words():
    # the harness's tag and the analysis' per-run verdict on the same (post-warmup) norms, default settings:
    # before core/grad_health.py they disagreed on every one of these (words, exploding and vanishing rules)
    from trainbench.analysis.statistics.stats import gradient_health as report_verdict
    from trainbench.config.analyze import AnalysisConfig

    cfg = AnalysisConfig()
    cases = {
        "large but steady norms": np.full(20, 5e3),  # was "exploding" in the report (absolute 1e3)
        "one spike": np.r_[np.full(19, 1.0), 5e3],
        "non-finite": np.r_[np.full(5, 1.0), np.nan],
        "vanishing at the end": np.r_[np.full(10, 1.0), np.full(20, 1e-10)],  # tag said healthy (max >= 1e-7)
        "healthy": np.linspace(1.0, 0.5, 20),
    }
    for what, g in cases.items():
        tag = gradient_health(g)
        assert tag == report_verdict(g, cfg.grad_norm_max, cfg.grad_norm_min), what
        assert tag in contract.names(GradientHealth), what
    assert gradient_health(cases["large but steady norms"]) == GradientHealth.HEALTHY
    assert gradient_health(cases["vanishing at the end"]) == GradientHealth.VANISHING


def test_first_nonfinite():
    assert first_nonfinite({"a": 1.0, "b": float("nan")}) == "b"
    assert first_nonfinite({"a": 1.0}) is None
