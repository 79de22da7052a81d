"""Statistics of epoch times and training stability, per run and per model.

Methods (documented in docs/report-schema.md):

* Warmup epochs are dropped (``trainer.warmup_epochs``, or ``warmup_epochs`` in epochs.json).
* Outliers are marked per run: ``iqr`` = Tukey's fences [Q1 - k·IQR, Q3 + k·IQR] (k = 1.5); ``mad`` = robust
  z-score |x - median| / (1.4826·MAD) > 3.5; ``none`` keeps everything. Non-finite times are always dropped.
* Descriptives on the pooled kept epochs: mean, std (ddof=1), CV, min, max, p50, p95, p99.
* Autocorrelation per run: lag-one autocorrelation and the integrated autocorrelation time tau (Sokal's
  automatic window, c = 5, on statsmodels' FFT autocorrelation); effective sample size = epochs / tau.
* Headline 95% interval of the mean: with two or more timed runs, the t-interval of the per-run means
  (df = runs - 1; independent runs); with one run, batch means (``analysis.batches`` = 10 consecutive
  batches, t with batches - 1 df), which stays valid when epochs are autocorrelated. Both are built on the
  log scale (mean x exp(+-t se/mean)), so an interval of a time never goes below zero. The naive
  t-interval over epochs is kept for comparison only.
* Median and p95: circular block bootstrap (blocks within each run; block length from Politis & White's
  rule, ``arch.bootstrap.optimal_block_length``), expanded percentile interval (Hesterberg 2015) with the
  number of blocks as the sample size.
* Drift (throttling, leaks): Spearman's rank correlation of epoch time against epoch index within each run;
  a run drifts when p < ``drift_pvalue`` *and* the median of its last third differs from the median of its
  first third by at least ``drift_min_change`` (with hundreds of epochs a tiny trend is "significant", so
  the effect size is required too).
* Loss trend: trainbench.trend.classify_loss, the definition the run's ``loss_trend`` tag uses too.
* Gradient health: non_finite (any NaN/inf norm), exploding (max > ``grad_norm_max``), vanishing
  (median of the last third < ``grad_norm_min``), else ok.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from arch.bootstrap import optimal_block_length
from scipy import stats as st
from statsmodels.tsa.stattools import acf

from trainbench import trend as _trend

_TREND_RANK = _trend.SEVERITY
#: Resample-by-epoch elements per block-bootstrap chunk (small enough to stay in cache).
_CHUNK_ELEMENTS = 250_000
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


# --------------------------------------------------------------------------------------------------
# intervals that hold when epoch times are autocorrelated (issue 19)
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


def block_length(x: np.ndarray, max_fraction: float = 0.1) -> int:
    """Circular-bootstrap block length of one run (Politis & White 2004 with the 2009 correction, as
    implemented by ``arch.bootstrap.optimal_block_length``), between 1 and ``max_fraction`` x epochs (at
    least ten blocks per run)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 10 or np.ptp(x) == 0:
        return 1
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # runs of equal values: arch divides by zero, we check the result
        b = float(optimal_block_length(x)["circular"].iloc[0])
    cap = max(1, int(x.size * max_fraction))
    return int(min(cap, max(1, math.ceil(b)))) if math.isfinite(b) else 1


