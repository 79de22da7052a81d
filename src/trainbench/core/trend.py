"""One definition of a run's loss trend, shared by the run's ``loss_trend`` tag and the analysis report.

Words: ``converging``, ``flat``, ``diverging``, ``non_finite``, ``unknown``. The warmup epochs are dropped;
a non-finite loss after warmup makes the run ``non_finite``; fewer than two measured losses is ``unknown``.
Otherwise the median loss of the first tenth of the measured epochs (``start``) is compared with the median
of the last tenth (``end``): ``converging`` when it fell by more than ``TOLERANCE`` of ``|start|``,
``diverging`` when it rose by more than that, ``flat`` in between. Numpy only, so that both the training
harness and the analysis can import it without torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from trainbench.core.vocab import LossTrend, names

TRENDS = names(LossTrend)
#: Relative change of the loss between the first and last tenth that counts as converging or diverging.
TOLERANCE = 0.05
#: Worst first when one verdict must stand for several runs.
SEVERITY = {LossTrend.UNKNOWN: 0, LossTrend.CONVERGING: 1, LossTrend.FLAT: 2, LossTrend.DIVERGING: 3,
            LossTrend.NON_FINITE: 4}


class Trend(NamedTuple):
    trend: str
    start: float  # NaN when unknown
    end: float  # NaN when unknown or non-finite


def classify_loss(losses: Sequence[float] | np.ndarray, warmup_epochs: int = 0, tol: float = TOLERANCE) -> Trend:
    """The loss trend of one run from its per-epoch losses (warmup included; ``warmup_epochs`` are dropped)."""
    x = np.asarray(losses, dtype=float)[max(0, int(warmup_epochs)):]
    if x.size and not np.isfinite(x).all():
        finite = x[np.isfinite(x)]
        return Trend(LossTrend.NON_FINITE, float(finite[0]) if finite.size else math.nan, math.nan)
    if x.size < 2:
        return Trend(LossTrend.UNKNOWN, float(x[0]) if x.size else math.nan, float(x[0]) if x.size else math.nan)
    k = max(1, x.size // 10)
    start, end = float(np.median(x[:k])), float(np.median(x[-k:]))
    rel = (end - start) / max(abs(start), 1e-12)
    trend = LossTrend.CONVERGING if rel < -tol else LossTrend.DIVERGING if rel > tol else LossTrend.FLAT
    return Trend(trend, start, end)


def worst(trends: Sequence[str]) -> str:
    """The most severe of several runs' trends (``unknown`` for none)."""
    return max(trends, key=lambda t: SEVERITY.get(t, 0)) if trends else LossTrend.UNKNOWN
