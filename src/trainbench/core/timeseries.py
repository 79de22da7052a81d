"""Means of autocorrelated series (epoch times in order), shared by the stop rule and the analysis.

Numpy only at import (no torch, no MLflow, no scipy.stats or statsmodels: every training process imports this
module, and statsmodels' ``acf`` with the pandas and SciPy it imports cost about 0.8 CPU-s of a run's start on a
2-core CPU; :func:`t_quantile` loads scipy.special when called), so that both the training harness
(``trainbench.measure.stoprule``) and the analysis (``trainbench.analysis.statistics.stats``) use one definition:

* :func:`autocorrelation`: lag-one autocorrelation and the integrated autocorrelation time tau (Sokal's
  automatic window, c = 5, on the FFT autocorrelation :func:`acf`, which is statsmodels'
  ``acf(x, nlags=n - 1, fft=True)``: tests/core/test_timeseries.py compares them); effective sample size =
  epochs / tau.
* :func:`batch_means`: the standard error of the mean by **batch means** whose batches are long against
  tau: at most ``batches`` consecutive batches, each at least ``BATCH_TAU`` x tau epochs long, and never
  fewer than two (``long_enough`` is False when even two batches are shorter than that: the caller then
  falls back to the across-run interval, or says the single run's interval may be too narrow).
* :func:`mser_truncation`: the initial transient by MSER-5 (White 1997; Franklin & White 2008): the
  series is cut into m batches of 5 epochs, and the truncation d (in batches, searched over the first half,
  d <= m/2) that minimises sum_{j>d} (z_j - mean_{j>d} z)^2 / (m - d)^2 over the batch means z is dropped;
  a minimum at d = m/2 (the statistic still falling at half the run) means the series has not settled
  (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: A batch of the batch-means estimator spans at least this many integrated autocorrelation times.
BATCH_TAU = 5.0
#: Epochs per batch of MSER-5.
MSER_BATCH = 5


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[np.isfinite(x)]


def t_quantile(df: float, level: float = 0.95) -> float:
    """The two-sided Student-t quantile t_{(1 + level) / 2} on ``df`` degrees of freedom (any positive real):
    ``scipy.special.stdtrit``, the value of ``scipy.stats.t.ppf`` without importing scipy.stats."""
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + level / 2))


def acf(x: np.ndarray) -> np.ndarray:
    """The sample autocorrelation r_0 .. r_{n-1} of a finite series with spread (r_0 = 1), through the FFT.

    r_k = sum_{t<n-k} (x_t - mean)(x_{t+k} - mean) / sum_t (x_t - mean)^2: the biased estimator, as
    statsmodels' ``acf(x, nlags=n - 1, fft=True)``. Zero-padding to at least 2n points makes the circular
    correlation of the FFT the linear one. Shapes: ``x`` (n,) -> (n,).
    """
    d = np.asarray(x, dtype=float) - np.mean(x)
    n = d.size
    size = 1 << (2 * n - 1).bit_length()  # a power of two >= 2n - 1
    f = np.fft.rfft(d, size)
    acov = np.fft.irfft(f * np.conjugate(f), size)[:n]
    return acov / acov[0]


def autocorrelation(x: np.ndarray, c: float = 5.0) -> dict[str, float | int | None]:
    """{lag1, tau_int, ess, window} of one run's epoch times, in epoch order.

    ``tau_int`` = 1 + 2 sum_{k=1..M} rho_k with Sokal's automatic window (the smallest M >= c * tau(M)),
    from the FFT autocorrelation (:func:`acf`); ``ess`` = epochs / tau_int (at most the epoch count). None with
    fewer than 4 epochs or no spread.
    """
    x = _finite(x)
    n = x.size
    if n < 4 or np.ptp(x) == 0:
        return {"lag1": None, "tau_int": None, "ess": None, "window": None}
    r = acf(x)
    taus = 2.0 * np.cumsum(r) - 1.0  # taus[M] = 1 + 2 sum_{k=1..M} r_k
    ok = np.arange(n) >= c * taus
    m = int(ok.argmax()) if ok.any() else n - 1
    tau = max(float(taus[m]), 1.0 / n)
    lag1 = float(r[1])
    return {"lag1": lag1 if math.isfinite(lag1) else None, "tau_int": tau, "ess": min(n, n / tau), "window": m}


@dataclass(frozen=True)
class BatchMeans:
    """The mean of a series and its standard error by batch means."""

    mean: float
    se: float
    df: int  # batches - 1
    batches: int
    batch_len: int  # epochs in the shortest batch
    tau: float  # the integrated autocorrelation time the batch length rests on (>= 1)
    long_enough: bool  # every batch spans at least BATCH_TAU x tau epochs


def batch_means(x: np.ndarray, batches: int = 10, batch_tau: float = BATCH_TAU) -> BatchMeans | None:
    """Batch means of one run's epochs (in order); None with fewer than two finite epochs.

    The number of batches b = min(``batches``, n // ceil(``batch_tau`` x tau)), at least 2, where tau is the
    run's integrated autocorrelation time (1 when it cannot be estimated); the batches are consecutive
    (``np.array_split``), se = sd(batch means) / sqrt(b), with t on b - 1 df.
    """
    x = _finite(x)
    n = x.size
    if n < 2:
        return None
    ac = autocorrelation(x)
    tau = max(1.0, float(ac["tau_int"])) if ac["tau_int"] is not None else 1.0
    r1 = ac["lag1"]
    if r1 is not None and 0 < r1 < 1:  # the AR(1) value from the lag-one correlation: Sokal's window
        tau = max(tau, min(n / 2.0, (1 + r1) / (1 - r1)))  # underestimates tau in short series
    need = max(1, math.ceil(batch_tau * tau))
    fit = n // need
    b = max(2, min(int(batches), fit))
    parts = np.array_split(x, b)
    bm = np.array([p.mean() for p in parts])
    se = float(bm.std(ddof=1)) / math.sqrt(b)
    return BatchMeans(mean=float(x.mean()), se=se, df=b - 1, batches=b, batch_len=min(p.size for p in parts),
                      tau=tau, long_enough=fit >= 2)


def mser_truncation(x: np.ndarray, batch: int = MSER_BATCH) -> int | None:
    """Epochs of the initial transient by MSER-``batch`` (a multiple of ``batch``; 0 when there is none), or
    None when the series has not settled (the minimum lies in the second half) or is shorter than two
    batches."""
    x = _finite(x)
    m = x.size // batch
    if m < 2:
        return None
    z = x[:m * batch].reshape(m, batch).mean(axis=1)
    # mser[d] over the batch means z[d:], d = 0 .. m - 2 (at least two batches kept)
    tail_sum = np.cumsum(z[::-1])[::-1]
    tail_sq = np.cumsum((z**2)[::-1])[::-1]
    k = np.arange(m, 0, -1, dtype=float)  # batches kept for each d
    sse = tail_sq - tail_sum**2 / k
    half = m // 2
    mser = (sse / k**2)[:half + 1]  # truncation searched in the first half only (White 1997)
    d = int(np.argmin(mser))
    if d == half and m >= 4:  # still falling at half the run: the transient may go on
        return None
    return d * batch