def _circular_counts(rng: np.random.Generator, sizes: list[int], lengths: list[int], R: int) -> np.ndarray:
    """(R, sum(sizes) + len(sizes)) how often each epoch appears in R circular-block resamples.

    Runs are laid side by side, each followed by one spare column (always 0 in the result). Run i of n
    epochs is resampled on its own: ceil(n/L) blocks of L = ``lengths[i]`` starting anywhere, wrapping
    round the run's end, the last block cut so that the resample has exactly n epochs. A block covering
    s .. e-1 is +1 at s and -1 at e in a difference array (a wrapped one: +1 at s, -1 at the run's end,
    +1 at its start, -1 at e - n); one cumulative sum over the row gives the counts.
    """
    width = sum(sizes) + len(sizes)
    row = (np.arange(R, dtype=np.int64) * width)[:, None]
    plus, minus = [], []
    base = 0
    for n, L in zip(sizes, lengths, strict=True):
        k = -(-n // L)
        lens = np.full(k, L)
        lens[-1] = n - (k - 1) * L
        st_ = rng.integers(0, n, size=(R, k))
        e = st_ + lens
        wrap = e > n
        at = row + base
        plus += [(at + st_).ravel(), np.broadcast_to(at, wrap.shape)[wrap]]
        minus += [(at + np.where(wrap, n, e)).ravel(), (at + e - n)[wrap]]
        base += n + 1
    size = R * width
    d = np.bincount(np.concatenate(plus), minlength=size) - np.bincount(np.concatenate(minus), minlength=size)
    return np.cumsum(d.reshape(R, width), axis=1)


def block_bootstrap_intervals(runs: list[np.ndarray], rng: np.random.Generator, resamples: int = 2000,
                              percentiles: tuple[float, ...] = (50.0, 95.0), confidence: float = 0.95,
                              lengths: list[int] | None = None) -> dict[str, Any]:
    """Circular block bootstrap intervals of percentiles of the pooled epochs of one model's runs.

    Each run (epochs in order) is resampled on its own with circular blocks of its :func:`block_length`,
    the resamples are pooled, and the percentiles (numpy's linear rule, as in :func:`describe`) computed.
    The interval is the expanded percentile interval (Hesterberg 2015) with the number of blocks k as the
    sample size: the tail probability a' solves z_{1-a'/2} = sqrt(k/(k-1)) t_{k-1, 1-a/2}, which widens the
    plain percentile interval when there are few blocks (strong autocorrelation) and leaves it alone when
    there are many. Returns {intervals: {p: (lo, hi) | None}, block_lengths, blocks, resamples, tail}.
    """
    xs = [np.asarray(r, dtype=float) for r in runs]
    xs = [r[np.isfinite(r)] for r in xs]
    xs = [r for r in xs if r.size]
    none = {"intervals": dict.fromkeys(percentiles), "block_lengths": [], "blocks": 0,
            "resamples": int(resamples), "tail": None}
    pooled = np.concatenate(xs) if xs else np.empty(0)
    if pooled.size < 10:
        return none
    if np.ptp(pooled) == 0:
        v = float(pooled[0])
        return {**none, "intervals": {p: (v, v) for p in percentiles}}
    Ls = list(lengths) if lengths is not None else [block_length(r) for r in xs]
    k = sum(-(-r.size // L) for r, L in zip(xs, Ls, strict=True))
    t = float(st.t.ppf(0.5 + confidence / 2, max(1, k - 1)))
    tail = float(st.norm.sf(math.sqrt(k / max(1, k - 1)) * t))  # a'/2
    order = np.argsort(pooled, kind="stable")
    sorted_x = pooled[order]
    N = pooled.size
    # column of each pooled epoch in _circular_counts' layout (one spare column after each run)
    col = np.arange(N) + np.repeat(np.arange(len(xs)), [r.size for r in xs])
    col_sorted = col[order]
    pos = [(N - 1) * p / 100.0 for p in percentiles]
    js = sorted({j for h in pos for j in (int(math.floor(h)), min(N - 1, int(math.floor(h)) + 1))})
    chunk = max(1, min(resamples, _CHUNK_ELEMENTS // N))
    stats_ = np.empty((len(percentiles), resamples))
    sizes = [r.size for r in xs]
    for a in range(0, resamples, chunk):
        R = min(chunk, resamples - a)
        # resampled epochs at or below each sorted value; the j-th smallest resampled epoch (0-based) is
        # sorted_x[#(cum <= j)]
        cum = np.cumsum(_circular_counts(rng, sizes, Ls, R)[:, col_sorted], axis=1)
        kth = np.array([np.searchsorted(c, js, side="right") for c in cum])  # (R, len(js))
        vals = sorted_x[np.minimum(kth, N - 1)]
        at = {j: vals[:, i] for i, j in enumerate(js)}
        for i, h in enumerate(pos):
            j = int(math.floor(h))
            lo_v, hi_v = at[j], at[min(N - 1, j + 1)]
            stats_[i, a:a + R] = lo_v + (h - j) * (hi_v - lo_v)
    ints = {}
    for i, p in enumerate(percentiles):
        lo, hi = np.quantile(stats_[i], [tail, 1 - tail])
        ints[p] = (float(lo), float(hi))
    return {"intervals": ints, "block_lengths": Ls, "blocks": int(k), "resamples": int(resamples), "tail": tail}


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
    """{trend, start, end} of one run by :func:`trainbench.trend.classify_loss`, the definition behind the
    run's ``loss_trend`` tag: converging | flat | diverging | non_finite | unknown, warmup dropped."""
    t = _trend.classify_loss(np.asarray(loss, dtype=float), warmup_epochs)
    return {"trend": t.trend, "start": _f(t.start), "end": _f(t.end)}


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


def _bootstrap_subset(xs: list[np.ndarray], max_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """At most ``max_samples`` epochs for the block bootstrap: whole runs in a seeded random order (a run
    longer than the cap contributes a random contiguous window), so each run's order is kept. Fewer epochs
    can only widen the interval."""
    if sum(x.size for x in xs) <= max_samples:
        return xs
    out, total = [], 0
    for i in rng.permutation(len(xs)):
        x = xs[i]
        room = max_samples - total
        if room <= 0:
            break
        if x.size > room:
            if out:
                continue
            start = int(rng.integers(0, x.size - room + 1))
            x = x[start:start + room]
        out.append(x)
        total += x.size
    return out


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
    rule = getattr(cfg.outliers, "value", cfg.outliers)
    kept_all, run_means, per_run, warnings_ = [], [], [], []
    n_measured = n_removed = 0
    trends, grads, autocorr = [], [], []
    for r in runs:
        t = r.measured("epoch_time_ms")
        # epochs the harness flagged as measured on a busy machine (a per-epoch `contaminated` 0/1 series in
        # epochs.json, where it exists) are dropped like non-finite times
        flag = r.measured("contaminated") if "contaminated" in r.series else np.empty(0)
        contaminated = (flag[:t.size] > 0.5) if flag.size == t.size else np.zeros(t.size, dtype=bool)
        if contaminated.any():
            t = np.where(contaminated, np.nan, t)
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
        lt = loss_trend(r.series.get("loss", np.empty(0)), r.warmup_epochs)
        gh = gradient_health(r.series.get("grad_norm", np.empty(0)), cfg.grad_norm_max, cfg.grad_norm_min)
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
        if lt["trend"] in ("diverging", "non_finite"):
            warnings_.append(f"loss {'became non-finite' if lt['trend'] == 'non_finite' else 'is diverging'} "
                             f"in {who} (start {lt['start']}, end {lt['end']})")
        if gh in ("non_finite", "exploding", "vanishing"):
            warnings_.append(f"gradients {gh.replace('_', '-')} in {who}")
        if t.size < 2:
            warnings_.append(f"{who} measured only {t.size} epoch(s) after warmup")
        if contaminated.any():
            warnings_.append(f"{int(contaminated.sum())} epoch(s) of {who} were flagged contaminated (machine "
                             "load) and dropped")
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
        interrupted = getattr(r, "outcome", "completed") != "completed"
        per_run.append({"run_id": r.run_id, "run_name": r.run_name, "outcome": getattr(r, "outcome", None),
                        "epochs_measured": int(t.size),
                        "outliers_removed": int(t.size - kept.size), "mean_ms": _f(kept.mean()) if kept.size
                        else None, "ci95_mean_ms": list(run_ci) if run_ci else None,
                        "iqr_over_median": _f(iqr_ratio), "drift": d, "autocorrelation": ac,
                        "loss_trend": lt["trend"], "gradient_health": gh, "series_source": r.series_source,
                        "partial": interrupted, "contaminated_epochs": int(contaminated.sum())})
    pooled = np.concatenate(kept_all) if kept_all else np.empty(0)
    desc = describe(pooled)
    ci_epochs = t_interval(pooled)
    head, basis, why = _mean_headline(kept_all, run_means, cfg)
    desc["ci95_mean"] = list(head) if head else None
    desc["ci95_mean_basis"] = basis
    desc["ci95_mean_why"] = why
    desc["ci95_mean_epochs"] = list(ci_epochs) if ci_epochs else None
    xs = _bootstrap_subset([k for k in kept_all if k.size], cfg.bootstrap_max_samples, rng)
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
        "epochs_measured": n_measured,
        "outliers_removed": n_removed,
        "samples_used": int(pooled.size),
        "epoch_time_ms": {k: (_f(v) if not isinstance(v, list | str | dict) and v is not None else v)
                          for k, v in desc.items()},
        "autocorrelation": {"lag1_max": _f(max(lag1)) if lag1 else None,
                            "tau_int_max": _f(max(taus)) if taus else None,
                            "ess_total": _f(sum(ess)) if ess else None,
                            "threshold_tau_int": float(cfg.autocorr_max_tau), "high_in_runs": high,
                            "recommend_more_seeds": recommend_seeds},
        "runs_disagree": disagree,
        "stability": {"loss_trend": _trend.worst([t["trend"] for t in trends]),
                      "loss_start": _f(np.median(starts)) if starts else None,
                      "loss_end": _f(np.median(ends)) if ends else None,
                      "gradient_health": worst(grads, _GRAD_RANK), "warnings": warnings_},
        "per_run": per_run,
    }
