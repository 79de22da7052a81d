"""Statistics of epoch times and training stability, per run and per model.

Methods (documented in docs/report-schema.md):

* Warmup epochs are dropped (``trainer.warmup_epochs``, or ``warmup_epochs`` in epochs.json).
* Outliers are marked per run: ``iqr`` = Tukey's fences [Q1 - k·IQR, Q3 + k·IQR] (k = 1.5); ``mad`` = robust
  z-score |x - median| / (1.4826·MAD) > 3.5; ``none`` keeps everything. Non-finite times are dropped; epochs
  the harness flagged contaminated are dropped or used, labelled, by ``analysis.contaminated``
  (core/contamination_policy.py) (:func:`kept_epochs`, used by the sweep analysis and the sweep comparison alike). Outliers are reported and left out of the *typical* epoch time only (std, CV,
  min, max, percentiles and their intervals, ``mean_typical``).
* The hours' mean uses every counted epoch (finite, after warmup, not contaminated), outliers included, and
  one estimator (:func:`model_centre`) gives both that mean and the centre of its interval: one run, its
  mean with a batch-means interval; two or more, the random-effects mean of the run means
  (:func:`random_effects`: weights 1/(se_i^2 + tau^2), the between-run sd tau integrated out over a
  half-normal prior), which combines within-run and between-run information so that two runs give a
  usable interval.
* Autocorrelation per run (:func:`trainbench.core.timeseries.autocorrelation`): lag-one autocorrelation and
  the integrated autocorrelation time tau (Sokal's automatic window, c = 5); effective sample size =
  epochs / tau.
* Batch means (:func:`trainbench.core.timeseries.batch_means`, the stop rule's estimator too): batches of at
  least 5 tau, at most ``analysis.batches`` of them, never fewer than two; t with batches - 1 df. Intervals
  of the mean are built on the log scale (mean x exp(+-q se/mean)), so an interval of a time never goes
  below zero. The naive t-interval over epochs is kept for comparison only.
* Median and p95: two-stage bootstrap (analysis/statistics/block_bootstrap.py: runs drawn with replacement, then
  circular blocks within each drawn run; block length from Politis & White's rule), expanded percentile
  interval (Hesterberg 2015) with the number of blocks as the sample size.
* Independent samples (a sweep against another): BCa bootstrap of a statistic (:func:`bootstrap_interval`,
  scipy.stats.bootstrap, each sample resampled on its own) and the two-sided Mann-Whitney U test
  (:func:`mann_whitney`).
* Drift (throttling, leaks): Spearman's rank correlation of epoch time against epoch index within each run;
  a run drifts when p < ``drift_pvalue`` *and* the median of its last third differs from the median of its
  first third by at least ``drift_min_change`` (with hundreds of epochs a tiny trend is "significant", so
  the effect size is required too).
* Loss trend: trainbench.core.trend.classify_loss, the definition the run's ``loss_trend`` tag uses too.
* Gradient health: trainbench.core.grad_health.classify_gradients, the definition and the words of the run's
  ``gradient_health`` tag (healthy | exploding | vanishing | non_finite | unknown).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as st
from statsmodels.stats.meta_analysis import combine_effects

from trainbench.analysis.statistics.block_bootstrap import block_bootstrap_intervals, bootstrap_subset
from trainbench.analysis.statistics.timing import (
    Autocorrelation,
    Bootstrap,
    Drift,
    EpochTime,
    ModelTiming,
    PerRun,
    RunAutocorrelation,
    Stability,
)
from trainbench.core import grad_health as _grad
from trainbench.core import trend as _trend
from trainbench.core.contamination_policy import AUTO
from trainbench.core.contamination_policy import kept as contamination_rule
from trainbench.core.timeseries import BATCH_TAU, batch_means, t_quantile
from trainbench.core.timeseries import autocorrelation as _autocorrelation
from trainbench.core.vocab import GradientHealth, LossTrend, Outcome, Series, Tag

_TREND_RANK = _trend.SEVERITY
_GRAD_RANK = _grad.SEVERITY


def _f(x: Any) -> float | None:
    """A JSON-safe float (None for NaN/inf/None)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def outlier_mask(x: np.ndarray, rule: str = "iqr", iqr_k: float = 1.5, mad_z: float = 3.5) -> np.ndarray:
    """True where ``x`` is an outlier under ``rule`` (iqr | mad | none)."""
    x = np.asarray(x, dtype=float)
    if rule == "none" or x.size < 4:
        return np.zeros(x.shape, dtype=bool)
    if rule == "iqr":
        q1, q3 = np.percentile(x, [25, 75])
        iqr = q3 - q1
        return (x < q1 - iqr_k * iqr) | (x > q3 + iqr_k * iqr)
    if rule == "mad":
        med = np.median(x)
        mad = 1.4826 * np.median(np.abs(x - med))
        if mad == 0:
            return x != med
        return np.abs(x - med) / mad > mad_z
    raise ValueError(f"unknown outlier rule {rule!r}: use iqr, mad or none")


