"""Circular block bootstrap of percentiles of epoch times, resampling each run on its own so that
autocorrelated epochs keep their order (the median and p95 intervals of report.json).

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
