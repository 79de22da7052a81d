"""Statistics of epoch times and training stability, per run and per model.

Methods (documented in docs/report-schema.md):

* Warmup epochs are dropped (``trainer.warmup_epochs``, or ``warmup_epochs`` in epochs.json).
* Outliers are marked per run: ``iqr`` = Tukey's fences [Q1 - k·IQR, Q3 + k·IQR] (k = 1.5); ``mad`` = robust
  z-score |x - median| / (1.4826·MAD) > 3.5; ``none`` keeps everything. Non-finite times are dropped; epochs
  the harness flagged contaminated are dropped or used, labelled, by ``analysis.contaminated``
  (core/contamination.py) (:func:`kept_epochs`, used by the sweep analysis and the sweep comparison alike).
* Descriptives on the pooled kept epochs: mean, std (ddof=1), CV, min, max, p50, p95, p99.
* Autocorrelation per run: lag-one autocorrelation and the integrated autocorrelation time tau (Sokal's
  automatic window, c = 5, on statsmodels' FFT autocorrelation); effective sample size = epochs / tau.
* Headline 95% interval of the mean: with two or more timed runs, the t-interval of the per-run means
  (df = runs - 1; independent runs); with one run, batch means (``analysis.batches`` = 10 consecutive
  batches, t with batches - 1 df), which stays valid when epochs are autocorrelated. Both are built on the
  log scale (mean x exp(+-t se/mean)), so an interval of a time never goes below zero. The naive
  t-interval over epochs is kept for comparison only.
* Median and p95: circular block bootstrap (analysis/block_bootstrap.py: blocks within each run; block
  length from Politis & White's rule), expanded percentile interval (Hesterberg 2015) with the number of
  blocks as the sample size.
* Independent samples (a sweep against another): BCa bootstrap of a statistic (:func:`bootstrap_interval`,
  scipy.stats.bootstrap, each sample resampled on its own) and the two-sided Mann-Whitney U test
  (:func:`mann_whitney`).
* Drift (throttling, leaks): Spearman's rank correlation of epoch time against epoch index within each run;
  a run drifts when p < ``drift_pvalue`` *and* the median of its last third differs from the median of its
  first third by at least ``drift_min_change`` (with hundreds of epochs a tiny trend is "significant", so
  the effect size is required too).
* Loss trend: trainbench.core.trend.classify_loss, the definition the run's ``loss_trend`` tag uses too.
* Gradient health: non_finite (any NaN/inf norm), exploding (max > ``grad_norm_max``), vanishing
  (median of the last third < ``grad_norm_min``), else ok.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as st
from statsmodels.tsa.stattools import acf

from trainbench.analysis.block_bootstrap import block_bootstrap_intervals, bootstrap_subset
from trainbench.core import trend as _trend
from trainbench.core.contamination import AUTO
from trainbench.core.contamination import kept as contamination_rule
from trainbench.core.vocab import LossTrend, Outcome, Series, Summary, Tag

_TREND_RANK = _trend.SEVERITY
_GRAD_RANK = {"unknown": 0, "ok": 1, "vanishing": 2, "exploding": 3, LossTrend.NON_FINITE: 4}


def _f(x: Any) -> float | None:
    """A JSON-safe float (None for NaN/inf/None)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def outlier_mask(x: np.ndarray, rule: str = "iqr", iqr_k: float = 1.5, mad_z: float = 3.5) -> np.ndarray:
    """True where ``x`` is an outlier under ``rule`` (iqr | mad | none)."""
    x = np.asarray(x, dtype=float)
    rule = getattr(rule, "value", rule)
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
    h = float(st.t.ppf(0.5 + confidence / 2, n - 1)) * se
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
    policy = getattr(getattr(cfg, "contaminated", AUTO), "value", getattr(cfg, "contaminated", AUTO))
    k = contamination_rule(t, flag if flag.size == t.size else None, policy)  # core/contamination.py
    contaminated = k.contaminated
    if contaminated.any() and not k.used_contaminated:
        t = np.where(contaminated, np.nan, t)
    finite = t[np.isfinite(t)]
    mask = outlier_mask(finite, getattr(cfg.outliers, "value", cfg.outliers), cfg.iqr_k, cfg.mad_z)
    return EpochTimes(measured=t, finite=finite, kept=finite[~mask], contaminated=contaminated,
                      used_contaminated=k.used_contaminated)


