"""Two-stage bootstrap of percentiles of epoch times (the median and p95 intervals of report.json): the runs
are resampled with replacement (between-run variation: runs that disagree widen the interval), then each
drawn run is resampled on its own by circular blocks, so that autocorrelated epochs keep their order. With
one run it is the circular block bootstrap of that run.

Block length per run: Politis & White's rule (``arch.bootstrap.optimal_block_length``, with the 2009
correction), at most a tenth of the run. Interval: the expanded percentile interval (Hesterberg 2015) with
the number of blocks as the sample size.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from arch.bootstrap import optimal_block_length
from scipy import stats as st

from trainbench.core.timeseries import t_quantile

#: Resample-by-epoch elements per block-bootstrap chunk (small enough to stay in cache).
_CHUNK_ELEMENTS = 250_000


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


def _circular_counts(rng: np.random.Generator, sizes: list[int], lengths: list[int], R: int,
                     copies: np.ndarray | None = None) -> np.ndarray:
    """(R, sum(sizes) + len(sizes)) how often each epoch appears in R circular-block resamples.

    ``copies`` (R, runs): how many independent block resamples of each run resample r holds (the first stage
    of the two-stage bootstrap: runs drawn with replacement); None: one of each.

    Runs are laid side by side, each followed by one spare column (always 0 in the result). Run i of n
    epochs is resampled on its own: ceil(n/L) blocks of L = ``lengths[i]`` starting anywhere, wrapping
    round the run's end, the last block cut so that the resample has exactly n epochs. A block covering
    s .. e-1 is +1 at s and -1 at e in a difference array (a wrapped one: +1 at s, -1 at the run's end,
    +1 at its start, -1 at e - n); one cumulative sum over the row gives the counts.
    """
    width = sum(sizes) + len(sizes)
    plus, minus = [], []
    base = 0
    for i, (n, L) in enumerate(zip(sizes, lengths, strict=True)):
        rows = np.arange(R, dtype=np.int64) if copies is None else np.repeat(np.arange(R, dtype=np.int64),
                                                                              copies[:, i])
        if rows.size == 0:
            base += n + 1
            continue
        row = (rows * width)[:, None]
        k = -(-n // L)
        lens = np.full(k, L)
        lens[-1] = n - (k - 1) * L
        st_ = rng.integers(0, n, size=(rows.size, k))
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
                              lengths: list[int] | None = None, two_stage: bool = True) -> dict[str, Any]:
    """Two-stage bootstrap intervals of percentiles of the pooled epochs of one model's runs.

    Stage one (``two_stage`` and two or more runs): as many runs as there are are drawn with replacement.
    Stage two: each drawn run (epochs in order) is resampled on its own with circular blocks of its
    :func:`block_length`; the resamples are pooled, and the percentiles (numpy's linear rule, as in
    :func:`describe`) computed. Without stage one every run appears once in every resample, which shows
    within-run uncertainty only (``two_stage=False``, for comparison).
    The interval is the expanded percentile interval (Hesterberg 2015) with the number of blocks k as the
    sample size: the tail probability a' solves z_{1-a'/2} = sqrt(k/(k-1)) t_{k-1, 1-a/2}, which widens the
    plain percentile interval when there are few blocks (strong autocorrelation) and leaves it alone when
    there are many. Returns {intervals: {p: (lo, hi) | None}, block_lengths, blocks, resamples, tail,
    two_stage}.
    """
    xs = [np.asarray(r, dtype=float) for r in runs]
    xs = [r[np.isfinite(r)] for r in xs]
    xs = [r for r in xs if r.size]
    stage_one = bool(two_stage) and len(xs) >= 2
    none = {"intervals": dict.fromkeys(percentiles), "block_lengths": [], "blocks": 0,
            "resamples": int(resamples), "tail": None, "two_stage": stage_one}
    pooled = np.concatenate(xs) if xs else np.empty(0)
    if pooled.size < 10:
        return none
    if np.ptp(pooled) == 0:
        v = float(pooled[0])
        return {**none, "intervals": {p: (v, v) for p in percentiles}}
    Ls = list(lengths) if lengths is not None else [block_length(r) for r in xs]
    k = sum(-(-r.size // L) for r, L in zip(xs, Ls, strict=True))
    t = t_quantile(max(1, k - 1), confidence)
    tail = float(st.norm.sf(math.sqrt(k / max(1, k - 1)) * t))  # a'/2
    order = np.argsort(pooled, kind="stable")
    sorted_x = pooled[order]
    N = pooled.size
    # column of each pooled epoch in _circular_counts' layout (one spare column after each run)
    col = np.arange(N) + np.repeat(np.arange(len(xs)), [r.size for r in xs])
    col_sorted = col[order]
    chunk = max(1, min(resamples, _CHUNK_ELEMENTS // N))
    stats_ = np.empty((len(percentiles), resamples))
    sizes = [r.size for r in xs]
    runs_n = len(xs)
    for a in range(0, resamples, chunk):
        R = min(chunk, resamples - a)
        copies = rng.multinomial(runs_n, np.full(runs_n, 1.0 / runs_n), size=R) if stage_one else None
        # resampled epochs at or below each sorted value; the j-th smallest resampled epoch (0-based) of a
        # resample is sorted_x[#(cum <= j)]; a resample holds n_r epochs (runs of unequal length drawn)
        cum = np.cumsum(_circular_counts(rng, sizes, Ls, R, copies)[:, col_sorted], axis=1)
        n_r = cum[:, -1]
        for i, p in enumerate(percentiles):
            h = (n_r - 1) * p / 100.0
            j = np.floor(h).astype(np.int64)
            j1 = np.minimum(n_r - 1, j + 1)
            lo_v = sorted_x[np.minimum((cum <= j[:, None]).sum(axis=1), N - 1)]
            hi_v = sorted_x[np.minimum((cum <= j1[:, None]).sum(axis=1), N - 1)]
            stats_[i, a:a + R] = lo_v + (h - j) * (hi_v - lo_v)
    ints = {}
    for i, p in enumerate(percentiles):
        lo, hi = np.quantile(stats_[i], [tail, 1 - tail])
        ints[p] = (float(lo), float(hi))
    return {"intervals": ints, "block_lengths": Ls, "blocks": int(k), "resamples": int(resamples), "tail": tail,
            "two_stage": stage_one}


def bootstrap_subset(xs: list[np.ndarray], max_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
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
