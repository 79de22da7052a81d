"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al., "An Empirical Model of
Large-Batch Training", 2018, appendix A), from gradient norms at two batch sizes.

The squared norm of a mean gradient over a batch of B independent samples has expectation
``E|G_B|^2 = |G|^2 + tr(Sigma)/B`` (G the true gradient, Sigma the per-sample covariance). Two batch sizes
B_small < B_big give unbiased estimates of both terms::

    |G|^2     ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)

Each is averaged over ``pairs`` pairs of steps before the ratio is taken (a ratio of single-pair
estimates is far noisier). B_simple is where the batch trades steps for samples: steps to a given loss
``S = S_min (1 + B_noise/B)``, samples ``E = E_min (1 + B/B_noise)``; the analysis uses the second to
scale planned epochs when the planned batch differs (a model-based estimate, docs/report-schema.md).

:func:`measure_noise_scale` drives a model's own ``memory_step`` (one optimiser step at a given batch,
returning its gradient norm before clipping) at two batch sizes, after the measured epochs, outside the
timed region: the steps update the weights (the run's timings are already recorded by then).

**Budget.** The pairs are extra work a user waits for, so they are bounded by time as well as by count: a
pair starts only when the time spent so far plus one more pair (the mean of the pairs taken, or the caller's
estimate before the first) stays within ``budget_s``. It takes as many pairs as fit (``max_pairs`` at most)
and none when not one fits; the result says how many it took and why it stopped. **Resolution.** Each pair
gives its own estimates of |G|^2 and tr(Sigma); the relative standard error of B_simple (``rel_se``) follows
from their means' standard errors and covariance over the pairs (the delta method for a ratio of means), so
the analysis can say how well the estimate is resolved (None under two pairs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from trainbench.core.vocab import Series


def noise_scale(b_small: int, b_big: int, sq_small: Sequence[float], sq_big: Sequence[float]) -> dict[str, Any]:
    """B_simple from squared gradient norms at two batch sizes (paired lists, one entry per step).

    Returns ``{"b_simple", "g2", "trace_sigma", "b_small", "b_big", "pairs"}``; ``b_simple`` is None when the
    estimated |G|^2 or tr(Sigma) is not positive (the gradient is all noise, or no noise is resolved at these
    batch sizes), with ``why`` saying which.
    """
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small} and {b_big}")
    n = min(len(sq_small), len(sq_big))
    if n == 0:
        raise ValueError("no gradient norms to estimate the noise scale from")
    s_mean = sum(sq_small[:n]) / n
    b_mean = sum(sq_big[:n]) / n
    g2 = (b_big * b_mean - b_small * s_mean) / (b_big - b_small)
    tr = (s_mean - b_mean) / (1.0 / b_small - 1.0 / b_big)
    out: dict[str, Any] = {"b_simple": None, "g2": g2, "trace_sigma": tr, "b_small": b_small, "b_big": b_big,
                           "pairs": n, "rel_se": None}
    if not (math.isfinite(g2) and math.isfinite(tr)):
        out["why"] = "non-finite gradient norms"
    elif g2 <= 0:
        out["why"] = "|G|^2 estimate not positive: the gradient is noise-dominated at these batch sizes"
    elif tr <= 0:
        out["why"] = "tr(Sigma) estimate not positive: no gradient noise resolved between the two batch sizes"
    else:
        out["b_simple"] = tr / g2
        out["rel_se"] = _ratio_rel_se(b_small, b_big, sq_small[:n], sq_big[:n], g2, tr)
    return out


def _ratio_rel_se(b_small: int, b_big: int, sq_small: Sequence[float], sq_big: Sequence[float], g2: float,
                  tr: float) -> float | None:
    """The relative standard error of tr/g2 (both means over the pairs) by the delta method:
    (se/B)^2 = var_tr/tr^2 + var_g2/g2^2 - 2 cov/(tr g2), with the variances and covariance of the means
    from the per-pair estimates. None under two pairs."""
    n = len(sq_small)
    if n < 2:
        return None
    g2_i = [(b_big * b - b_small * s) / (b_big - b_small) for s, b in zip(sq_small, sq_big, strict=True)]
    tr_i = [(s - b) / (1.0 / b_small - 1.0 / b_big) for s, b in zip(sq_small, sq_big, strict=True)]

    def cov(x: Sequence[float], y: Sequence[float]) -> float:
        mx, my = sum(x) / n, sum(y) / n
        return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (n - 1) / n  # of the means

    rel2 = cov(tr_i, tr_i) / tr**2 + cov(g2_i, g2_i) / g2**2 - 2.0 * cov(tr_i, g2_i) / (tr * g2)
    return math.sqrt(rel2) if rel2 > 0 and math.isfinite(rel2) else 0.0


#: The budget's clock (a test replaces it to make a step slow without sleeping).
_clock = time.perf_counter


def batch_sizes(batch: int, limit: int | None) -> tuple[int, int] | None:
    """(B_small, B_big): the run's batch (capped at ``limit``) and an eighth of it (at least 1), or None
    when the batch is too small to split."""
    big = min(batch, limit) if limit else batch
    small = max(1, big // 8)
    return (small, big) if small < big else None


def measure_noise_scale(step_at: Callable[[int], Callable[[], dict[str, Any]]], batch: int,
                        limit: int | None = None, pairs: int = 16, budget_s: float | None = None,
                        pair_estimate_s: float | None = None,
                        clock: Callable[[], float] | None = None) -> dict[str, Any] | None:
    """Run up to ``pairs`` alternating steps at B_small and B_big (``step_at(b)()`` returns a dict with
    ``grad_norm``, a 0-d tensor or a float) within ``budget_s`` seconds (None: no limit; see the module doc)
    and estimate B_simple; None when the batch cannot be split.

    ``pair_estimate_s``: what one pair is expected to cost before any ran (from the measured epochs); a
    first pair that would not fit is not started. The result has ``pairs`` (taken), ``pairs_max``,
    ``elapsed_s`` and ``stopped`` (``budget`` when the budget ended it before ``pairs``, ``max_pairs``
    otherwise); with no pair taken, ``b_simple`` is None and ``why`` says so."""
    sizes = batch_sizes(batch, limit)
    if sizes is None:
        return None
    small, big = sizes
    clock = clock or _clock
    run_small, run_big = step_at(small), step_at(big)
    sq_s: list[float] = []
    sq_b: list[float] = []
    t0 = clock()
    stopped = "max_pairs"
    for i in range(pairs):
        elapsed = clock() - t0
        next_pair = elapsed / i if i else pair_estimate_s
        if budget_s is not None and next_pair is not None and elapsed + next_pair > budget_s:
            stopped = "budget"
            break
        sq_s.append(float(run_small()[Series.GRAD_NORM]) ** 2)
        sq_b.append(float(run_big()[Series.GRAD_NORM]) ** 2)
    elapsed = clock() - t0
    extra = {"pairs_max": pairs, "elapsed_s": elapsed, "stopped": stopped, "budget_s": budget_s}
    if not sq_s:
        return {"b_simple": None, "g2": None, "trace_sigma": None, "b_small": small, "b_big": big, "pairs": 0,
                "rel_se": None, **extra,
                "why": (f"not one pair of steps fits the budget of {budget_s:.3g} s "
                        f"(a pair is expected to take {pair_estimate_s:.3g} s)")}
    return {**noise_scale(small, big, sq_s, sq_b), **extra}
