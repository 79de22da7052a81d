"""Epochs from evidence: early stopping on a run's curve, else learning-curve extrapolation with a range.

A run's curve is the per-epoch series that says whether training still improves: ``val_loss`` for a
supervised model (lower is better), the mean episodic return ``episode_reward`` for an RL model (higher is
better; negated here so that lower is better everywhere), else its training ``loss``.

1. **Early stopping** (:func:`early_stop_epoch`): an epoch *improves* when it lowers the best value so far by
   more than ``min_delta`` times the curve's scale (its range over the measured epochs, so one setting fits
   losses and returns of any unit). When ``patience`` epochs in a row do not improve, training would have
   stopped there: that epoch (epochs trained, patience included) is the estimate, basis ``early_stopping``.
2. **Extrapolation** (:func:`extrapolate`): otherwise three learning-curve families are fitted with
   :func:`scipy.optimize.curve_fit` (``x`` = epoch from 1):

   ====================  ===================================  =========================================
   ``exponential``       ``c + a exp(-b x)``                  a fast approach to a plateau
   ``power``             ``c + a x^-alpha``                   the slow tail of most loss curves
   ``log_power``         ``c + a / (1 + (x / x0)^alpha)``     a sigmoid in log x that saturates at c
   ====================  ===================================  =========================================

   Each family's *stop epoch* is the first epoch whose expected improvement ``f(e) - f(e+1)`` falls below
   ``threshold`` times the fitted total improvement ``f(1) - c``. The families are weighted by Akaike weights
   (``exp(-dAIC/2)``), and a residual block bootstrap refits them ``bootstrap`` times: the estimate is the
   median of the pooled stop epochs (each replicate drawing its family by weight), the range their 5th to
   95th percentiles. Several runs (seeds) pool their samples, so they widen the range.
3. **Refusals**: a curve that never improved on its first epoch (early stopping would fire at once), fewer
   than ``min_epochs`` finite points, a diverging curve (its last third worse than its first third, when early
   stopping did not fire), or no family that fits: the configured epochs are used and the basis says why.
   A curve that improved and then got worse (overfitting, common on market data) is early stopping's case.

No maintained offline package does this (``lcpfn`` needs torch and downloads its weights; ``learning-curves``
models accuracy against data size, unmaintained since 2019): the families and the bootstrap are written here
on scipy, following Domhan et al. (IJCAI 2015) for the family set.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from trainbench.core.vocab import Series

#: basis values (models.<m>.plan.epochs_basis)
EARLY_STOPPING = "early_stopping"
EXTRAPOLATED = "extrapolated"
CONFIGURED = "configured"


@dataclass(frozen=True)
class CurveRule:
    """The settings of the epochs estimate (``decision.curves.*``)."""

    patience: int = 10
    min_delta: float = 0.01
    min_epochs: int = 10
    threshold: float = 0.001
    max_epochs: int = 100_000
    bootstrap: int = 100
    block: int = 3
    seed: int = 0


@dataclass
class CurveEstimate:
    """One run's (or several runs') epochs estimate."""

    basis: str  # early_stopping | extrapolated | configured: <why>
    epochs: int | None
    epochs_range: list[int] | None
    samples: np.ndarray = field(default_factory=lambda: np.empty(0))
    curve: str | None = None
    families: dict[str, float] | None = None  # Akaike weight per family
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"basis": self.basis, "epochs": self.epochs, "epochs_range": self.epochs_range, "curve": self.curve,
                "families": self.families, "notes": self.notes}


def _exponential(x: np.ndarray, c: float, a: float, b: float) -> np.ndarray:
    return c + a * np.exp(-b * x)


def _power(x: np.ndarray, c: float, a: float, alpha: float) -> np.ndarray:
    return c + a * np.power(x, -alpha)


def _log_power(x: np.ndarray, c: float, a: float, x0: float, alpha: float) -> np.ndarray:
    return c + a / (1.0 + np.power(x / x0, alpha))


def _p0_bounds(name: str, x: np.ndarray, y: np.ndarray) -> tuple[list[float], tuple[list[float], list[float]]]:
    lo, hi = float(np.min(y)), float(np.max(y))
    span = max(hi - lo, 1e-12)
    n = float(x[-1])
    c_lo, c_hi = lo - 100 * span, hi
    if name == "exponential":
        return [lo, span, 3.0 / n], ([c_lo, 0.0, 1e-9], [c_hi, 1e3 * span, 50.0])
    if name == "power":
        return [lo - 0.1 * span, span, 0.5], ([c_lo, 0.0, 1e-3], [c_hi, 1e3 * span, 10.0])
    return [lo, 2 * span, max(1.0, n / 4), 1.0], ([c_lo, 0.0, 1e-3, 1e-2], [c_hi, 1e3 * span, 1e3 * n, 10.0])


FAMILIES: dict[str, Callable[..., np.ndarray]] = {"exponential": _exponential, "power": _power,
                                                   "log_power": _log_power}


def curve_of(series: dict[str, np.ndarray]) -> tuple[str, np.ndarray] | None:
    """(name, values with lower = better) of the curve a run's per-epoch series offers, or None."""
    for key, sign in ((Series.VAL_LOSS, 1.0), ("episode_reward", -1.0), (Series.LOSS, 1.0)):
        s = series.get(key)
        if s is not None and np.isfinite(np.asarray(s, float)).sum() > 0:
            return key, sign * np.asarray(s, float)
    return None


