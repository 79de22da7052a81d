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
"""

from __future__ import annotations

import math
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
                           "pairs": n}
    if not (math.isfinite(g2) and math.isfinite(tr)):
        out["why"] = "non-finite gradient norms"
    elif g2 <= 0:
        out["why"] = "|G|^2 estimate not positive: the gradient is noise-dominated at these batch sizes"
    elif tr <= 0:
        out["why"] = "tr(Sigma) estimate not positive: no gradient noise resolved between the two batch sizes"
    else:
        out["b_simple"] = tr / g2
    return out


def batch_sizes(batch: int, limit: int | None) -> tuple[int, int] | None:
    """(B_small, B_big): the run's batch (capped at ``limit``) and an eighth of it (at least 1), or None
    when the batch is too small to split."""
    big = min(batch, limit) if limit else batch
    small = max(1, big // 8)
    return (small, big) if small < big else None


def measure_noise_scale(step_at: Callable[[int], Callable[[], dict[str, Any]]], batch: int,
                        limit: int | None = None, pairs: int = 16) -> dict[str, Any] | None:
    """Run ``pairs`` alternating steps at B_small and B_big (``step_at(b)()`` returns a dict with
    ``grad_norm``, a 0-d tensor or a float) and estimate B_simple; None when the batch cannot be split."""
    sizes = batch_sizes(batch, limit)
    if sizes is None:
        return None
    small, big = sizes
    run_small, run_big = step_at(small), step_at(big)
    sq_s, sq_b = [], []
    for _ in range(pairs):
        sq_s.append(float(run_small()[Series.GRAD_NORM]) ** 2)
        sq_b.append(float(run_big()[Series.GRAD_NORM]) ** 2)
    return noise_scale(small, big, sq_s, sq_b)
