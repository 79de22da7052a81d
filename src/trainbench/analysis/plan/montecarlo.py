"""Hours as a distribution: Monte Carlo over the epoch time, the projection, the data scaling and the epochs.

A model's hours on an instance are ``epoch_ms x data_scale x epochs x batch_scale / 3.6e6`` (BRIEF's agreed
formula, docs/report-schema.md). Each factor is given either as samples or as a :class:`Quantity`
``(point, [low, high])`` with the probability ``coverage`` that the interval holds (0.9 for a 5-95% range,
0.95 for a 95% interval). A quantity is sampled from a *two-piece log-normal*: median ``point``, the lower
half's spread set so that ``low`` is its ``(1 - coverage)/2`` quantile, the upper half's so that ``high`` is
its ``(1 + coverage)/2`` quantile; an asymmetric range stays asymmetric, and nothing goes below zero. A
quantity whose low end is 0 uses a two-piece normal clipped at 0 instead; a point without a range is fixed.

:func:`total_hours` sums the models (one after another on one GPU, or ``gpus`` at a time: each model keeps
the GPU its median hours give it in a longest-first schedule, and the wall time of a draw is its busiest
GPU), and summarises: median, 90% interval, P(total < ``within``), P(total > ``over``), and the *dominant
source*: each source (epoch time, projection, epochs, data scaling, batch, the epochs' data exponent alpha)
is varied alone, the others at
their points, and the source whose alone-variance of log total hours is largest dominates (the shares are
reported too). Factors are drawn independently: one seed (``seed``) gives the same report for the same input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from scipy.stats import norm

from trainbench.analysis.report_types import Recommendation

MS_PER_HOUR = 3_600_000.0
#: The sources of uncertainty, in the order the report lists them, and the per-model factor each names.
SOURCES = {"epoch time": "epoch_ms", "projection": "projection", "epochs": "epochs", "data scaling": "data_scale",
           "batch": "batch_scale", "epochs' data exponent (alpha)": "data_alpha"}


@dataclass(frozen=True)
class Quantity:
    """A factor as (point, [low, high]) with the probability ``coverage`` that [low, high] holds it."""

    point: float
    low: float | None = None
    high: float | None = None
    coverage: float = 0.9

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        lo = self.point if self.low is None else min(self.low, self.point)
        hi = self.point if self.high is None else max(self.high, self.point)
        if lo == hi == self.point:
            return np.full(n, float(self.point))
        z = norm.ppf((1 + self.coverage) / 2)
        u = rng.standard_normal(n)
        if lo > 0 and self.point > 0:
            s_lo, s_hi = math.log(self.point / lo) / z, math.log(hi / self.point) / z
            return self.point * np.exp(np.where(u < 0, s_lo, s_hi) * u)
        s_lo, s_hi = (self.point - lo) / z, (hi - self.point) / z
        return np.maximum(0.0, self.point + np.where(u < 0, s_lo, s_hi) * u)


@dataclass(frozen=True)
class AlphaFactor:
    """The epochs' conversion to the planned data, ``scale^(alpha - 1)`` (analysis/plan/plan.py): alpha from its
    fitted point and 5-95% range (a two-piece normal, clipped to [0, 1]) or, without a point (no evidence),
    uniform on [low, high]."""

    scale: float
    alpha: float | None
    low: float
    high: float

    def point(self) -> float:
        a = (self.low + self.high) / 2 if self.alpha is None else self.alpha
        return float(self.scale ** (a - 1.0))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.alpha is None:
            a = rng.uniform(self.low, self.high, n)
        else:
            a = np.clip(Quantity(self.alpha, self.low, self.high, 0.9).sample(n, rng), 0.0, 1.0)
        return np.power(self.scale, a - 1.0)


Factor = float | Quantity | AlphaFactor | Sequence[float] | np.ndarray


def _point(f: Factor) -> float:
    if isinstance(f, Quantity):
        return float(f.point)
    if isinstance(f, AlphaFactor):
        return f.point()
    if isinstance(f, int | float):
        return float(f)
    return float(np.median(np.asarray(f, float)))


def _draw(f: Factor, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(f, Quantity | AlphaFactor):
        return f.sample(n, rng)
    if isinstance(f, int | float):
        return np.full(n, float(f))
    arr = np.asarray(f, float)
    return arr if arr.size == n else rng.choice(arr, size=n, replace=True)


def _assign(medians: list[float], gpus: int) -> list[int]:
    """Longest-first schedule of models onto ``gpus`` GPUs by their median hours: the GPU of each model."""
    load = [0.0] * gpus
    where = [0] * len(medians)
    for i in sorted(range(len(medians)), key=lambda i: -medians[i]):
        g = min(range(gpus), key=lambda g: load[g])
        where[i] = g
        load[g] += medians[i]
    return where


def _wall(per_model: np.ndarray, where: list[int], gpus: int) -> np.ndarray:
    if gpus <= 1:
        return per_model.sum(axis=0)
    bins = np.zeros((gpus, per_model.shape[1]))
    for i, g in enumerate(where):
        bins[g] += per_model[i]
    return bins.max(axis=0)


def _hours(models: Mapping[str, ModelFactors], n: int, rng: np.random.Generator,
           vary: set[str] | None) -> np.ndarray:
    rows = []
    for m in models.values():
        h = np.full(n, 1.0 / MS_PER_HOUR)
        for key in SOURCES.values():
            f = m.get(key, 1.0)
            h = h * (_draw(f, n, rng) if vary is None or key in vary else _point(f))
        rows.append(h)
    return np.vstack(rows) if rows else np.zeros((0, n))


class ModelFactors(TypedDict, total=False):
    """One model's factors in the total (the values of :data:`SOURCES`): each a number, a :class:`Quantity`, an
    :class:`AlphaFactor` or samples; a missing factor is 1."""

    epoch_ms: Factor
    projection: Factor
    epochs: Factor
    data_scale: Factor
    batch_scale: Factor


class TotalHours(TypedDict):
    """:func:`total_hours`' answer: the samples of the total, its median and 90% interval, P(total < within) and
    P(total > over) (None without a model), the thresholds, and the source whose variation alone moves the log
    total most with every source's share of those variances."""

    samples: np.ndarray
    median: float | None
    interval90: list[float] | None
    p_within: float | None
    p_over: float | None
    within: float
    over: float
    dominant: str | None
    shares: dict[str, float]