def _scale(y: np.ndarray) -> float:
    return float(np.max(y) - np.min(y))


def early_stop_epoch(y: Sequence[float], patience: int, min_delta: float) -> int | None:
    """Epochs trained when a patience rule with ``min_delta`` (a fraction of the curve's range) would have
    stopped (lower is better), or None when it would not have fired within the curve."""
    y = np.asarray(y, float)
    scale = _scale(y[np.isfinite(y)]) if np.isfinite(y).any() else 0.0
    best, wait = math.inf, 0
    for i, v in enumerate(y):
        if math.isfinite(v) and v < best - min_delta * scale:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= patience:
                return i + 1
    return None


def stop_epoch(f: Callable[[np.ndarray], np.ndarray], asymptote: float, threshold: float,
               max_epochs: int) -> int | None:
    """First epoch e >= 1 with f(e) - f(e+1) < threshold * (f(1) - asymptote), or None when the curve does
    not flatten that much before ``max_epochs``."""
    x = np.arange(1, max_epochs + 2, dtype=float)
    v = f(x)
    if not np.isfinite(v).all():
        return None
    total = float(v[0] - asymptote)
    if total <= 0:
        return 1
    drop = v[:-1] - v[1:]
    below = np.flatnonzero(drop < threshold * total)
    return int(below[0]) + 1 if below.size else None