def t_interval(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean (None with fewer than two values)."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 2:
        return None
    m = float(x.mean())
    se = float(x.std(ddof=1)) / math.sqrt(n)
    h = t_quantile(n - 1, confidence) * se
    return (m - h, m + h)


def _p95(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.percentile(x, 95, axis=axis)


def bootstrap_interval(samples: tuple[np.ndarray, ...], statistic: Any, resamples: int, rng: np.random.Generator,
                       confidence: float = 0.95, methods: tuple[str, ...] = ("BCa",), batch: int | None = None
                       ) -> tuple[tuple[float, float] | None, str]:
    """(low, high) of ``statistic`` by ``scipy.stats.bootstrap`` over independent ``samples`` (each resampled
    on its own), with the first of ``methods`` that gives a finite interval, and that method ("none": none did).

    ``statistic`` is vectorised (takes ``axis``). Degenerate data (a jackknife of equal values) can make BCa
    fail or return NaN: the next method is tried instead.
    """
    for method in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # degenerate-data warnings: we check the result instead
            try:
                res = st.bootstrap(samples, statistic, n_resamples=resamples, confidence_level=confidence,
                                   method=method, vectorized=True, paired=False, rng=rng, batch=batch)
            except Exception:  # noqa: BLE001 - degenerate jackknife and friends: try the next method
                continue
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return (lo, hi), method
    return None, "none"


def bca_interval(x: np.ndarray, statistic: str, resamples: int, rng: np.random.Generator,
                 max_samples: int = 2000) -> tuple[float, float] | None:
    """BCa bootstrap 95% interval of the median (``p50``) or ``p95``; None with fewer than 10 values."""
    x = np.asarray(x, dtype=float)
    if x.size < 10:
        return None
    if x.size > max_samples:
        x = rng.choice(x, size=max_samples, replace=False)
    fn = np.median if statistic == "p50" else _p95
    if np.ptp(x) == 0:
        v = float(fn(x))
        return (v, v)
    ci, _ = bootstrap_interval((x,), fn, resamples, rng, batch=max(1, min(resamples, 2_000_000 // max(1, x.size))))
    return ci


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def ratio_interval(a: np.ndarray, b: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator,
                   max_samples: int) -> tuple[tuple[float, float] | None, str]:
    """(low, high) of median(b) / median(a) of two independent samples by bootstrap (BCa, percentile if BCa
    degenerates; at most ``max_samples`` values per side, a seeded subsample above), and the method."""
    if a.size < 2 or b.size < 2:
        return None, "none"
    if a.size > max_samples:
        a = rng.choice(a, size=max_samples, replace=False)
    if b.size > max_samples:
        b = rng.choice(b, size=max_samples, replace=False)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        r = float(np.median(b) / np.median(a))
        return (r, r), "exact"
    return bootstrap_interval((a, b), _ratio_of_medians, resamples, rng, confidence, ("BCa", "percentile"))


def mann_whitney(a: np.ndarray, b: np.ndarray) -> dict[str, float] | None:
    """Two-sided Mann-Whitney U of two independent samples: {u, p, prob_b_slower}; None with fewer than two
    values on a side. ``prob_b_slower`` = P(b > a) (ties count half) = 1 - U / (n_a n_b), U being the
    statistic of ``a`` (pairs with a > b)."""
    if a.size < 2 or b.size < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = st.mannwhitneyu(a, b, alternative="two-sided")
    p = float(res.pvalue) if math.isfinite(res.pvalue) else 1.0
    return {"u": float(res.statistic), "p": p, "prob_b_slower": 1 - float(res.statistic) / (a.size * b.size)}


@dataclass
class EpochTimes:
    """One run's epoch times after warmup, and what of them the statistics keep."""

    measured: np.ndarray  # every epoch after warmup, contaminated ones as NaN
    finite: np.ndarray  # the finite ones, in order
    kept: np.ndarray  # the finite ones that are not outliers, in order
    contaminated: np.ndarray  # bool per measured epoch: flagged as measured on a busy machine
    #: the kept epochs include contaminated ones (analysis.contaminated: use, or auto without enough clean ones)
    used_contaminated: bool = False

    @property
    def removed(self) -> int:
        """Epochs dropped: outliers, non-finite and contaminated ones."""
        return int(self.measured.size - self.kept.size)


def kept_epochs(rec: Any, cfg: Any) -> EpochTimes:
    """The epochs of one run (a RunRecord) that the statistics use: warmup dropped, epochs the harness flagged
    contaminated (a per-epoch ``contaminated`` 0/1 series in epochs.json, where it exists) and non-finite
    times dropped, outliers removed by ``cfg.outliers`` (an AnalysisConfig: iqr | mad | none)."""
    t = rec.measured(Series.EPOCH_TIME_MS)
    flag = rec.measured(Series.CONTAMINATED) if Series.CONTAMINATED in rec.series else np.empty(0)
    policy = str(getattr(cfg, "contaminated", AUTO))
    k = contamination_rule(t, flag if flag.size == t.size else None, policy)  # core/contamination_policy.py
    contaminated = k.contaminated
    if contaminated.any() and not k.used_contaminated:
        t = np.where(contaminated, np.nan, t)
    finite = t[np.isfinite(t)]
    mask = outlier_mask(finite, cfg.outliers, cfg.iqr_k, cfg.mad_z)
    return EpochTimes(measured=t, finite=finite, kept=finite[~mask], contaminated=contaminated,
                      used_contaminated=k.used_contaminated)


# --------------------------------------------------------------------------------------------------
# intervals that hold when epoch times are autocorrelated
# --------------------------------------------------------------------------------------------------


def autocorrelation(x: np.ndarray, c: float = 5.0) -> dict[str, Any]:
    """{lag1, tau_int, ess, window} of one run's epoch times (:func:`trainbench.core.timeseries.autocorrelation`,
    the estimate the stop rule uses too)."""
    return {k: (_f(v) if k != "window" else v) for k, v in _autocorrelation(x, c).items()}


def log_interval(mean: float, se: float, df: float, confidence: float = 0.95) -> tuple[float, float]:
    """mean x exp(+-t se / mean): the t-interval built on the log scale (delta method), so it stays positive.

    Falls back to mean +- t se when the mean is not positive (a time never is, but a generic caller may be).
    """
    t = t_quantile(df, confidence)
    if mean > 0:
        f = math.exp(min(700.0, t * se / mean))
        return (mean / f, mean * f)
    return (mean - t * se, mean + t * se)


def batch_means_interval(x: np.ndarray, batches: int = 10, confidence: float = 0.95) -> tuple[float, float] | None:
    """Interval of the mean of one run's epochs (in order) that holds under autocorrelation: batch means.

    :func:`trainbench.core.timeseries.batch_means`: at most ``batches`` consecutive batches, each at least
    ``BATCH_TAU`` (5) integrated autocorrelation times long, never fewer than two; se = sd(batch means) /
    sqrt(b) with t on b - 1 df, on the log scale (:func:`log_interval`). None with fewer than two epochs.
    """
    bm = batch_means(x, batches)
    return None if bm is None else log_interval(bm.mean, bm.se, bm.df, confidence)


@dataclass
class Centre:
    """The one estimate of a model's mean epoch time (the hours' mean) and its interval."""

    mean: float | None
    ci: tuple[float, float] | None
    basis: str | None  # runs | batch_means | None
    method: str | None
    detail: dict[str, Any]


#: Scale of the half-normal prior on the between-run sd of a model's mean epoch time, relative to the mean
#: (:func:`random_effects`): run-to-run differences of a few percent are the rule, 25% is generous.
BETWEEN_RUN_PRIOR = 0.25


def random_effects(means: np.ndarray, ses: np.ndarray, confidence: float = 0.95,
                   prior_scale: float = BETWEEN_RUN_PRIOR) -> Centre:
    """Random-effects mean of two or more runs' means, each with its within-run standard error (batch means).

    Model: run mean_i ~ N(mu, se_i^2 + tau^2), tau the between-run sd. For a given tau the estimate is the
    weighted mean with weights 1 / (se_i^2 + tau^2) (runs that agree: about the inverse-variance mean, i.e.
    the mean over all epochs; runs that disagree: each run weighs alike, the mean of run means). tau is not
    fixed at one estimate (with two runs it rests on one degree of freedom: the t on runs - 1 df gave 5 ms
    to 9,657,602 ms, DerSimonian-Laird with a normal quantile covers ~67%): it is integrated over its
    posterior on a grid, with a flat prior on mu and a half-normal prior on tau of scale ``prior_scale`` x
    the mean of the run means (Gelman 2006). The centre is the posterior mean of mu, the interval
    ``log_interval(centre, posterior sd, normal)``. DerSimonian-Laird's tau^2, Q and I^2
    (``statsmodels.stats.meta_analysis.combine_effects``) are reported to describe the heterogeneity.
    A run's se is floored at 1e-6 of its mean (a run of equal times) so that no run takes every weight.
    """
    m = np.asarray(means, dtype=float)
    se = np.asarray(ses, dtype=float)
    v = np.maximum(se, 1e-6 * np.abs(m) + 1e-12) ** 2
    k = m.size
    scale = max(prior_scale * abs(float(m.mean())), 1e-12)
    top = 10.0 * max(scale, float(np.ptp(m)))
    taus = np.r_[0.0, np.geomspace(top * 1e-6, top, 800)]
    w = 1.0 / (v[None, :] + taus[:, None] ** 2)
    W = w.sum(axis=1)
    mu = (w * m).sum(axis=1) / W
    logp = (-0.5 * (taus / scale) ** 2 - 0.5 * np.log(W) + 0.5 * np.log(w).sum(axis=1)
            - 0.5 * (w * (m[None, :] - mu[:, None]) ** 2).sum(axis=1))
    post = np.exp(logp - logp.max()) * np.gradient(taus)
    post /= post.sum()
    centre = float(np.sum(post * mu))
    sd = math.sqrt(float(np.sum(post * (1.0 / W + (mu - centre) ** 2))))
    tau_med = float(taus[np.searchsorted(np.cumsum(post), 0.5)])
    wts = np.sum(post[:, None] * w / W[:, None], axis=0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        res = combine_effects(m, v, method_re="chi2", use_t=False)
    tau2_dl = max(0.0, float(res.tau2)) if math.isfinite(float(res.tau2)) else 0.0  # statsmodels: untruncated
    q = float(res.q)
    p_het = float(st.chi2.sf(q, k - 1)) if k > 1 else None
    i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    detail = {"estimator": "random-effects mean of the run means (between-run sd integrated out, half-normal "
                           f"prior of scale {prior_scale:g} x the mean)", "runs": int(k),
              "weights": [_f(x) for x in wts], "between_run_sd_ms": _f(tau_med), "prior_scale": float(prior_scale),
              "tau2_dl": _f(tau2_dl), "i2": _f(i2), "q": _f(q), "q_pvalue": _f(p_het)}
    return Centre(centre, log_interval(centre, sd, math.inf, confidence), "runs", "random_effects", detail)


def runs_interval(run_means: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """Interval of the mean across independent runs: t on runs - 1 df of the per-run means, log scale."""
    m = np.asarray(run_means, dtype=float)
    m = m[np.isfinite(m)]
    if m.size < 2:
        return None
    return log_interval(float(m.mean()), float(m.std(ddof=1)) / math.sqrt(m.size), m.size - 1, confidence)


def describe(x: np.ndarray) -> dict[str, float | None]:
    """mean, std (ddof=1), cv, min, max, p50, p95, p99 of ``x``."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return dict.fromkeys(("mean", "std", "cv", "min", "max", "p50", "p95", "p99"))
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else None
    p50, p95, p99 = np.percentile(x, [50, 95, 99])
    return {"mean": mean, "std": std, "cv": (std / mean if std is not None and mean else None),
            "min": float(x.min()), "max": float(x.max()), "p50": float(p50), "p95": float(p95),
            "p99": float(p99)}


def drift(x: np.ndarray, pvalue: float = 0.01, min_change: float = 0.05) -> dict[str, Any]:
    """Trend of epoch time over a run: {rho, p, change, drifting}; ``change`` = last/first third - 1."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 9:
        return {"rho": None, "p": None, "change": None, "drifting": False}
    third = x.size // 3
    first, last = float(np.median(x[:third])), float(np.median(x[-third:]))
    change = last / first - 1 if first > 0 else 0.0
    if np.ptp(x) == 0:
        return {"rho": 0.0, "p": 1.0, "change": 0.0, "drifting": False}
    rho, p = st.spearmanr(np.arange(x.size), x)
    drifting = bool(p < pvalue and abs(change) >= min_change)
    return {"rho": _f(rho), "p": _f(p), "change": _f(change), "drifting": drifting}


def loss_trend(loss: np.ndarray, warmup_epochs: int = 0) -> dict[str, Any]:
    """{trend, start, end} of one run by :func:`trainbench.core.trend.classify_loss`, the definition behind the
    run's ``loss_trend`` tag: converging | flat | diverging | non_finite | unknown, warmup dropped."""
    t = _trend.classify_loss(np.asarray(loss, dtype=float), warmup_epochs)
    return {"trend": t.trend, "start": _f(t.start), "end": _f(t.end)}


def gradient_health(g: np.ndarray, max_norm: float = _grad.EXPLODE_RATIO, min_norm: float = _grad.VANISH,
                    warmup_epochs: int = 0) -> str:
    """One run's gradient health by :func:`trainbench.core.grad_health.classify_gradients`, the definition (and
    the words) of the run's ``gradient_health`` tag: ``max_norm`` is the exploding ratio to the run's median
    norm (``analysis.grad_norm_max``), ``min_norm`` the vanishing floor of the last third's median."""
    return _grad.classify_gradients(np.asarray(g, dtype=float), warmup_epochs, max_norm, min_norm).verdict


def worst(values: list[str], rank: dict[str, int]) -> str:
    return max(values, key=lambda v: rank.get(v, 0)) if values else "unknown"


def model_centre(runs: list[np.ndarray], batches: int = 10, confidence: float = 0.95) -> Centre:
    """The one estimate of a model's mean epoch time and its interval, from each run's counted epochs (in
    order): the hours use this mean and ``ci95_mean`` is centred on it.

    One run: the mean of its epochs, batch-means interval (:func:`trainbench.core.timeseries.batch_means`).
    Two or more: :func:`random_effects` over the runs' means with their batch-means standard errors (a run
    of one epoch has none: it gets the largest relative se of the others). Runs without any: the plain
    t-interval of the run means (df = runs - 1) around their mean.
    """
    xs = [np.asarray(x, dtype=float) for x in runs]
    xs = [x[np.isfinite(x)] for x in xs]
    xs = [x for x in xs if x.size]
    if not xs:
        return Centre(None, None, None, None, {})
    bms = [batch_means(x, batches) for x in xs]
    short = [bm for bm in bms if bm is not None and not bm.long_enough]
    if len(xs) == 1:
        x, bm = xs[0], bms[0]
        detail: dict[str, Any] = {"estimator": "mean of the run's epochs", "runs": 1}
        if bm is None:
            return Centre(float(x.mean()), None, None, None, detail)
        detail.update(batches=bm.batches, batch_epochs=bm.batch_len, tau_int=_f(bm.tau),
                      batches_long_enough=bm.long_enough)
        return Centre(bm.mean, log_interval(bm.mean, bm.se, bm.df, confidence), "batch_means", "batch_means",
                      detail)
    means = np.array([x.mean() for x in xs])
    ses = np.array([bm.se if bm is not None else np.nan for bm in bms])
    if not np.isfinite(ses).any():
        mu = float(means.mean())
        ci = log_interval(mu, float(means.std(ddof=1)) / math.sqrt(means.size), means.size - 1, confidence)
        return Centre(mu, ci, "runs", "t_over_runs", {"estimator": "mean of the run means", "runs": int(means.size)})
    rel = np.where(np.isfinite(ses), ses / np.abs(means), np.nan)
    ses = np.where(np.isfinite(ses), ses, np.nanmax(rel) * np.abs(means))
    c = random_effects(means, ses, confidence)
    c.detail["runs_with_short_batches"] = len(short)
    return c


#: The words of each estimator of the centre and its interval (``ci95_mean_method``): the Method paragraph of
#: report.md is made of them, so that the sentence changes with the estimator.
CENTRE_METHODS = {
    "batch_means": "one run: the mean of its epochs, with a batch-means interval (consecutive batches of at least "
                   f"{BATCH_TAU:g} integrated autocorrelation times, t on batches - 1 df), valid when epoch times "
                   "are autocorrelated",
    "random_effects": "two or more runs: the random-effects mean of the run means (weights 1/(within-run se^2 + "
                      "between-run variance), the between-run sd integrated over a half-normal prior), with a "
                      "normal interval that includes run-to-run variation",
    "t_over_runs": "two or more runs without a within-run se: the t-interval of the per-run means (runs - 1 df)",
}

#: The kinds of a model's stability warnings (``stability.warning_kinds``), each in words: "What lowers
#: confidence" lists each kind once, with the models it touches.
WARNING_KINDS = {
    "noisy": "noisy timings (IQR/median at or above analysis.noise_iqr_ratio): is something else using the machine?",
    "drift": "epoch time drifts over a run: thermal throttling or a leak?",
    "loss": "the loss diverges or became non-finite",
    "gradients": "gradients non-finite, exploding or vanishing",
    "few_epochs": "a run measured fewer than two epochs after warmup",
    "contaminated": "epochs flagged contaminated (machine load) were dropped or used",
    "nonfinite_times": "epochs without a finite epoch time were dropped",
    "autocorrelated": "epoch times are strongly autocorrelated: the runs weigh like fewer independent epochs",
    "disagree": "runs disagree beyond their own 95% intervals (a busy machine?)",
    "more_seeds": "too few runs for a reliable interval: train more seeds",
    "pooled": "pooled runs differ in batch size or fast-path switches: analyse them separately",
}

#: The outlier rules in words (``analysis.outliers``).
OUTLIER_RULES = {
    "iqr": "Tukey's fences (outside [Q1 - k·IQR, Q3 + k·IQR], k = analysis.iqr_k)",
    "mad": "the robust z-score (|x - median| / (1.4826·MAD) > analysis.mad_z)",
    "none": "none (every epoch is typical)",
}

#: An interval of the mean whose upper bound is more than this many times its lower bound does not resolve the
#: mean (e.g. batch means on one degree of freedom over a noisy run gave [17.53, 5.277e+06] ms): it is shown as
#: unresolved, with what to run, and the conservative total does not use it.
UNRESOLVED_RATIO = 10.0


def unresolved_reason(ci: tuple[float, float] | None, method: str | None, runs: int) -> str | None:
    """Why the interval ``ci`` of a model's mean cannot be used (its bounds more than :data:`UNRESOLVED_RATIO`
    apart), and what to run to resolve it; None when it resolves the mean (or there is none)."""
    if not ci or ci[0] > 0 and ci[1] / ci[0] <= UNRESOLVED_RATIO:
        return None
    span = "spans more than an order of magnitude" if ci[0] > 0 else "reaches zero"
    if method == "batch_means":
        return (f"the one run's batch-means interval {span} (its batches are few and disagree): train more seeds "
                "(`python run.py -m model=<this model> trainer.seed=0,1,2`) or more epochs per run")
    return (f"the {runs} runs' interval {span} (they differ widely): train more seeds "
            "(`python run.py -m model=<this model> trainer.seed=0,1,2,3,4`) on a quiet machine")


def _centre_why(c: Centre, n_epochs: int) -> str | None:
    d = c.detail
    if c.method == "batch_means":
        why = (f"one run: batch means ({d['batches']} consecutive batches of >= {d['batch_epochs']} epochs, t on "
               f"{d['batches'] - 1} df, log scale), valid when epoch times are autocorrelated; each batch is meant "
               f"to span >= {BATCH_TAU:g} integrated autocorrelation times (tau = {d['tau_int']:.1f})")
        if not d["batches_long_enough"]:
            why += (f"; {n_epochs} epochs are too few for two such batches, so this interval may be too narrow: "
                    "train more seeds, and the across-run interval becomes the headline")
        return why + "; the t-interval over epochs (ci95_mean_epochs) assumes independent epochs"
    if c.method == "random_effects":
        why = (f"{d['runs']} independent runs: random-effects mean of the run means, weights 1/(within-run se^2 + "
               f"between-run variance), the between-run sd integrated over a half-normal prior "
               f"({d['prior_scale']:.0%} of the mean), normal interval on the log scale; it includes run-to-run "
               f"variation (between-run sd ~{d['between_run_sd_ms']:.3g} ms, I^2 {d['i2']:.0%})")
        if d.get("runs_with_short_batches"):
            why += ("; some runs are too short for batches >= 5 autocorrelation times, their own se may be "
                    "understated, and the between-run variance is what covers it")
        return why
    if c.method == "t_over_runs":
        return (f"{d['runs']} independent runs without a within-run se: t-interval of the per-run means "
                f"(df = {d['runs'] - 1}, log scale)")
    return None


@dataclass
class _RunStats:
    """One run's figures on its way into the model's: its kept and counted epochs and its verdicts."""

    row: PerRun
    kept: np.ndarray
    counted: np.ndarray
    trend: dict[str, Any]
    gradients: str
    warnings: list[tuple[str, str]]


def _run_stats(r: Any, cfg: Any) -> _RunStats:
    """One timed run (a RunRecord): its epochs as the statistics keep them, its verdicts and its warnings."""
    ep = kept_epochs(r, cfg)
    t, finite, kept, contaminated = ep.measured, ep.finite, ep.kept, ep.contaminated
    med = float(np.median(finite)) if finite.size else None
    iqr_ratio = float(np.subtract(*np.percentile(finite, [75, 25]))) / med if finite.size >= 4 and med else None
    d = drift(kept, cfg.drift_pvalue, cfg.drift_min_change)
    lt = loss_trend(r.series.get("loss", np.empty(0)), r.warmup_epochs)
    norms = r.series.get(Series.GRAD_NORM, np.empty(0))
    gh = gradient_health(norms, cfg.grad_norm_max, cfg.grad_norm_min, r.warmup_epochs)
    if not np.size(norms):  # no norms recorded: the run's own tag, old words read as today's
        gh = _grad.normalise((getattr(r, "tags", None) or {}).get(Tag.GRADIENT_HEALTH))
    ac = autocorrelation(finite)
    run_ci = batch_means_interval(finite, cfg.batches)
    row = PerRun(run_id=r.run_id, run_name=r.run_name, outcome=getattr(r, "outcome", None),
                 epochs_measured=int(t.size), outliers_removed=int(t.size - kept.size),
                 mean_ms=_f(finite.mean()) if finite.size else None,
                 ci95_mean_ms=list(run_ci) if run_ci else None, epochs_in_mean=int(finite.size),
                 outliers=int(finite.size - kept.size), mean_typical_ms=_f(kept.mean()) if kept.size else None,
                 iqr_over_median=_f(iqr_ratio), drift=Drift(**d), autocorrelation=RunAutocorrelation(**ac),
                 loss_trend=lt["trend"], gradient_health=gh, series_source=r.series_source,
                 partial=getattr(r, "outcome", Outcome.COMPLETED) != Outcome.COMPLETED,
                 contaminated_epochs=int(contaminated.sum()), contaminated_used=ep.used_contaminated)
    return _RunStats(row, kept, finite, lt, gh, _run_warnings(f"run {r.run_name}", ep, row, lt, gh, cfg))


def _run_warnings(who: str, ep: EpochTimes, row: PerRun, lt: dict[str, Any], gh: str, cfg: Any) -> list[tuple[str, str]]:
    """The timing and stability warnings of one run: (kind, words), the kinds of :data:`WARNING_KINDS`."""
    t, finite, contaminated = ep.measured, ep.finite, ep.contaminated
    out = []
    if row.iqr_over_median is not None and row.iqr_over_median >= cfg.noise_iqr_ratio:
        out.append(("noisy", f"noisy timings in {who}: IQR/median = {row.iqr_over_median:.0%} "
                   f"(>= {cfg.noise_iqr_ratio:.0%}); is something else using the machine?"))
    if row.drift.drifting:
        out.append(("drift", f"epoch time drifts over {who}: last third {row.drift.change:+.0%} vs first third "
                   f"(Spearman rho {row.drift.rho:.2f}); thermal throttling or a leak?"))
    if lt["trend"] in ("diverging", LossTrend.NON_FINITE):
        out.append(("loss", f"loss {'became non-finite' if lt['trend'] == LossTrend.NON_FINITE else 'is diverging'} "
                   f"in {who} (start {lt['start']}, end {lt['end']})"))
    if gh in (GradientHealth.NON_FINITE, GradientHealth.EXPLODING, GradientHealth.VANISHING):
        out.append(("gradients", f"gradients {gh.replace('_', '-')} in {who}"))
    if t.size < 2:
        out.append(("few_epochs", f"{who} measured only {t.size} epoch(s) after warmup"))
    if contaminated.any():
        out.append(("contaminated", f"{int(contaminated.sum())} of {t.size} measured epoch(s) of {who} were flagged "
                   "contaminated (machine load) and " + (
                       "USED: too few clean epochs, so its timing is that of the busy machine "
                       "(an upper bound of a quiet one's)" if ep.used_contaminated else "dropped")))
    nonfinite = ~np.isfinite(t) & ~contaminated
    if nonfinite.any():
        out.append(("nonfinite_times", f"{int(nonfinite.sum())} epoch(s) of {who} have no finite epoch time (NaN or "
                   "infinite: not recorded, or a damaged log) and were dropped"))
    ac = row.autocorrelation
    if ac.tau_int is not None and ac.tau_int > cfg.autocorr_max_tau:
        msg = (f"epoch times in {who} are autocorrelated (lag-one {ac.lag1:.2f}, integrated "
               f"autocorrelation time {ac.tau_int:.1f} epochs > analysis.autocorr_max_tau={cfg.autocorr_max_tau:g}): "
               f"its {finite.size} epochs weigh like ~{ac.ess:.0f} independent ones")
        bm = batch_means(finite, cfg.batches)
        if bm is not None and not bm.long_enough:
            msg += (f"; its batches ({bm.batch_len} epochs) are shorter than {BATCH_TAU:g} autocorrelation "
                    "times, so even the batch-means interval may be too narrow")
        out.append(("autocorrelated", msg))
    return out


def epoch_time(kept_all: list[np.ndarray], counted_all: list[np.ndarray], cfg: Any,
               rng: np.random.Generator) -> EpochTime:
    """A model's epoch time: the one centre and its interval from every counted epoch (outliers included,
    since training pays for them; :func:`model_centre`), the typical epoch time without outliers (std, cv,
    min, max, percentiles and their two-stage bootstrap intervals), and whether the interval resolves the mean."""
    pooled = np.concatenate(kept_all) if kept_all else np.empty(0)
    counted = np.concatenate(counted_all) if counted_all else np.empty(0)
    desc = {k: _f(v) for k, v in describe(pooled).items()}
    centre = model_centre(counted_all, cfg.batches)
    typical = model_centre(kept_all, cfg.batches)
    ci_epochs = t_interval(counted)
    xs = bootstrap_subset([k for k in kept_all if k.size], cfg.bootstrap_max_samples, rng)
    bb = block_bootstrap_intervals(xs, rng, cfg.bootstrap_resamples)
    unresolved = unresolved_reason(centre.ci, centre.method, len(counted_all))
    return EpochTime(
        mean=_f(centre.mean), std=desc["std"], cv=desc["cv"], min=desc["min"], max=desc["max"], p50=desc["p50"],
        p95=desc["p95"], p99=desc["p99"], mean_typical=desc["mean"],
        mean_pooled=_f(counted.mean()) if counted.size else None,
        ci95_mean=list(centre.ci) if centre.ci and unresolved is None else None, ci95_mean_basis=centre.basis,
        ci95_mean_method=centre.method, ci95_mean_why=_centre_why(centre, int(counted.size)),
        ci95_mean_resolved=unresolved is None, ci95_mean_unresolved=unresolved,
        ci95_mean_epochs=list(ci_epochs) if ci_epochs else None,
        ci95_mean_typical=list(typical.ci) if typical.ci else None,
        centre={**centre.detail, "epochs": int(counted.size), "outliers_included": int(counted.size - pooled.size),
                **({"unresolved_bounds": list(centre.ci)} if unresolved else {})},
        ci95_median=list(bb["intervals"][50.0]) if bb["intervals"][50.0] else None,
        ci95_p95=list(bb["intervals"][95.0]) if bb["intervals"][95.0] else None,
        bootstrap=Bootstrap(method=("two-stage bootstrap (runs drawn with replacement, then circular blocks "
                                    "within each), expanded percentile" if bb["two_stage"] else
                                    "circular block bootstrap, expanded percentile"),
                            two_stage=bb["two_stage"], runs=len(xs), block_lengths=bb["block_lengths"],
                            blocks=bb["blocks"], resamples=bb["resamples"], epochs=int(sum(x.size for x in xs)),
                            tail_probability=bb["tail"]))


def _disagreement(rows: list[PerRun], min_change: float) -> str | None:
    """The warning when two runs disagree beyond their own intervals (a busy machine, a different clock
    state): the across-run interval is the one that covers it. None when they agree."""
    cis = [(p.run_name, p.mean_ms, p.ci95_mean_ms) for p in rows if p.ci95_mean_ms]
    if len(cis) < 2:
        return None
    lo_max = max(cis, key=lambda c: c[2][0])
    hi_min = min(cis, key=lambda c: c[2][1])
    spread = max(c[1] for c in cis) / min(c[1] for c in cis) - 1 if min(c[1] for c in cis) > 0 else math.inf
    if lo_max[2][0] <= hi_min[2][1] or spread < min_change:
        return None
    return (f"runs disagree beyond their own 95% intervals: run {hi_min[0]} {hi_min[1]:.4g} ms "
            f"[{hi_min[2][0]:.4g}, {hi_min[2][1]:.4g}] vs run {lo_max[0]} {lo_max[1]:.4g} ms "
            f"[{lo_max[2][0]:.4g}, {lo_max[2][1]:.4g}] (means {spread:.0%} apart); was the machine busy? "
            "The headline is the across-run interval, which covers this")


def _model_autocorrelation(rows: list[PerRun], e: EpochTime, timed_runs: int, cfg: Any
                     ) -> tuple[Autocorrelation, list[str]]:
    """The model's autocorrelation summary, and the advice to train more seeds where the headline interval
    rests on too little (strong autocorrelation, one short run, two runs that differ)."""
    acs = [p.autocorrelation for p in rows]
    taus = [a.tau_int for a in acs if a.tau_int is not None]
    high = [p.run_name for p in rows if p.autocorrelation.tau_int is not None
            and p.autocorrelation.tau_int > cfg.autocorr_max_tau]
    out = []
    seeds = "(e.g. `python run.py -m model=<this model> trainer.seed=0,1,2`)"
    recommend = bool(high) and timed_runs < 3
    if recommend:
        out.append(f"epoch times are strongly autocorrelated and only {timed_runs} run(s) are timed: train more "
                   f"seeds {seeds} so that the headline becomes the across-run interval of independent runs")
    d = e.centre
    if not recommend and e.ci95_mean_method == "batch_means" and not d.get("batches_long_enough", True):
        recommend = True
        out.append(f"one run of {d['epochs']} epochs is too short for batches of >= {BATCH_TAU:g} "
                   f"autocorrelation times (tau = {d['tau_int']:.1f}): its interval may be too narrow; train "
                   f"more seeds {seeds}")
    if e.ci95_mean_method == "random_effects" and d["runs"] < 3 and d.get("q_pvalue") is not None \
            and d["q_pvalue"] < 0.10:
        if not recommend:
            out.append(f"only {d['runs']} runs and they differ beyond their own noise (I^2 {d['i2']:.0%}): the "
                       "between-run variance rests on one degree of freedom, so the interval is approximate; "
                       "train at least 3 seeds (e.g. `python run.py -m model=<this model> trainer.seed=0,1,2`)")
        recommend = True
    lag1 = [a.lag1 for a in acs if a.lag1 is not None]
    ess = [a.ess for a in acs if a.ess is not None]
    return Autocorrelation(lag1_max=_f(max(lag1)) if lag1 else None, tau_int_max=_f(max(taus)) if taus else None,
                           ess_total=_f(sum(ess)) if ess else None, threshold_tau_int=float(cfg.autocorr_max_tau),
                           high_in_runs=high, recommend_more_seeds=recommend), out


def model_stats(runs: list[Any], cfg: Any, rng: np.random.Generator) -> ModelTiming:
    """Timing and stability of one model over its timed runs (RunRecord objects from runs.py); ``cfg`` is an
    AnalysisConfig. The fields of report.json's ``models.<name>`` that come from the data."""
    per = [_run_stats(r, cfg) for r in runs]
    rows = [p.row for p in per]
    e = epoch_time([p.kept for p in per], [p.counted for p in per], cfg, rng)
    warnings_ = [w for p in per for w in p.warnings]
    disagree = _disagreement(rows, cfg.disagree_min_change)
    if disagree:
        warnings_.append(("disagree", disagree))
    ac, advice = _model_autocorrelation(rows, e, sum(1 for p in per if p.counted.size), cfg)
    starts = [p.trend["start"] for p in per if p.trend["start"] is not None]
    ends = [p.trend["end"] for p in per if p.trend["end"] is not None]
    return ModelTiming(
        epochs_measured=sum(p.epochs_measured for p in rows), outliers_removed=sum(p.outliers_removed for p in rows),
        samples_used=int(sum(p.kept.size for p in per)), epochs_in_mean=int(sum(p.counted.size for p in per)),
        epoch_time_ms=e, autocorrelation=ac, runs_disagree=disagree is not None,
        stability=Stability(loss_trend=_trend.worst([p.trend["trend"] for p in per]),
                            loss_start=_f(np.median(starts)) if starts else None,
                            loss_end=_f(np.median(ends)) if ends else None,
                            gradient_health=_grad.worst([p.gradients for p in per]),
                            warnings=[w for _, w in warnings_] + advice,
                            warning_kinds=[k for k, _ in warnings_] + ["more_seeds"] * len(advice)),
        per_run=rows)
