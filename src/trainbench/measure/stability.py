"""Training stability: non-finite values, gradient health and the loss trend over a run.

``gradient_health`` is :func:`trainbench.core.grad_health.classify_gradients`, the one definition (and the one
set of words) the analysis report uses too.

``loss_trend`` is :func:`trainbench.core.trend.classify_loss`, the one definition the analysis report uses too
(``converging``, ``flat``, ``diverging``, ``non_finite``, ``unknown``; warmup dropped by the caller; one
tolerance, ``trainbench.core.trend.TOLERANCE``). Both numbers are returned, so the verdict can be checked by eye.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainbench.core.grad_health import EXPLODE_RATIO, VANISH, classify_gradients
from trainbench.core.trend import TOLERANCE, classify_loss


def first_nonfinite(values: dict[str, float]) -> str | None:
    """Name of the first metric that is NaN or infinite, if any."""
    for k, v in values.items():
        if not math.isfinite(v):
            return k
    return None


@dataclass
class LossTrend:
    trend: str  # converging | flat | diverging | non_finite | unknown (trainbench.core.trend.TRENDS)
    start: float
    end: float


def loss_trend(losses: Sequence[float], tol: float = TOLERANCE) -> LossTrend:
    """The trend of the measured (post-warmup) losses: see :func:`trainbench.core.trend.classify_loss`."""
    t = classify_loss(losses, 0, tol)
    return LossTrend(t.trend, t.start, t.end)


def gradient_health(norms: Sequence[float], explode: float = EXPLODE_RATIO, vanish: float = VANISH) -> str:
    """The run's ``gradient_health`` tag: :func:`trainbench.core.grad_health.classify_gradients` on the measured
    (post-warmup) norms (``healthy``, ``exploding`` above ``explode`` x the median norm, ``vanishing``,
    ``non_finite`` or ``unknown``), the one definition the analysis report uses too."""
    return classify_gradients(norms, 0, explode, vanish).verdict
