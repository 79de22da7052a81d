"""Epochs from evidence: early stopping on a run's curve, else learning-curve extrapolation with a range.

A run's curve is the per-epoch series that says whether training still improves: ``val_loss`` for a
supervised model (lower is better), the mean episodic return ``episode_reward`` for an RL model (higher is
better; negated here so that lower is better everywhere), else its training ``loss``.

1. **Early stopping** (:func:`early_stop`), judged against the curve's own noise so that noise cannot
   trigger it. The noise ``sigma`` is estimated from the curve (the robust scale of its first differences,
   ``1.4826 MAD / sqrt 2``: a slow trend does not inflate it); the curve is smoothed by a centred moving mean
   of ``w`` epochs (``w`` grows with the curve: about a twentieth of it, at least 3). An epoch *improves*
   when its smoothed value beats the best so far by more than ``tol = max(min_delta x range,
   noise_z x sigma / sqrt w)``. Training would stop after ``patience`` epochs without an improvement, the
   patience growing with the curve (``max(patience, patience_growth x best epoch)``), and only where the rest
   of the curve never improves on that best again (a curve still improving on trend never stops early). It
   needs ``min_epochs_stop`` epochs and the whole patience window observed after the best; else the curve
   is extrapolated (or refused). The estimate is the best epoch plus the patience; its range runs from the
   first to the last epoch as good as the best (within ``tol``) plus the patience: a flat minimum gives a
   wide range, a sharp one a narrow range.
2. **Extrapolation** (:func:`extrapolate`): otherwise three learning-curve families are fitted with
   :func:`scipy.optimize.curve_fit` (``x`` = epoch from 1):

   ====================  ===================================  =========================================
   ``exponential``       ``c + a exp(-b x)``                  a fast approach to a plateau
   ``power``             ``c + a x^-alpha``                   the slow tail of most loss curves
   ``log_power``         ``c + a / (1 + (x / x0)^alpha)``     a sigmoid in log x that saturates at c
   ====================  ===================================  =========================================

   Each family's *stop epoch* is the first epoch whose expected improvement ``f(e) - f(e+1)`` falls below
   ``threshold`` times the fitted total improvement ``f(1) - c``. The families are weighted by Akaike weights
   (``exp(-dAIC/2)``). The range is a *parametric* bootstrap: ``bootstrap`` parameter vectors are drawn
   (each draw's family by its weight) from the normal law of the fit's covariance, inflated by
   ``(1 + rho) / (1 - rho)`` for residuals with lag-one autocorrelation ``rho`` > 0 (fewer independent
   points), without refitting; the estimate is the median of the draws' stop epochs, the range their 5th to
   95th percentiles. One fit per family and run (not one per bootstrap sample) keeps a sweep of hundreds of
   runs analysed in seconds.
3. **Several runs (seeds)** of one model pool their samples with equal weight: the estimate is their
   median, the range their 5th-95th percentiles, so seeds that disagree widen it and seeds that agree keep
   it as narrow as their evidence.
4. **Labels and refusals.** A curve whose smoothed value climbs after its best above its own starting value
   (by more than ``tol``) is labelled, whatever estimate is kept, *overfits after epoch k* (k: its best epoch)
   where it is the validation loss and the training loss fell meanwhile (by more than its own tolerance), else
   *worse than its start after epoch k* (a run whose loss went non-finite is the harness's ``diverged``
   outcome, not a label of the plan).
   Refused, with the reason (the configured epochs are then used): a curve that never improved on its first
   epochs, fewer than ``min_epochs`` finite points, a diverging curve (its last third worse than its first
   third, when early stopping did not apply), no family that fits, or fits that do not flatten.

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

#: the convexity (t statistic, :func:`flattening`) a curve needs before its plateau is extrapolated
FLATTENING_T = 3.0

#: basis values (models.<m>.plan.epochs_basis)
EARLY_STOPPING = "early_stopping"
EXTRAPOLATED = "extrapolated"
CONFIGURED = "configured"
#: how a curve that climbed above its start after its best epoch got worse (``CurveEstimate.worsened``)
OVERFITTING = "overfitting"  # its val_loss climbed while its training loss fell
WORSENING = "worsening"  # anything else: a training loss, a validation loss with a flat training loss, a return


@dataclass(frozen=True)
class CurveRule:
    """The settings of the epochs estimate (``decision.curves.*``)."""

    patience: int = 10
    min_delta: float = 0.01
    min_epochs: int = 10
    threshold: float = 0.001
    max_epochs: int = 100_000
    bootstrap: int = 200
    seed: int = 0
    patience_growth: float = 0.1
    noise_z: float = 3.0
    min_epochs_stop: int = 20


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
    diverged_after: int | None = None  # the best epoch of a curve that then climbed above its start
    #: how it got worse: ``overfitting`` (its val_loss climbed while its training loss fell) or ``worsening``
    worsened: str | None = None
    labels: list[str] = field(default_factory=list)  # what the plan entry says about the curve

    def as_dict(self) -> dict[str, Any]:
        return {"basis": self.basis, "epochs": self.epochs, "epochs_range": self.epochs_range, "curve": self.curve,
                "families": self.families, "notes": self.notes, "diverged_after": self.diverged_after,
                "worsened": self.worsened, "labels": self.labels}


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


def _jac_exponential(x: np.ndarray, c: float, a: float, b: float) -> np.ndarray:
    e = np.exp(-b * x)
    return np.column_stack([np.ones_like(x), e, -a * x * e])


def _jac_power(x: np.ndarray, c: float, a: float, alpha: float) -> np.ndarray:
    p = np.power(x, -alpha)
    return np.column_stack([np.ones_like(x), p, -a * p * np.log(x)])


def _jac_log_power(x: np.ndarray, c: float, a: float, x0: float, alpha: float) -> np.ndarray:
    u = np.power(x / x0, alpha)
    g = -a / (1.0 + u) ** 2
    return np.column_stack([np.ones_like(x), 1.0 / (1.0 + u), g * (-alpha * u / x0), g * u * np.log(x / x0)])


#: analytic Jacobians: curve_fit converges in a few evaluations instead of finite differences
JACOBIANS: dict[str, Callable[..., np.ndarray]] = {"exponential": _jac_exponential, "power": _jac_power,
                                                   "log_power": _jac_log_power}


def curve_of(series: dict[str, np.ndarray]) -> tuple[str, np.ndarray] | None:
    """(name, values with lower = better) of the curve a run's per-epoch series offers, or None."""
    for key, sign in ((Series.VAL_LOSS, 1.0), ("episode_reward", -1.0), (Series.LOSS, 1.0)):
        s = series.get(key)
        if s is not None and np.isfinite(np.asarray(s, float)).sum() > 0:
            return key, sign * np.asarray(s, float)
    return None


