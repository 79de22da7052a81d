"""The measurement budget: when a run may stop before ``trainer.epochs`` (a maximum).

Checked by the harness between epochs, never inside one, on the measured epochs only (warmup excluded).
Each measured epoch's time (training pass plus validation pass, what the projection uses) is added to a
running mean and variance (Welford's algorithm: O(1) per epoch, numerically stable). The run stops:

- ``converged``: after at least ``min_epochs`` measured epochs, once the 95% t-interval of the mean,
  ``t(0.975, n-1) * s / sqrt(n)``, is within ``rel_ci`` of the mean;
- ``budget``: once ``budget_min`` minutes of the epoch loop (warmup included) have passed and at least one
  epoch was measured;
- otherwise at ``max_epochs`` (the reason is then ``max_epochs``), or on a failure (the outcome's name).

This is a simple stopping rule, not a statistical guarantee: it treats the epochs as independent, and
consecutive epoch times are often autocorrelated, so the interval is optimistic. The analysis computes
its own intervals from the recorded epochs; it treats these runs like any other and reports each run's
``stop_reason``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from trainbench.core.vocab import StopReason, Summary, names

STOP_REASONS = names(StopReason)


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
        """Half-width of the t-interval of the mean at ``level``, relative to the mean (inf when undefined)."""
        if self.n < 2 or self.mean <= 0:
            return math.inf
        t = float(stats.t.ppf(0.5 + level / 2, self.n - 1))
        return t * self.std / math.sqrt(self.n) / self.mean


class StopRule:
    """``add`` each measured epoch's time, then ask ``check`` between epochs."""

    def __init__(self, rel_ci: float = 0.0, min_epochs: int = 2, budget_min: float | None = None) -> None:
        self.rel_ci = float(rel_ci)
        self.min_epochs = max(2, int(min_epochs))
        self.budget_s = None if budget_min is None else float(budget_min) * 60.0
        self.stats = Welford()

    @classmethod
    def from_config(cls, stop: object | None) -> StopRule:
        if stop is None:
            return cls()
        return cls(getattr(stop, "rel_ci", 0.0), getattr(stop, "min_epochs", 2), getattr(stop, "budget_min", None))

    def add(self, epoch_ms: float) -> None:
        if math.isfinite(epoch_ms):
            self.stats.add(float(epoch_ms))

    def check(self, elapsed_s: float) -> str | None:
        """``converged``, ``budget`` or None (go on)."""
        if self.rel_ci > 0 and self.stats.n >= self.min_epochs and self.stats.rel_half_width() <= self.rel_ci:
            return StopReason.CONVERGED
        if self.budget_s is not None and self.stats.n >= 1 and elapsed_s >= self.budget_s:
            return StopReason.BUDGET
        return None

    def summary(self) -> dict[str, float]:
        """The rule's own figures at the end (logged with the run's summary)."""
        rhw = self.stats.rel_half_width()
        return {Summary.STOP_REL_CI95: rhw if math.isfinite(rhw) else float("nan"),
                Summary.STOP_EPOCHS: float(self.stats.n)}