# --------------------------------------------------------------------------------------------------
# intervals that hold when epoch times are autocorrelated
# --------------------------------------------------------------------------------------------------


def autocorrelation(x: np.ndarray, c: float = 5.0) -> dict[str, Any]:
    """{lag1, tau_int, ess, window} of one run's epoch times, in epoch order.

    ``tau_int`` = 1 + 2 sum_{k=1..M} rho_k with Sokal's automatic window (the smallest M >= c * tau(M)),
    from statsmodels' FFT autocorrelation; ``ess`` = epochs / tau_int (at most the epoch count). None with
    fewer than 4 epochs or no spread.
    """
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 4 or np.ptp(x) == 0:
        return {"lag1": None, "tau_int": None, "ess": None, "window": None}
    r = acf(x, nlags=n - 1, fft=True)
    taus = 2.0 * np.cumsum(r) - 1.0  # taus[M] = 1 + 2 sum_{k=1..M} r_k
    ok = np.arange(n) >= c * taus
    m = int(ok.argmax()) if ok.any() else n - 1
    tau = max(float(taus[m]), 1.0 / n)
    return {"lag1": _f(r[1]), "tau_int": _f(tau), "ess": _f(min(n, n / tau)), "window": m}


def log_interval(mean: float, se: float, df: float, confidence: float = 0.95) -> tuple[float, float]:
    """mean x exp(+-t se / mean): the t-interval built on the log scale (delta method), so it stays positive.

    Falls back to mean +- t se when the mean is not positive (a time never is, but a generic caller may be).
    """
    t = float(st.t.ppf(0.5 + confidence / 2, df))
    if mean > 0:
        f = math.exp(min(700.0, t * se / mean))
        return (mean / f, mean * f)
    return (mean - t * se, mean + t * se)


def batch_means_interval(x: np.ndarray, batches: int = 10, confidence: float = 0.95) -> tuple[float, float] | None:
    """Interval of the mean of one run's epochs (in order) that holds under autocorrelation: batch means.

    The run is cut into ``batches`` consecutive batches (``np.array_split``); their means are nearly
    independent when a batch spans several autocorrelation times, so se = sd(batch means) / sqrt(batches)
    with t on batches - 1 df, on the log scale (:func:`log_interval`). None with fewer than two epochs.
    """
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    b = min(int(batches), x.size)
    if b < 2:
        return None
    bm = np.array([c.mean() for c in np.array_split(x, b)])
    return log_interval(float(x.mean()), float(bm.std(ddof=1)) / math.sqrt(b), b - 1, confidence)


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