def _fit(name: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    fn = FAMILIES[name]
    p0, bounds = _p0_bounds(name, x, y)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            p, _ = curve_fit(fn, x, y, p0=p0, bounds=bounds, maxfev=5000)
    except (RuntimeError, ValueError):
        return None
    sse = float(np.sum((fn(x, *p) - y) ** 2))
    return (p, sse) if math.isfinite(sse) else None


def _aic(sse: float, n: int, k: int) -> float:
    return n * math.log(max(sse, 1e-300) / n) + 2 * k


def diverging(y: np.ndarray) -> bool:
    """Lower is better: the last third's median is above the first third's by more than a tenth of the range."""
    n = y.size
    third = max(1, n // 3)
    return float(np.median(y[-third:]) - np.median(y[:third])) > 0.1 * max(_scale(y), 1e-12)


def extrapolate(y: Sequence[float], rule: CurveRule, rng: np.random.Generator) -> CurveEstimate:
    """Fit the families to one curve (lower is better) and bootstrap the stop epoch; refusals name why."""
    y = np.asarray(y, float)
    if not np.isfinite(y).all():
        return CurveEstimate(f"{CONFIGURED}: the curve holds non-finite values", None, None)
    if y.size < rule.min_epochs:
        return CurveEstimate(f"{CONFIGURED}: {y.size} epochs are too few to extrapolate (curves.min_epochs="
                             f"{rule.min_epochs})", None, None)
    if diverging(y):
        return CurveEstimate(f"{CONFIGURED}: the curve is diverging (its last third is worse than its first)",
                             None, None)
    x = np.arange(1, y.size + 1, dtype=float)
    fits = {name: r for name in FAMILIES if (r := _fit(name, x, y)) is not None}
    if not fits:
        return CurveEstimate(f"{CONFIGURED}: no learning-curve family fits the curve", None, None)
    aic = {k: _aic(sse, y.size, len(p)) for k, (p, sse) in fits.items()}
    best = min(aic.values())
    w = {k: math.exp(-(a - best) / 2) for k, a in aic.items()}
    tot = sum(w.values())
    weights = {k: v / tot for k, v in w.items()}
    names = list(weights)
    probs = np.array([weights[k] for k in names])
    fitted = {k: FAMILIES[k](x, *fits[k][0]) for k in names}
    resid = {k: y - fitted[k] for k in names}
    point_stops = {k: stop_epoch(lambda t, k=k: FAMILIES[k](t, *fits[k][0]), fits[k][0][0], rule.threshold,
                                 rule.max_epochs)
                   for k in names}
    samples = []
    nb = max(1, rule.block)
    for _ in range(rule.bootstrap):
        k = names[int(rng.choice(len(names), p=probs))]
        starts = rng.integers(0, max(1, y.size - nb + 1), size=-(-y.size // nb))
        idx = (starts[:, None] + np.arange(nb)[None, :]).ravel()[: y.size]
        yb = fitted[k] + resid[k][idx]
        r = _fit(k, x, yb)
        if r is None:
            continue
        s = stop_epoch(lambda t, k=k, p=r[0]: FAMILIES[k](t, *p), r[0][0], rule.threshold, rule.max_epochs)
        samples.append(rule.max_epochs if s is None else s)
    notes = []
    if not samples:
        s0 = [v for v in point_stops.values() if v is not None]
        if not s0:
            return CurveEstimate(f"{CONFIGURED}: the fitted curves do not flatten within curves.max_epochs="
                                 f"{rule.max_epochs}", None, None)
        samples = s0
    arr = np.asarray(samples, float)
    if np.mean(arr >= rule.max_epochs) > 0.5:
        return CurveEstimate(f"{CONFIGURED}: most fits still improve at curves.max_epochs={rule.max_epochs}",
                             None, None, curve=None, families=weights)
    if np.any(arr >= rule.max_epochs):
        notes.append(f"{int(np.sum(arr >= rule.max_epochs))} of {arr.size} bootstrap fits still improve at "
                     f"curves.max_epochs={rule.max_epochs} (counted there)")
    return CurveEstimate(EXTRAPOLATED, int(round(float(np.median(arr)))),
                         [int(np.floor(np.percentile(arr, 5))), int(np.ceil(np.percentile(arr, 95)))], arr,
                         families={k: round(v, 4) for k, v in weights.items()}, notes=notes)


def estimate_run(series: dict[str, np.ndarray], rule: CurveRule, rng: np.random.Generator) -> CurveEstimate:
    """One run's estimate: early stopping if it fires, else extrapolation, else a refusal."""
    c = curve_of(series)
    if c is None:
        return CurveEstimate(f"{CONFIGURED}: the run logs no val_loss, episode_reward or loss", None, None)
    name, y = c
    fired = early_stop_epoch(y, rule.patience, rule.min_delta)
    if fired is not None:
        if fired - rule.patience - 1 <= 0:  # the best value is the first: it never improved, no evidence
            return CurveEstimate(f"{CONFIGURED}: the curve is diverging or flat (it never improved on its first "
                                 "epoch)", None, None, curve=name)
        # a curve that improved and then got worse (overfitting) is where early stopping is meant to fire
        return CurveEstimate(EARLY_STOPPING, fired, [fired, fired], np.array([float(fired)]), curve=name)
    est = extrapolate(y, rule, rng)
    est.curve = name
    return est


def estimate_model(runs_series: list[dict[str, np.ndarray]], rule: CurveRule,
                   rng: np.random.Generator) -> CurveEstimate:
    """Pool the runs (seeds) of one model: the median of every run's samples, the range their 5-95th
    percentiles widened to cover every run's own estimate. The basis is extrapolated when any run
    extrapolated, early_stopping when all usable runs stopped early, else the first refusal."""
    per = [estimate_run(s, rule, rng) for s in runs_series]
    ok = [e for e in per if e.epochs is not None]
    if not ok:
        why = per[0].basis if per else f"{CONFIGURED}: no run to read a curve from"
        return CurveEstimate(why, None, None, curve=per[0].curve if per else None,
                             notes=[e.basis for e in per[1:] if e.basis != why])
    pooled = np.concatenate([e.samples for e in ok])
    los = [e.epochs_range[0] for e in ok] + [float(np.percentile(pooled, 5))]
    his = [e.epochs_range[1] for e in ok] + [float(np.percentile(pooled, 95))]
    basis = EXTRAPOLATED if any(e.basis == EXTRAPOLATED for e in ok) else EARLY_STOPPING
    notes = [n for e in ok for n in e.notes]
    refused = [e.basis for e in per if e.epochs is None]
    if refused:
        notes.append(f"{len(refused)} of {len(per)} runs gave no estimate ({refused[0]})")
    if len(ok) > 1:
        notes.append(f"{len(ok)} runs (seeds) pooled: " + ", ".join(str(e.epochs) for e in ok))
    fams = next((e.families for e in ok if e.families), None)
    return CurveEstimate(basis, int(round(float(np.median(pooled)))), [int(min(los)), int(math.ceil(max(his)))],
                         pooled, curve=ok[0].curve, families=fams, notes=notes)