def _scale(y: np.ndarray) -> float:
    return float(np.max(y) - np.min(y))


def noise_sigma(y: np.ndarray) -> float:
    """The per-epoch noise of a curve: the robust scale of its first differences over sqrt 2 (a trend that
    changes slowly shifts the differences' median, not their spread)."""
    d = np.diff(np.asarray(y, float))
    d = d[np.isfinite(d)]
    if d.size < 2:
        return 0.0
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def smooth_width(n: int) -> int:
    """The moving mean's width for an n-epoch curve: about n / 20, odd, at least 3 (1 below 10 epochs)."""
    if n < 10:
        return 1
    return max(3, 2 * (n // 40) + 1)


def smoothed(y: np.ndarray, w: int) -> np.ndarray:
    """Centred moving mean of width ``w`` (the window shrinks at the ends)."""
    y = np.asarray(y, float)
    if w <= 1 or y.size < 2:
        return y.copy()
    h = w // 2
    c = np.r_[0.0, np.cumsum(y)]
    i = np.arange(y.size)
    lo, hi = np.maximum(0, i - h), np.minimum(y.size, i + h + 1)
    return (c[hi] - c[lo]) / (hi - lo)


@dataclass(frozen=True)
class EarlyStop:
    """Where a patience rule on the smoothed curve would stop (epochs counted from 1)."""

    epoch: int  # epochs trained: the best epoch plus the patience
    best: int  # the best epoch
    low: int  # the first epoch as good as the best (within tol), plus the patience
    high: int  # the last epoch before the stop as good as the best, plus the patience
    patience: int
    tol: float


def tolerance(y: np.ndarray, min_delta: float, noise_z: float) -> tuple[np.ndarray, float]:
    """(smoothed curve, the improvement it must show to count)."""
    w = smooth_width(y.size)
    tol = max(min_delta * _scale(y), noise_z * noise_sigma(y) / math.sqrt(w))
    return smoothed(y, w), tol


def early_stop(y: Sequence[float], rule: CurveRule) -> EarlyStop | None:
    """The early stop of a finite curve (lower is better), or None when none applies within it: the patience
    never ran out after an improvement, or the curve improved again later (still improving on trend)."""
    y = np.asarray(y, float)
    s, tol = tolerance(y, rule.min_delta, rule.noise_z)
    best, best_i, wait, fired = math.inf, -1, 0, None
    for i, v in enumerate(s):
        if v < best - tol:
            best, best_i, wait, fired = float(v), i, 0, None  # improved: an earlier stop was premature
        else:
            wait += 1
            pat = max(rule.patience, math.ceil(rule.patience_growth * (best_i + 1)))
            if fired is None and wait >= pat:
                fired = (best_i, pat)
    if fired is None:
        return None
    b, pat = fired
    near = np.flatnonzero(s[: b + pat + 1] <= s[b] + tol)
    return EarlyStop(b + 1 + pat, b + 1, int(near[0]) + 1 + pat, int(near[-1]) + 1 + pat, pat, tol)


@dataclass(frozen=True)
class Best:
    """Where a curve is best (epochs counted from 1): its smoothed minimum and the epochs as good within the
    curve's noise (``low`` to ``high``), robust to one noisy epoch."""

    epoch: int
    low: int
    high: int


def best_epoch(y: Sequence[float], rule: CurveRule) -> Best | None:
    """The epoch where a finite curve (lower is better) is best: the minimum of the curve smoothed over its noise
    (:func:`tolerance`), with the range of epochs whose smoothed value is within the tolerance of it. None where
    the minimum is not seen as one: it lies within the patience of the curve's end (the curve may still
    improve after it), or at its first epoch (it never improved)."""
    y = np.asarray(y, float)
    if y.size < 3 or not np.isfinite(y).all():
        return None
    s, tol = tolerance(y, rule.min_delta, rule.noise_z)
    b = int(np.argmin(s))
    if b == 0 or b >= y.size - rule.patience:
        return None
    near = np.flatnonzero(s <= s[b] + tol)
    return Best(b + 1, int(near[0]) + 1, int(near[-1]) + 1)


def patience_at(best: float, rule: CurveRule) -> int:
    """The patience early stopping waits after a best epoch ``best`` (it grows with it: :func:`early_stop`)."""
    return max(rule.patience, math.ceil(rule.patience_growth * best))


def early_stop_epoch(y: Sequence[float], patience: int, min_delta: float, noise_z: float = 0.0,
                     patience_growth: float = 0.0) -> int | None:
    """Epochs trained when the rule would stop (see :func:`early_stop`), or None."""
    y = np.asarray(y, float)
    e = early_stop(y, CurveRule(patience=patience, min_delta=min_delta, noise_z=noise_z,
                                patience_growth=patience_growth))
    return None if e is None else e.epoch


def diverged_after(y: np.ndarray, rule: CurveRule) -> int | None:
    """The best epoch of a curve whose smoothed value later climbs above its starting value by more than the
    improvement tolerance (lower is better), else None."""
    y = np.asarray(y, float)
    if y.size < 3:
        return None
    s, tol = tolerance(y, rule.min_delta, rule.noise_z)
    b = int(np.argmin(s))
    return b + 1 if float(np.max(s[b:])) > s[0] + tol else None


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


def stop_epochs(fn: Callable[..., np.ndarray], params: np.ndarray, threshold: float, max_epochs: int) -> np.ndarray:
    """:func:`stop_epoch` for many parameter vectors at once (rows of ``params``, the asymptote first): the
    first crossing on a geometric grid of epochs, then refined to the epoch by bisection. ``max_epochs`` where
    a curve does not flatten (or is not finite) within ``max_epochs``; 1 where it never improves."""
    p = np.atleast_2d(np.asarray(params, float))
    cols = [p[:, j:j + 1] for j in range(p.shape[1])]
    grid = np.unique(np.round(np.geomspace(1, max_epochs, 400))).astype(float)
    with np.errstate(all="ignore"):
        total = fn(np.ones((1, 1)), *cols)[:, 0] - p[:, 0]

        def drop(e: np.ndarray) -> np.ndarray:
            return fn(e, *cols) - fn(e + 1, *cols)

        d = drop(grid[None, :])
        below = d < threshold * total[:, None]
        bad = ~np.isfinite(d).all(axis=1) | ~np.isfinite(total)
        any_below = below.any(axis=1)
        j = np.argmax(below, axis=1)
        out = np.full(p.shape[0], float(max_epochs))
        hi = grid[j]
        lo = np.where(j > 0, grid[np.maximum(j - 1, 0)], 0.0)
        while np.any(hi - lo > 1):
            mid = np.floor((lo + hi) / 2)
            vals = (fn(mid[:, None], *cols) - fn(mid[:, None] + 1, *cols))[:, 0]
            ok = vals < threshold * total
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        out[any_below] = hi[any_below]
    out[total <= 0] = 1.0
    out[bad] = float(max_epochs)
    return out


def _grid(name: str, n: float) -> list[np.ndarray]:
    """The nonlinear parameters' grid the profile fit scans (the linear c, a are solved at each point)."""
    if name == "exponential":
        return [np.geomspace(0.01 / n, 10.0, 60)]
    if name == "power":
        return [np.geomspace(1e-3, 10.0, 60)]
    x0, al = np.meshgrid(np.geomspace(0.1, 100.0 * n, 20), np.geomspace(0.05, 10.0, 12), indexing="ij")
    return [x0.ravel(), al.ravel()]


def _basis(name: str, x: np.ndarray, g: list[np.ndarray]) -> np.ndarray:
    """phi(x) per grid point (rows): f = c + a phi."""
    X = x[None, :]
    with np.errstate(all="ignore"):
        if name == "exponential":
            return np.exp(-g[0][:, None] * X)
        if name == "power":
            return np.power(X, -g[0][:, None])
        return 1.0 / (1.0 + np.power(X / g[0][:, None], g[1][:, None]))


def _profile(name: str, x: np.ndarray, y: np.ndarray, bounds: tuple[list[float], list[float]]) -> np.ndarray | None:
    """The grid point with the least squares (c and a solved exactly there, within their bounds)."""
    g = _grid(name, float(x[-1]))
    phi = _basis(name, x, g)
    pm, ym = phi.mean(axis=1), y.mean()
    dp = phi - pm[:, None]
    var = np.einsum("ij,ij->i", dp, dp)
    with np.errstate(all="ignore"):
        a = np.where(var > 0, dp @ (y - ym) / var, np.nan)
        c = ym - a * pm
        sse = np.sum((c[:, None] + a[:, None] * phi - y[None, :]) ** 2, axis=1)
    (lo, hi) = bounds
    ok = np.isfinite(sse) & (a >= lo[1]) & (a <= hi[1]) & (c >= lo[0]) & (c <= hi[0])
    if not ok.any():
        return None
    i = int(np.argmin(np.where(ok, sse, np.inf)))
    return np.array([c[i], a[i], *(v[i] for v in g)])


def _fit(name: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray] | None:
    """(parameters, SSE, covariance) of one family: the profile over a grid of its nonlinear parameters
    (the linear ones solved exactly), polished by :func:`curve_fit` with the analytic Jacobian. The
    covariance is ``s^2 (J'J)^+`` at the optimum (``s^2`` = SSE / (n - k))."""
    fn = FAMILIES[name]
    _, bounds = _p0_bounds(name, x, y)
    p = _profile(name, x, y, bounds)
    if p is None:
        return None
    p = np.clip(p, bounds[0], bounds[1])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            q, _ = curve_fit(fn, x, y, p0=p, bounds=bounds, jac=JACOBIANS[name], max_nfev=100)
        if np.sum((fn(x, *q) - y) ** 2) <= np.sum((fn(x, *p) - y) ** 2):
            p = q
    except (RuntimeError, ValueError):
        pass  # the grid's optimum stands
    with np.errstate(all="ignore"):
        sse = float(np.sum((fn(x, *p) - y) ** 2))
        J = JACOBIANS[name](x, *p)
    if not math.isfinite(sse) or not np.isfinite(J).all():
        return None
    dof = max(1, y.size - p.size)
    cov = np.linalg.pinv(J.T @ J) * (sse / dof)
    return p, sse, cov


def _aic(sse: float, n: int, k: int) -> float:
    return n * math.log(max(sse, 1e-300) / n) + 2 * k


def diverging(y: np.ndarray) -> bool:
    """Lower is better: the last third's median is above the first third's by more than a tenth of the range."""
    n = y.size
    third = max(1, n // 3)
    return float(np.median(y[-third:]) - np.median(y[:third])) > 0.1 * max(_scale(y), 1e-12)


def _lag1(r: np.ndarray) -> float:
    r = r - r.mean()
    den = float(np.dot(r, r))
    return float(np.dot(r[:-1], r[1:]) / den) if den > 0 and r.size > 2 else 0.0


def _draws(name: str, p: np.ndarray, cov: np.ndarray, inflate: float, n: int, x: np.ndarray, y: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:
    """``n`` parameter vectors from the fit's normal law (covariance x ``inflate``), kept within the bounds."""
    if n <= 0:
        return np.empty((0, p.size))
    _, (lo, hi) = _p0_bounds(name, x, y)
    if not np.isfinite(cov).all():  # undetermined parameters: no range from this fit
        return np.full((n, p.size), np.nan)
    cov = (cov + cov.T) / 2 * inflate
    w, v = np.linalg.eigh(cov)
    z = rng.standard_normal((n, p.size)) * np.sqrt(np.clip(w, 0.0, None))
    return np.clip(p + z @ v.T, lo, hi)


def flattening(y: np.ndarray) -> float:
    """The t statistic of the curve's convexity (lower is better: a flattening curve is convex): the quadratic
    term of a least-squares parabola over its standard error, the residuals' lag-one autocorrelation taken
    into account. Small: the curve improves at a steady rate, and no plateau can be read off it."""
    t = np.linspace(0.0, 1.0, y.size)
    X = np.column_stack([np.ones_like(t), t, t * t])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ beta
    s2 = float(r @ r) / max(1, y.size - 3)
    rho = _lag1(r)
    s2 *= min(10.0, (1 + rho) / (1 - rho)) if rho > 0 else 1.0
    var = np.linalg.pinv(X.T @ X)[2, 2] * s2
    return float(beta[2] / math.sqrt(var)) if var > 0 else (math.inf if beta[2] > 0 else 0.0)


def extrapolate(y: Sequence[float], rule: CurveRule, rng: np.random.Generator) -> CurveEstimate:
    """Fit the families to one curve (lower is better) and draw the stop epoch's range from the fits'
    covariance (no refits); refusals name why."""
    y = np.asarray(y, float)
    if not np.isfinite(y).all():
        return CurveEstimate(f"{CONFIGURED}: the curve holds non-finite values", None, None)
    if y.size < rule.min_epochs:
        return CurveEstimate(f"{CONFIGURED}: {y.size} epochs are too few to extrapolate (curves.min_epochs="
                             f"{rule.min_epochs})", None, None)
    if diverging(y):
        return CurveEstimate(f"{CONFIGURED}: the curve is getting worse (its last third is worse than its first)",
                             None, None)
    if (t := flattening(y)) < FLATTENING_T:
        return CurveEstimate(f"{CONFIGURED}: no flattening can be read off the curve's {y.size} epochs (a "
                             f"parabola's curvature is {t:.1f} standard errors, under {FLATTENING_T:g}: it improves "
                             "at a steady rate or is noise); train longer to see where it levels off", None, None)
    x = np.arange(1, y.size + 1, dtype=float)
    fits = {name: r for name in FAMILIES if (r := _fit(name, x, y)) is not None}
    if not fits:
        return CurveEstimate(f"{CONFIGURED}: no learning-curve family fits the curve", None, None)
    aic = {k: _aic(sse, y.size, len(p)) for k, (p, sse, _) in fits.items()}
    best = min(aic.values())
    w = {k: math.exp(-(a - best) / 2) for k, a in aic.items()}
    tot = sum(w.values())
    weights = {k: v / tot for k, v in w.items()}
    names = list(weights)
    top = min(aic, key=aic.get)
    rho = _lag1(y - FAMILIES[top](x, *fits[top][0]))
    inflate = min(10.0, (1 + rho) / (1 - rho)) if rho > 0 else 1.0
    counts = rng.multinomial(rule.bootstrap, [weights[k] for k in names])
    samples = []
    for k, n in zip(names, counts, strict=True):
        if n == 0:
            continue
        p, _, cov = fits[k]
        draws = _draws(k, p, cov, inflate, int(n), x, y, rng)
        s = stop_epochs(FAMILIES[k], draws, rule.threshold, rule.max_epochs)
        floor = _p0_bounds(k, x, y)[1][0][0]
        s[draws[:, 0] <= floor + 1e-6 * max(_scale(y), 1e-12)] = rule.max_epochs  # asymptote not identified
        samples.append(s)
    arr = np.concatenate(samples) if samples else np.empty(0)
    arr = np.minimum(arr, rule.max_epochs)
    if not arr.size:
        return CurveEstimate(f"{CONFIGURED}: no learning-curve family fits the curve", None, None)
    notes = []
    if np.mean(arr >= rule.max_epochs) > 0.5:
        return CurveEstimate(f"{CONFIGURED}: most fits still improve at curves.max_epochs={rule.max_epochs}",
                             None, None, curve=None, families=weights)
    if np.any(arr >= rule.max_epochs):
        notes.append(f"{int(np.sum(arr >= rule.max_epochs))} of {arr.size} parameter draws still improve at "
                     f"curves.max_epochs={rule.max_epochs} (counted there)")
    return CurveEstimate(EXTRAPOLATED, int(round(float(np.median(arr)))),
                         [int(np.floor(np.percentile(arr, 5))), int(np.ceil(np.percentile(arr, 95)))], arr,
                         families={k: round(v, 4) for k, v in weights.items()}, notes=notes)


def estimate_run(series: dict[str, np.ndarray], rule: CurveRule, rng: np.random.Generator) -> CurveEstimate:
    """One run's estimate: early stopping if it applies, else extrapolation, else a refusal; labelled when the
    curve got worse than its start (overfitting or worsening) or was too short for early stopping."""
    c = curve_of(series)
    if c is None:
        return CurveEstimate(f"{CONFIGURED}: the run logs no val_loss, episode_reward or loss", None, None)
    name, y = c
    finite = y[np.isfinite(y)]
    labels = []
    div = diverged_after(finite, rule)
    worsened = None
    if div is not None:
        worsened, label = _worsening(name, series, rule, div)
        labels.append(label)
    est = None
    stop = early_stop(finite, rule) if finite.size == y.size else None
    if stop is not None and stop.best <= 1:  # the best value is the first: it never improved, no evidence
        est = CurveEstimate(f"{CONFIGURED}: the curve never improved on its first epochs (getting worse or flat)",
                            None, None)
    elif stop is not None and y.size < rule.min_epochs_stop:
        labels.append(f"too short for early stopping: {y.size} epochs < curves.min_epochs_stop="
                      f"{rule.min_epochs_stop} (its patience ran out at epoch {stop.epoch}); extrapolated instead")
    elif stop is not None:
        lo, hi = min(stop.low, stop.epoch), max(stop.high, stop.epoch)
        samples = rng.integers(lo, hi + 1, size=max(1, rule.bootstrap)).astype(float)
        est = CurveEstimate(EARLY_STOPPING, stop.epoch, [lo, hi], samples,
                            notes=[f"best epoch {stop.best}, patience {stop.patience}, an improvement counted "
                                   f"above {stop.tol:.3g} (the curve's noise)"])
    if est is None:
        est = extrapolate(y, rule, rng)
    est.curve, est.diverged_after, est.worsened = name, div, worsened
    est.labels = labels + est.labels
    return est


def _worsening(name: str, series: dict[str, np.ndarray], rule: CurveRule, best: int) -> tuple[str, str]:
    """(kind, label) of a curve that climbed above its start after epoch ``best``: ``overfitting`` where it is
    the validation loss and the training loss fell meanwhile (by more than its own noise), else ``worsening``
    (a training loss or a return that got worse: the run's outcome says whether anything went non-finite)."""
    if name == Series.VAL_LOSS:
        train = np.asarray(series.get(Series.LOSS, []), float)
        train = train[np.isfinite(train)]
        if train.size >= 3:
            s, tol = tolerance(train, rule.min_delta, rule.noise_z)
            if float(s[0]) - float(s[-1]) > max(tol, 1e-9 * abs(float(s[0]))):  # beyond rounding when noiseless
                return OVERFITTING, (f"overfits after epoch {best}: its {name} climbed above its starting value "
                                     f"while its training loss fell ({train[0]:.4g} -> {train[-1]:.4g})")
    moved = "fell below" if name == "episode_reward" else "climbed above"
    return WORSENING, f"worse than its start after epoch {best}: its {name} {moved} its starting value"


def estimate_model(runs_series: list[dict[str, np.ndarray]], rule: CurveRule,
                   rng: np.random.Generator) -> CurveEstimate:
    """Pool the runs (seeds) of one model, each with the same weight: the median of their samples, the range
    their 5-95th percentiles. The basis is extrapolated when any run extrapolated, early_stopping when all
    usable runs stopped early, else the first refusal. Labels (diverged, too short) are kept per run."""
    per = [estimate_run(s, rule, rng) for s in runs_series]
    ok = [e for e in per if e.epochs is not None]
    labels = [f"run {i + 1}: {lab}" if len(per) > 1 else lab for i, e in enumerate(per) for lab in e.labels]
    divs = [e.diverged_after for e in per if e.diverged_after is not None]
    div = min(divs) if divs else None
    kinds = {e.worsened for e in per if e.worsened is not None}
    worsened = None if not kinds else OVERFITTING if kinds == {OVERFITTING} else WORSENING
    if not ok:
        why = per[0].basis if per else f"{CONFIGURED}: no run to read a curve from"
        return CurveEstimate(why, None, None, curve=per[0].curve if per else None,
                             notes=[e.basis for e in per[1:] if e.basis != why], diverged_after=div,
                             worsened=worsened, labels=labels)
    m = max(e.samples.size for e in ok)
    pooled = np.concatenate([rng.choice(e.samples, m) if e.samples.size != m else e.samples for e in ok])
    basis = EXTRAPOLATED if any(e.basis == EXTRAPOLATED for e in ok) else EARLY_STOPPING
    notes = [n for e in ok for n in e.notes]
    refused = [e.basis for e in per if e.epochs is None]
    if refused:
        notes.append(f"{len(refused)} of {len(per)} runs gave no estimate ({refused[0]})")
    if len(ok) > 1:
        notes.append(f"{len(ok)} runs (seeds) pooled: " + ", ".join(str(e.epochs) for e in ok))
        rng_ = [int(np.floor(np.percentile(pooled, 5))), int(np.ceil(np.percentile(pooled, 95)))]
    else:
        rng_ = list(ok[0].epochs_range)
    fams = next((e.families for e in ok if e.families), None)
    return CurveEstimate(basis, int(round(float(np.median(pooled)))), rng_, pooled, curve=ok[0].curve,
                         families=fams, notes=notes, diverged_after=div, worsened=worsened, labels=labels)
