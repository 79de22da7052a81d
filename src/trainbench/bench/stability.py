"""Training stability: non-finite values, gradient health and the loss trend over a run.

``loss_trend`` compares the mean loss of the first tenth of the measured epochs with the last tenth:
``converging`` when it fell by more than ``tol`` (relative), ``diverging`` when it rose by more than
``tol``, ``flat`` otherwise. Both numbers are returned, so the verdict can be checked by eye.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def first_nonfinite(values: dict[str, float]) -> str | None:
    """Name of the first metric that is NaN or infinite, if any."""
    for k, v in values.items():
        if not math.isfinite(v):
            return k
    return None


@dataclass
class LossTrend:
    trend: str  # converging | flat | diverging | unknown
    start: float
    end: float


def loss_trend(losses: Sequence[float], tol: float = 0.05) -> LossTrend:
    x = np.asarray([v for v in losses if math.isfinite(v)], dtype=float)
    if x.size < 2:
        return LossTrend("unknown", float("nan"), float("nan"))
    k = max(1, x.size // 10)
    start, end = float(x[:k].mean()), float(x[-k:].mean())
    scale = max(abs(start), 1e-12)
    rel = (end - start) / scale
    trend = "converging" if rel < -tol else "diverging" if rel > tol else "flat"
    return LossTrend(trend, start, end)


def gradient_health(norms: Sequence[float], explode: float = 1e3, vanish: float = 1e-7) -> str:
    """``healthy``, ``nonfinite``, ``exploding`` (a norm above ``explode`` x the median) or ``vanishing``."""
    x = np.asarray(norms, dtype=float)
    if x.size == 0:
        return "unknown"
    if not np.isfinite(x).all():
        return "nonfinite"
    med = float(np.median(x))
    if med > 0 and float(x.max()) > explode * med:
        return "exploding"
    if float(x.max()) < vanish:
        return "vanishing"
    return "healthy"
