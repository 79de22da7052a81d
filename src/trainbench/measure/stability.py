"""Training stability: non-finite values, gradient health and the loss trend over a run.

``loss_trend`` is :func:`trainbench.core.trend.classify_loss`, the one definition the analysis report uses too
(``converging``, ``flat``, ``diverging``, ``non_finite``, ``unknown``; warmup dropped by the caller; one
tolerance, ``trainbench.core.trend.TOLERANCE``). Both numbers are returned, so the verdict can be checked by eye.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainbench.core.trend import TOLERANCE, classify_loss
from trainbench.core.vocab import GradientHealth


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


def gradient_health(norms: Sequence[float], explode: float = 1e3, vanish: float = 1e-7) -> str:
    """``healthy``, ``nonfinite``, ``exploding`` (a norm above ``explode`` x the median) or ``vanishing``."""
    x = np.asarray(norms, dtype=float)
    if x.size == 0:
        return GradientHealth.UNKNOWN
    if not np.isfinite(x).all():
        return GradientHealth.NONFINITE
    med = float(np.median(x))
    if med > 0 and float(x.max()) > explode * med:
        return GradientHealth.EXPLODING
    if float(x.max()) < vanish:
        return GradientHealth.VANISHING
    return GradientHealth.HEALTHY
