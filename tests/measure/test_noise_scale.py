"""The gradient noise scale against linear regression with Gaussian noise, where B_simple is known exactly."""

from __future__ import annotations

import pytest
import torch

from trainbench.core.vocab import Series
from trainbench.measure.noise_scale import batch_sizes, measure_noise_scale, noise_scale


def _regression_step(d: int, delta: torch.Tensor, sigma: float, seed: int = 0):
    """``step_at(b)``: the gradient norm of the mean squared error of b fresh samples at w = w* + delta.

    x ~ N(0, I_d), y = x.w* + eps, eps ~ N(0, sigma^2). Per-sample gradient g = 2 x (x.delta - eps), true
    gradient G = 2 delta, and tr(Sigma) = 4((d + 1)|delta|^2 + d sigma^2), so
    B_simple = ((d + 1)|delta|^2 + d sigma^2) / |delta|^2.
    """
    gen = torch.Generator().manual_seed(seed)

    def step_at(b: int):
        def step():
            x = torch.randn(b, d, generator=gen, dtype=torch.float64)
            eps = sigma * torch.randn(b, generator=gen, dtype=torch.float64)
            grad = 2 * (x * (x @ delta - eps)[:, None]).mean(0)
            return {"loss": torch.zeros(()), Series.GRAD_NORM: grad.norm()}
        return step
    return step_at


@pytest.mark.slow
@pytest.mark.parametrize(("d", "sigma"), [(10, 2.0), (4, 0.5)])
def test_b_simple_matches_the_analytic_noise_scale_of_linear_regression(d: int, sigma: float) -> None:
    delta = torch.ones(d, dtype=torch.float64) / d ** 0.5  # |delta| = 1
    expected = (d + 1) + d * sigma ** 2
    est = measure_noise_scale(_regression_step(d, delta, sigma), batch=64, pairs=4000)
    assert est is not None and est["b_small"] == 8 and est["b_big"] == 64
    assert est["b_simple"] == pytest.approx(expected, rel=0.12)
    assert est["g2"] == pytest.approx(4.0, rel=0.12)  # |G|^2 = 4 |delta|^2


def test_a_gradient_without_signal_is_refused_not_divided() -> None:
    est = noise_scale(8, 64, [1.0] * 4, [1.0 / 8] * 4)  # E|G_B|^2 = tr/B exactly: |G|^2 = 0
    assert est["b_simple"] is None and "noise-dominated" in est["why"]


def test_batch_sizes_split_the_run_batch_and_respect_the_data_limit() -> None:
    assert batch_sizes(230, None) == (28, 230)
    assert batch_sizes(230, 100) == (12, 100)
    assert batch_sizes(1, None) is None
    with pytest.raises(ValueError, match="b_small < b_big"):
        noise_scale(64, 8, [1.0], [1.0])


def test_a_real_model_step_gives_a_noise_scale() -> None:
    from helpers.models import build_model

    torch.set_num_threads(1)
    m = build_model("tft")  # tiny, seeded: its own optimiser step at batch 64 and 8, 16 pairs
    est = measure_noise_scale(m.memory_step, int(m.batch_size), m.batch_limit)
    assert (est["b_small"], est["b_big"], est["pairs"]) == (8, 64, 16)
    assert est["b_simple"] is not None and est["b_simple"] > 0 and est["g2"] > 0


class _Clock:
    """A clock each step moves on by a set time: a step made artificially slow, without sleeping."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _slow_steps(clock: _Clock, step_s: float, step_at):
    def slow_at(b: int):
        inner = step_at(b)

        def step():
            clock.t += step_s
            return inner()
        return step
    return slow_at


def test_the_budget_stops_the_pairs_early_and_says_so() -> None:
    clock = _Clock()
    delta = torch.ones(4, dtype=torch.float64) / 2
    steps = _slow_steps(clock, 1.0, _regression_step(4, delta, 0.5))  # a pair takes 2 s
    est = measure_noise_scale(steps, batch=64, pairs=16, budget_s=7.0, pair_estimate_s=0.5, clock=clock)
    # pairs start at 0, 2, 4 s (each ends within 7 s); a fourth would end at 8 s
    assert est["pairs"] == 3 and est["stopped"] == "budget" and est["pairs_max"] == 16
    assert est["elapsed_s"] == pytest.approx(6.0) and est["elapsed_s"] <= est["budget_s"]
    free = measure_noise_scale(_regression_step(4, delta, 0.5), batch=64, pairs=5, budget_s=None)
    assert free["pairs"] == 5 and free["stopped"] == "max_pairs"


def test_no_pair_is_taken_when_not_one_fits_and_the_result_says_why() -> None:
    clock = _Clock()
    calls = []

    def step_at(b: int):
        def step():
            calls.append(b)
            return {Series.GRAD_NORM: 1.0}
        return step

    est = measure_noise_scale(step_at, batch=64, pairs=16, budget_s=1.0, pair_estimate_s=3.0, clock=clock)
    assert calls == [] and est["pairs"] == 0 and est["b_simple"] is None and est["stopped"] == "budget"
    assert "not one pair" in est["why"] and "budget" in est["why"]


def test_the_relative_standard_error_matches_the_spread_of_repeated_estimates() -> None:
    d, sigma = 4, 0.5
    delta = torch.ones(d, dtype=torch.float64) / d ** 0.5
    ests = [measure_noise_scale(_regression_step(d, delta, sigma, seed=s), batch=64, pairs=200) for s in range(30)]
    b = torch.tensor([e["b_simple"] for e in ests], dtype=torch.float64)
    spread = float(b.std() / b.mean())  # the estimate's actual relative spread over 30 repetitions
    reported = sum(e["rel_se"] for e in ests) / len(ests)
    assert reported == pytest.approx(spread, rel=0.5)
    few = measure_noise_scale(_regression_step(d, delta, sigma), batch=64, pairs=20)
    assert few["rel_se"] > reported  # fewer pairs, less resolved
    assert noise_scale(8, 64, [2.0], [1.0])["rel_se"] is None  # one pair: no spread to estimate