def total_hours(models: Mapping[str, ModelFactors], *, gpus: int = 1, within: float = 24.0,
                over: float = 48.0, samples: int = 20_000, seed: int = 0) -> TotalHours:
    """Total hours of the models: their samples and the summary.

    ``models``: {name: {"epoch_ms": F, "data_scale": F, "epochs": F, "projection": F, "batch_scale": F}}, each
    F a number, a :class:`Quantity` or samples (missing factors are 1). Returns ``{"samples": ndarray,
    "median", "interval90": [p5, p95], "p_within": P(total < within), "p_over": P(total > over), "within",
    "over", "dominant": source name or None, "shares": {source: share of the alone-variances}}``.
    """
    rng = np.random.default_rng(seed)
    if not models:
        return {"samples": np.empty(0), "median": None, "interval90": None, "p_within": None, "p_over": None,
                "within": within, "over": over, "dominant": None, "shares": {}}
    per = _hours(models, samples, rng, None)
    medians = [float(np.median(r)) for r in per]
    where = _assign(medians, gpus)
    tot = _wall(per, where, gpus)
    alone = {}
    for src, key in SOURCES.items():
        if not any(not isinstance(m.get(key, 1.0), int | float) for m in models.values()):
            continue
        t = _wall(_hours(models, samples, rng, {key}), where, gpus)
        alone[src] = float(np.var(np.log(np.maximum(t, 1e-300))))
    total_var = sum(alone.values())
    shares = {k: (v / total_var if total_var > 0 else 0.0) for k, v in alone.items()}
    dominant = max(shares, key=lambda k: shares[k]) if total_var > 0 else None
    return {"samples": tot, "median": float(np.median(tot)),
            "interval90": [float(np.percentile(tot, 5)), float(np.percentile(tot, 95))],
            "p_within": float(np.mean(tot < within)), "p_over": float(np.mean(tot > over)),
            "within": within, "over": over, "dominant": dominant,
            "shares": {k: round(v, 4) for k, v in shares.items()}}


def recommend(summary: TotalHours, p_local: float, p_cloud: float) -> Recommendation:
    """From the probabilities: ``local_gpu`` when P(total < within) >= ``p_local``; ``cloud`` when
    P(total > over) >= ``p_cloud``; else ``user_choice``; ``insufficient_data`` without a total."""
    if summary.get("p_within") is None:
        return Recommendation.INSUFFICIENT_DATA
    if summary["p_within"] >= p_local:
        return Recommendation.LOCAL_GPU
    if summary["p_over"] >= p_cloud:
        return Recommendation.CLOUD
    return Recommendation.USER_CHOICE
