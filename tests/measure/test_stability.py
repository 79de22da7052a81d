from trainbench.measure.stability import first_nonfinite, gradient_health, loss_trend


def test_loss_trend_compares_first_and_last_tenth():
    t = loss_trend([10.0] * 10 + [5.0] * 80 + [1.0] * 10)
    assert (t.trend, t.start, t.end) == ("converging", 10.0, 1.0)
    assert loss_trend([1.0] * 10 + [2.0] * 10).trend == "diverging"
    assert loss_trend([1.0, 1.01, 0.99, 1.0]).trend == "flat"
    assert loss_trend([1.0]).trend == "unknown"


def test_gradient_health():
    assert gradient_health([1.0, 1.2, 0.9]) == "healthy"
    assert gradient_health([1.0, float("inf")]) == "nonfinite"
    assert gradient_health([1.0, 1.0, 1.0, 5000.0]) == "exploding"
    assert gradient_health([1e-9, 2e-9]) == "vanishing"


def test_first_nonfinite():
    assert first_nonfinite({"a": 1.0, "b": float("nan")}) == "b"
    assert first_nonfinite({"a": 1.0}) is None
