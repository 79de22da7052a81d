"""The measurement budget: when a run may stop before ``trainer.epochs`` (a maximum).

Checked by the harness between epochs, never inside one, on the measured epochs only (warmup excluded).
Each measured epoch's time (training pass plus validation pass, what the projection uses) is kept, in
order (a few hundred floats). The run stops:

- ``converged``: after at least ``min_epochs`` measured epochs, when

  1. the initial transient is over: MSER-5 (:func:`trainbench.core.timeseries.mser_truncation`) finds the
     truncation point in the first half of the epochs, and those first epochs are dropped (ten slow epochs
     after warmup would otherwise bias a 100-epoch mean by 2%, twice a 1% target);
  2. on the epochs after it, the 95% **batch-means** half-width (:func:`trainbench.core.timeseries.batch_means`,
     the estimator the analysis uses: batches of at least 5 integrated autocorrelation times, t on
     batches - 1 df) is within ``rel_ci`` of the mean; epoch times are autocorrelated, and the iid
     t-interval ``t s / sqrt(n)`` is then too narrow by about sqrt(tau);
  3. those batches are long enough (>= 5 tau) and at least ``MIN_BATCHES`` (10) of them fit, and at least
     ``min_epochs`` epochs remain after the truncation, so a lucky pair of batch means cannot stop a run;

- ``budget``: once ``budget_min`` minutes of the epoch loop (warmup included) have passed and at least one
  epoch was measured;
- otherwise at ``max_epochs`` (the reason is then ``max_epochs``), or on a failure (the outcome's name).

The figures are re-evaluated between epochs, every epoch up to 100 measured epochs and then whenever the
epochs grew by 1% (each evaluation is O(n log n)). What the rule dropped and rested on is logged with the run's summary: ``stop_truncated_epochs``,
``stop_batches``, ``stop_rel_ci95`` (the batch-means half-width / mean) and ``stop_epochs``. The analysis
computes its own intervals from the recorded epochs and reports each run's ``stop_reason``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainbench.core.timeseries import batch_means, mser_truncation, t_quantile
from trainbench.core.vocab import StopReason, Summary, names

STOP_REASONS = names(StopReason)
#: Fewest batch means a ``converged`` stop may rest on.
MIN_BATCHES = 10


@dataclass
class Welford:
    """Running count, mean and sum of squared deviations."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0

    def rel_half_width(self, level: float = 0.95) -> float:
        """Half-width of the iid t-interval of the mean at ``level``, relative to the mean (inf when undefined);
        kept for comparison: the rule uses :meth:`StopRule.evaluate`."""
        if self.n < 2 or self.mean <= 0:
            return math.inf
        t = t_quantile(self.n - 1, level)
        return t * self.std / math.sqrt(self.n) / self.mean


@dataclass(frozen=True)
class Precision:
    """What the stop rule sees: the batch-means half-width after the transient, and what it rests on."""

    rel_half_width: float  # inf when undefined (not settled, too few epochs)
    truncated: int  # initial epochs dropped by MSER-5
    epochs: int  # epochs after the truncation
    batches: int
    long_enough: bool  # batches span >= 5 autocorrelation times
    settled: bool  # MSER-5 found the truncation point in the first half


def precision(times: np.ndarray, batches: int = 10, level: float = 0.95) -> Precision:
    """The stop rule's view of the measured epoch times so far (in order)."""
    x = np.asarray(times, dtype=float)
    x = x[np.isfinite(x)]
    d = mser_truncation(x)
    if d is None:
        return Precision(math.inf, 0, int(x.size), 0, False, False)
    y = x[d:]
    bm = batch_means(y, batches)
    if bm is None or bm.mean <= 0:
        return Precision(math.inf, d, int(y.size), 0, False, True)
    t = t_quantile(bm.df, level)
    return Precision(t * bm.se / bm.mean, d, int(y.size), bm.batches, bm.long_enough, True)


class StopRule:
    """``add`` each measured epoch's time, then ask ``check`` between epochs."""

    def __init__(self, rel_ci: float = 0.0, min_epochs: int = 2, budget_min: float | None = None) -> None:
        self.rel_ci = float(rel_ci)
        self.min_epochs = max(2, int(min_epochs))
        self.budget_s = None if budget_min is None else float(budget_min) * 60.0
        self.stats = Welford()
        self.times: list[float] = []
        self.last: Precision | None = None
        self._next_eval = 0
        self._converged = False

    @classmethod
    def from_config(cls, stop: object | None) -> StopRule:
        if stop is None:
            return cls()
        return cls(getattr(stop, "rel_ci", 0.0), getattr(stop, "min_epochs", 2), getattr(stop, "budget_min", None))

    def add(self, epoch_ms: float) -> None:
        if math.isfinite(epoch_ms):
            self.stats.add(float(epoch_ms))
            self.times.append(float(epoch_ms))

    def evaluate(self) -> Precision:
        """The batch-means precision of the epochs so far, after the initial transient (kept for the summary)."""
        self.last = precision(np.array(self.times))
        return self.last

    def check(self, elapsed_s: float) -> str | None:
        """``converged``, ``budget`` or None (go on)."""
        if self.rel_ci > 0 and self.stats.n >= self.min_epochs:
            if self.stats.n >= self._next_eval:
                # re-evaluated once the epochs grew by 1% (every epoch below 100): O(n log n) each time
                self._next_eval = self.stats.n + max(1, self.stats.n // 100)
                p = self.evaluate()
                self._converged = (p.settled and p.long_enough and p.batches >= MIN_BATCHES
                                   and p.epochs >= self.min_epochs and p.rel_half_width <= self.rel_ci)
            if self._converged:
                return StopReason.CONVERGED
        if self.budget_s is not None and self.stats.n >= 1 and elapsed_s >= self.budget_s:
            return StopReason.BUDGET
        return None

    def summary(self) -> dict[str, float]:
        """The rule's own figures at the end (logged with the run's summary)."""
        p = self.evaluate()
        rhw = p.rel_half_width
        return {Summary.STOP_REL_CI95: rhw if math.isfinite(rhw) else float("nan"),
                Summary.STOP_EPOCHS: float(self.stats.n), Summary.STOP_TRUNCATED_EPOCHS: float(p.truncated),
                Summary.STOP_BATCHES: float(p.batches)}
