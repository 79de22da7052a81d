"""Statistics of epoch times and training stability, per run and per model.

Methods (documented in docs/report-schema.md):

* Warmup epochs are dropped (``trainer.warmup_epochs``, or ``warmup_epochs`` in epochs.json).
* Outliers are marked per run: ``iqr`` = Tukey's fences [Q1 - k·IQR, Q3 + k·IQR] (k = 1.5); ``mad`` = robust
  z-score |x - median| / (1.4826·MAD) > 3.5; ``none`` keeps everything. Non-finite times are always dropped.
* Descriptives on the pooled kept epochs: mean, std (ddof=1), CV, min, max, p50, p95, p99.
* 95% t-interval of the mean. Epoch times within a run are autocorrelated, so that interval is too narrow;
  with two or more completed runs, the t-interval of the per-run means (df = runs - 1) is the headline.
* BCa bootstrap intervals (scipy.stats.bootstrap) for the median and p95 of the pooled kept epochs; above
  ``analysis.bootstrap_max_samples`` epochs a seeded random subsample is bootstrapped (the jackknife that
  BCa needs costs O(n²)), which can only widen the interval.
* Drift (throttling, leaks): Spearman's rank correlation of epoch time against epoch index within each run;
  a run drifts when p < ``drift_pvalue`` *and* the median of its last third differs from the median of its
  first third by at least ``drift_min_change`` (with hundreds of epochs a tiny trend is "significant", so
  the effect size is required too).
* Loss trend: median of the first vs the last tenth of the epochs (warmup included), relative to |start|.
* Gradient health: non_finite (any NaN/inf norm), exploding (max > ``grad_norm_max``), vanishing
  (median of the last third < ``grad_norm_min``), else ok.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy import stats as st

_TREND_RANK = {"unknown": 0, "decreasing": 1, "flat": 2, "increasing": 3, "non_finite": 4}
_GRAD_RANK = {"unknown": 0, "ok": 1, "vanishing": 2, "exploding": 3, "non_finite": 4}


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate-data warnings: we check the result instead
        res = st.bootstrap((x,), fn, n_resamples=resamples, method="BCa", vectorized=True, rng=rng,
                           batch=max(1, min(resamples, 2_000_000 // max(1, x.size))))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return (lo, hi)


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


def loss_trend(loss: np.ndarray, rise: float = 0.10) -> dict[str, Any]:
    """{trend, start, end}: trend is decreasing | flat | increasing | non_finite | unknown."""
    loss = np.asarray(loss, dtype=float)
    if loss.size == 0:
        return {"trend": "unknown", "start": None, "end": None}
    if not np.all(np.isfinite(loss)):
        finite = loss[np.isfinite(loss)]
        return {"trend": "non_finite", "start": _f(finite[0]) if finite.size else None,
                "end": None}
    k = max(1, loss.size // 10)
    start, end = float(np.median(loss[:k])), float(np.median(loss[-k:]))
    if loss.size < 2:
        return {"trend": "unknown", "start": start, "end": end}
    rel = (end - start) / max(abs(start), 1e-12)
    trend = "increasing" if rel > rise else ("decreasing" if rel < -0.01 else "flat")
    return {"trend": trend, "start": start, "end": end}


def gradient_health(g: np.ndarray, max_norm: float = 1e3, min_norm: float = 1e-8) -> str:
    g = np.asarray(g, dtype=float)
    if g.size == 0:
        return "unknown"
    if not np.all(np.isfinite(g)):
        return "non_finite"
    if g.max() > max_norm:
        return "exploding"
    if float(np.median(g[-max(1, g.size // 3):])) < min_norm:
        return "vanishing"
    return "ok"


def worst(values: list[str], rank: dict[str, int]) -> str:
    return max(values, key=lambda v: rank.get(v, 0)) if values else "unknown"


def model_stats(runs: list[Any], cfg: Any, rng: np.random.Generator) -> dict[str, Any]:
    """Timing and stability of one model over its completed runs (RunRecord objects from runs.py).

    ``cfg`` is an AnalysisConfig. Returns the fields of report.json's ``models.<name>`` that come from
    the data, plus ``per_run`` details.
    """
    rule = getattr(cfg.outliers, "value", cfg.outliers)
    kept_all, run_means, per_run, warnings_ = [], [], [], []
    n_measured = n_removed = 0
    trends, grads = [], []
    for r in runs:
        t = r.measured("epoch_time_ms")
        finite = t[np.isfinite(t)]
        n_measured += int(t.size)
        mask = outlier_mask(finite, rule, cfg.iqr_k, cfg.mad_z)
        kept = finite[~mask]
        n_removed += int(mask.sum()) + int(t.size - finite.size)
        kept_all.append(kept)
        if kept.size:
            run_means.append(float(kept.mean()))
        med = float(np.median(finite)) if finite.size else None
        iqr_ratio = (float(np.subtract(*np.percentile(finite, [75, 25]))) / med
                     if finite.size >= 4 and med else None)
        d = drift(kept, cfg.drift_pvalue, cfg.drift_min_change)
        lt = loss_trend(r.series.get("loss", np.empty(0)), cfg.loss_rise)
        gh = gradient_health(r.series.get("grad_norm", np.empty(0)), cfg.grad_norm_max, cfg.grad_norm_min)
        trends.append(lt)
        grads.append(gh)
        who = f"run {r.run_name}"
        if iqr_ratio is not None and iqr_ratio >= cfg.noise_iqr_ratio:
            warnings_.append(f"noisy timings in {who}: IQR/median = {iqr_ratio:.0%} "
                             f"(>= {cfg.noise_iqr_ratio:.0%}); is something else using the machine?")
        if d["drifting"]:
            warnings_.append(f"epoch time drifts over {who}: last third {d['change']:+.0%} vs first third "
                             f"(Spearman rho {d['rho']:.2f}); thermal throttling or a leak?")
        if lt["trend"] in ("increasing", "non_finite"):
            warnings_.append(f"loss {'became non-finite' if lt['trend'] == 'non_finite' else 'is rising'} "
                             f"in {who} (start {lt['start']}, end {lt['end']}): training may be diverging")
        if gh in ("non_finite", "exploding", "vanishing"):
            warnings_.append(f"gradients {gh.replace('_', '-')} in {who}")
        if t.size < 2:
            warnings_.append(f"{who} measured only {t.size} epoch(s) after warmup")
        per_run.append({"run_id": r.run_id, "run_name": r.run_name, "epochs_measured": int(t.size),
                        "outliers_removed": int(t.size - kept.size), "mean_ms": _f(kept.mean()) if kept.size
                        else None, "iqr_over_median": _f(iqr_ratio), "drift": d, "loss_trend": lt["trend"],
                        "gradient_health": gh, "series_source": r.series_source})
    pooled = np.concatenate(kept_all) if kept_all else np.empty(0)
    desc = describe(pooled)
    ci_epochs = t_interval(pooled)
    ci_runs = t_interval(np.array(run_means)) if len(run_means) >= 2 else None
    desc["ci95_mean"] = list(ci_runs or ci_epochs) if (ci_runs or ci_epochs) else None
    desc["ci95_mean_basis"] = "runs" if ci_runs else ("epochs" if ci_epochs else None)
    desc["ci95_mean_epochs"] = list(ci_epochs) if ci_epochs else None
    med_ci = bca_interval(pooled, "p50", cfg.bootstrap_resamples, rng, cfg.bootstrap_max_samples)
    p95_ci = bca_interval(pooled, "p95", cfg.bootstrap_resamples, rng, cfg.bootstrap_max_samples)
    desc["ci95_median"] = list(med_ci) if med_ci else None
    desc["ci95_p95"] = list(p95_ci) if p95_ci else None
    starts = [t["start"] for t in trends if t["start"] is not None]
    ends = [t["end"] for t in trends if t["end"] is not None]
    return {
        "epochs_measured": n_measured,
        "outliers_removed": n_removed,
        "samples_used": int(pooled.size),
        "epoch_time_ms": {k: (_f(v) if not isinstance(v, list | str) and v is not None else v)
                          for k, v in desc.items()},
        "stability": {"loss_trend": worst([t["trend"] for t in trends], _TREND_RANK),
                      "loss_start": _f(np.median(starts)) if starts else None,
                      "loss_end": _f(np.median(ends)) if ends else None,
                      "gradient_health": worst(grads, _GRAD_RANK), "warnings": warnings_},
        "per_run": per_run,
    }
