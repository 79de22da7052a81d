"""One definition of a run's gradient health, shared by the run's ``gradient_health`` tag and the report.

Words (:class:`trainbench.core.vocab.GradientHealth`): ``healthy``, ``exploding``, ``vanishing``,
``non_finite``, ``unknown``. The warmup epochs are dropped, then, on the per-epoch gradient norms:

- ``non_finite``: any norm is NaN or infinite;
- ``exploding``: the largest norm exceeds ``EXPLODE_RATIO`` (1000) x the median norm of the first third of
  the run (its early scale: a ratio, so that models whose norms differ by orders of magnitude are judged
  alike, and one against the start, so that norms that fall to nothing are not called exploding);
- ``vanishing``: the median norm of the last third is below ``VANISH`` (1e-8);
- ``healthy`` otherwise; ``unknown`` without norms.

Runs recorded before this module wrote ``nonfinite`` in the tag, and reports said ``ok``: :func:`normalise`
reads those words as ``non_finite`` and ``healthy``. Numpy only, so that both the training harness and the
analysis import it without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from trainbench.core.vocab import GradientHealth, names

WORDS = names(GradientHealth)
#: A norm above this many times the run's median norm is exploding.
EXPLODE_RATIO = 1e3
#: A median norm of the last third below this is vanishing.
VANISH = 1e-8
#: Words written before there was one vocabulary, and what they mean now.
LEGACY = {"nonfinite": GradientHealth.NON_FINITE, "ok": GradientHealth.HEALTHY}
#: Worst first when one verdict must stand for several runs.
SEVERITY = {GradientHealth.UNKNOWN: 0, GradientHealth.HEALTHY: 1, GradientHealth.VANISHING: 2,
            GradientHealth.EXPLODING: 3, GradientHealth.NON_FINITE: 4}


class Health(NamedTuple):
    verdict: str
    max_ratio: float  # largest norm / median norm of the first third (NaN when unknown or non-finite)
    last_median: float  # median norm of the last third (NaN when unknown or non-finite)


def classify_gradients(norms: Sequence[float] | np.ndarray, warmup_epochs: int = 0,
                       explode_ratio: float = EXPLODE_RATIO, vanish: float = VANISH) -> Health:
    """The gradient health of one run from its per-epoch gradient norms (warmup included; ``warmup_epochs``
    are dropped)."""
    x = np.asarray(norms, dtype=float)[max(0, int(warmup_epochs)):]
    nan = float("nan")
    if x.size == 0:
        return Health(GradientHealth.UNKNOWN, nan, nan)
    if not np.isfinite(x).all():
        return Health(GradientHealth.NON_FINITE, nan, nan)
    third = max(1, x.size // 3)
    med = float(np.median(x[:third]))
    ratio = float(x.max()) / med if med > 0 else (float("inf") if x.max() > 0 else 1.0)
    last = float(np.median(x[-third:]))
    if ratio > explode_ratio:
        return Health(GradientHealth.EXPLODING, ratio, last)
    if last < vanish:
        return Health(GradientHealth.VANISHING, ratio, last)
    return Health(GradientHealth.HEALTHY, ratio, last)


def normalise(word: str | None) -> str:
    """A stored verdict in today's words (``nonfinite`` -> ``non_finite``, ``ok`` -> ``healthy``; None or an
    unknown word -> ``unknown``)."""
    if word is None:
        return GradientHealth.UNKNOWN
    w = LEGACY.get(str(word), str(word))
    return w if w in WORDS else GradientHealth.UNKNOWN


def worst(verdicts: Sequence[str]) -> str:
    """The most severe of several runs' verdicts (old words read too; ``unknown`` for none)."""
    vs = [normalise(v) for v in verdicts]
    return max(vs, key=lambda v: SEVERITY.get(v, 0)) if vs else GradientHealth.UNKNOWN