def gradient_health(g: np.ndarray, max_norm: float = 1e3, min_norm: float = 1e-8) -> str:
    g = np.asarray(g, dtype=float)
    if g.size == 0:
        return "unknown"
    if not np.all(np.isfinite(g)):
        return LossTrend.NON_FINITE
    if g.max() > max_norm:
        return "exploding"
    if float(np.median(g[-max(1, g.size // 3):])) < min_norm:
        return "vanishing"
    return "ok"


def worst(values: list[str], rank: dict[str, int]) -> str:
    return max(values, key=lambda v: rank.get(v, 0)) if values else "unknown"


def _mean_headline(kept_all: list[np.ndarray], run_means: list[float], cfg: Any
                   ) -> tuple[tuple[float, float] | None, str | None, str | None]:
    """(headline interval of the mean, basis, why)."""
    runs_with = [k for k in kept_all if k.size]
    if len(run_means) >= 2:
        return (runs_interval(np.array(run_means)), "runs",
                f"{len(run_means)} independent runs: t-interval of the per-run means (df = {len(run_means) - 1}, "
                "log scale); it includes run-to-run variation, which no single run can show")
    if len(runs_with) == 1:
        x = runs_with[0]
        b = min(int(cfg.batches), x.size)
        return (batch_means_interval(x, cfg.batches), "batch_means",
                f"one run: batch means ({b} consecutive batches of ~{x.size // max(1, b)} epochs, t on {b - 1} df, "
                "log scale), valid when epoch times are autocorrelated; the t-interval over epochs "
                "(ci95_mean_epochs) assumes independent epochs and is too narrow when they are not")
    return None, None, None


def model_stats(runs: list[Any], cfg: Any, rng: np.random.Generator) -> dict[str, Any]:
    """Timing and stability of one model over its timed runs (RunRecord objects from runs.py).

    ``cfg`` is an AnalysisConfig. Returns the fields of report.json's ``models.<name>`` that come from
    the data, plus ``per_run`` details.
    """
    kept_all, run_means, per_run, warnings_ = [], [], [], []
    n_measured = n_removed = 0
    trends, grads, autocorr = [], [], []
    for r in runs:
        ep = kept_epochs(r, cfg)
        t, finite, kept, contaminated = ep.measured, ep.finite, ep.kept, ep.contaminated
        n_measured += int(t.size)
        n_removed += ep.removed
        kept_all.append(kept)
        if kept.size:
            run_means.append(float(kept.mean()))
        med = float(np.median(finite)) if finite.size else None
        iqr_ratio = (float(np.subtract(*np.percentile(finite, [75, 25]))) / med
                     if finite.size >= 4 and med else None)
        d = drift(kept, cfg.drift_pvalue, cfg.drift_min_change)
        lt = loss_trend(r.series.get("loss", np.empty(0)), r.warmup_epochs)
        gh = gradient_health(r.series.get(Series.GRAD_NORM, np.empty(0)), cfg.grad_norm_max, cfg.grad_norm_min)
        ac = autocorrelation(kept)
        run_ci = batch_means_interval(kept, cfg.batches)
        trends.append(lt)
        grads.append(gh)
        autocorr.append(ac)
        who = f"run {r.run_name}"
        if iqr_ratio is not None and iqr_ratio >= cfg.noise_iqr_ratio:
            warnings_.append(f"noisy timings in {who}: IQR/median = {iqr_ratio:.0%} "
                             f"(>= {cfg.noise_iqr_ratio:.0%}); is something else using the machine?")
        if d["drifting"]:
            warnings_.append(f"epoch time drifts over {who}: last third {d['change']:+.0%} vs first third "
                             f"(Spearman rho {d['rho']:.2f}); thermal throttling or a leak?")
        if lt["trend"] in ("diverging", LossTrend.NON_FINITE):
            warnings_.append(f"loss {'became non-finite' if lt['trend'] == LossTrend.NON_FINITE else 'is diverging'} "
                             f"in {who} (start {lt['start']}, end {lt['end']})")
        if gh in (LossTrend.NON_FINITE, "exploding", "vanishing"):
            warnings_.append(f"gradients {gh.replace('_', '-')} in {who}")
        if t.size < 2:
            warnings_.append(f"{who} measured only {t.size} epoch(s) after warmup")
        if contaminated.any():
            warnings_.append(f"{int(contaminated.sum())} of {t.size} measured epoch(s) of {who} were flagged "
                             "contaminated (machine load) and " + (
                                 "USED: too few clean epochs, so its timing is that of the busy machine "
                                 "(an upper bound of a quiet one's)" if ep.used_contaminated else "dropped"))
        tau = ac["tau_int"]
        if tau is not None and tau > cfg.autocorr_max_tau:
            msg = (f"epoch times in {who} are autocorrelated (lag-one {ac['lag1']:.2f}, integrated "
                   f"autocorrelation time {tau:.1f} epochs > analysis.autocorr_max_tau={cfg.autocorr_max_tau:g}): "
                   f"its {kept.size} epochs weigh like ~{ac['ess']:.0f} independent ones")
            batch = kept.size // max(1, min(int(cfg.batches), kept.size))
            if batch < 5 * tau:
                msg += (f"; its batches ({batch} epochs) are shorter than 5 autocorrelation times, so even the "
                        "batch-means interval may be too narrow")
            warnings_.append(msg)
        interrupted = getattr(r, "outcome", Outcome.COMPLETED) != Outcome.COMPLETED
        per_run.append({"run_id": r.run_id, "run_name": r.run_name, "outcome": getattr(r, "outcome", None),
                        Summary.EPOCHS_MEASURED: int(t.size),
                        "outliers_removed": int(t.size - kept.size), "mean_ms": _f(kept.mean()) if kept.size
                        else None, "ci95_mean_ms": list(run_ci) if run_ci else None,
                        "iqr_over_median": _f(iqr_ratio), "drift": d, "autocorrelation": ac,
                        Tag.LOSS_TREND: lt["trend"], Tag.GRADIENT_HEALTH: gh, "series_source": r.series_source,
                        "partial": interrupted, Summary.CONTAMINATED_EPOCHS: int(contaminated.sum()),
                        Summary.CONTAMINATED_USED: ep.used_contaminated})
    pooled = np.concatenate(kept_all) if kept_all else np.empty(0)
    desc = describe(pooled)
    ci_epochs = t_interval(pooled)
    head, basis, why = _mean_headline(kept_all, run_means, cfg)
    desc["ci95_mean"] = list(head) if head else None
    desc["ci95_mean_basis"] = basis
    desc["ci95_mean_why"] = why
    desc["ci95_mean_epochs"] = list(ci_epochs) if ci_epochs else None
    xs = bootstrap_subset([k for k in kept_all if k.size], cfg.bootstrap_max_samples, rng)
    bb = block_bootstrap_intervals(xs, rng, cfg.bootstrap_resamples)
    desc["ci95_median"] = list(bb["intervals"][50.0]) if bb["intervals"][50.0] else None
    desc["ci95_p95"] = list(bb["intervals"][95.0]) if bb["intervals"][95.0] else None
    desc["bootstrap"] = {"method": "circular block bootstrap, expanded percentile",
                         "block_lengths": bb["block_lengths"], "blocks": bb["blocks"],
                         "resamples": bb["resamples"], "epochs": int(sum(x.size for x in xs)),
                         "tail_probability": bb["tail"]}
    # Runs that disagree beyond their own intervals (a busy machine, a different clock state): the
    # across-run interval is the one that covers it.
    cis = [(p["run_name"], p["mean_ms"], p["ci95_mean_ms"]) for p in per_run if p["ci95_mean_ms"]]
    disagree = False
    if len(cis) >= 2:
        lo_max = max(cis, key=lambda c: c[2][0])
        hi_min = min(cis, key=lambda c: c[2][1])
        spread = max(c[1] for c in cis) / min(c[1] for c in cis) - 1 if min(c[1] for c in cis) > 0 else math.inf
        if lo_max[2][0] > hi_min[2][1] and spread >= cfg.disagree_min_change:
            disagree = True
            warnings_.append(
                f"runs disagree beyond their own 95% intervals: run {hi_min[0]} {hi_min[1]:.4g} ms "
                f"[{hi_min[2][0]:.4g}, {hi_min[2][1]:.4g}] vs run {lo_max[0]} {lo_max[1]:.4g} ms "
                f"[{lo_max[2][0]:.4g}, {lo_max[2][1]:.4g}] (means {spread:.0%} apart); was the machine busy? "
                "The headline is the across-run interval, which covers this")
    taus = [a["tau_int"] for a in autocorr if a["tau_int"] is not None]
    high = [p["run_name"] for p, a in zip(per_run, autocorr, strict=True)
            if a["tau_int"] is not None and a["tau_int"] > cfg.autocorr_max_tau]
    recommend_seeds = bool(high) and len(run_means) < 3
    if recommend_seeds:
        warnings_.append(f"epoch times are strongly autocorrelated and only {len(run_means)} run(s) are timed: "
                         f"train more seeds (e.g. `python run.py -m model=<this model> trainer.seed=0,1,2`) so "
                         "that the headline becomes the across-run interval of independent runs")
    lag1 = [a["lag1"] for a in autocorr if a["lag1"] is not None]
    ess = [a["ess"] for a in autocorr if a["ess"] is not None]
    starts = [t["start"] for t in trends if t["start"] is not None]
    ends = [t["end"] for t in trends if t["end"] is not None]
    return {
        Summary.EPOCHS_MEASURED: n_measured,
        "outliers_removed": n_removed,
        "samples_used": int(pooled.size),
        Series.EPOCH_TIME_MS: {k: (_f(v) if not isinstance(v, list | str | dict) and v is not None else v)
                          for k, v in desc.items()},
        "autocorrelation": {"lag1_max": _f(max(lag1)) if lag1 else None,
                            "tau_int_max": _f(max(taus)) if taus else None,
                            "ess_total": _f(sum(ess)) if ess else None,
                            "threshold_tau_int": float(cfg.autocorr_max_tau), "high_in_runs": high,
                            "recommend_more_seeds": recommend_seeds},
        "runs_disagree": disagree,
        "stability": {Tag.LOSS_TREND: _trend.worst([t["trend"] for t in trends]),
                      Summary.LOSS_START: _f(np.median(starts)) if starts else None,
                      Summary.LOSS_END: _f(np.median(ends)) if ends else None,
                      Tag.GRADIENT_HEALTH: worst(grads, _GRAD_RANK), "warnings": warnings_},
        "per_run": per_run,
    }
