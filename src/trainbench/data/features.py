"""Causal bar features, normalised with training-split statistics, moved to the device once.

Every feature at bar t uses bars up to and including t only, so a change to a later bar never changes
an earlier feature (tests/data/test_features.py checks exactly that). Rolling statistics never reach
back into another instrument. A *segment* is a run of bars of one instrument without a session gap;
model windows never cross a segment boundary (:meth:`FeatureSet.window_starts`).

Columns of :attr:`FeatureSet.values` (in this order, see :data:`FEATURE_NAMES`):

=============  ==============================================================================
log_return     log(close_t / close_{t-1}); 0 on the first bar of a segment
range          log(high_t / low_t)
body           (close_t - open_t) / max(high_t - low_t, tick): candle direction in [-1, 1]
close_loc      (close_t - low_t) / max(high_t - low_t, tick): where the close sits in the range
volume_z       (volume_t - trailing mean) / trailing std over ``volume_window`` bars
volatility     trailing std of log returns over ``vol_window`` bars
tod_sin/cos    time of day (UTC) on the unit circle
dow_sin/cos    day of week on the unit circle
=============  ==============================================================================

The last four are *known future inputs* (a model may read them for bars it predicts; TFT does).
Each column is z-scored per instrument with the mean and std of that instrument's training bars.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from trainbench.core.errors import DataError
from trainbench.core.windows import gap_threshold_ns, segment_starts, train_split
from trainbench.data.arrays import Bars

FEATURE_NAMES = ["log_return", "range", "body", "close_loc", "volume_z", "volatility",
                 "tod_sin", "tod_cos", "dow_sin", "dow_cos"]
KNOWN_NAMES = FEATURE_NAMES[-4:]

log = logging.getLogger(__name__)

_NS_PER_DAY = 86_400_000_000_000


@dataclass
class FeatureSet:
    """Model-ready tensors for N bars, all on one device.

    Attributes:
        values: (N, F) float32, normalised features (columns: :data:`FEATURE_NAMES`).
        known: (N, 4) float32, the calendar columns of ``values`` (known in advance).
        returns: (N,) float32, raw log return ending at each bar (0 at segment starts).
        close_ticks: (N,) float32, close price in ticks (close / tick size, rounded).
        instrument: (N,) int64, instrument index.
        segment: (N,) int64, segment id (instrument x session), non-decreasing.
        is_train: (N,) bool, the first ``train_frac`` of each instrument's bars.
        return_std: float, std of ``returns`` over training bars (to scale targets).
        symbols: the instruments' names, by index.
        without_windows: the instruments that gave no training window to a model's
            :meth:`window_starts` (index -> name), each warned about once: they are in the data but
            contribute nothing to training (train.py tags them and leaves them out of ``data_instruments``).
    """

    values: torch.Tensor
    known: torch.Tensor
    returns: torch.Tensor
    close_ticks: torch.Tensor
    instrument: torch.Tensor
    segment: torch.Tensor
    is_train: torch.Tensor
    names: list[str]
    n_instruments: int
    return_std: float
    symbols: list[str] = field(default_factory=list)
    without_windows: dict[int, str] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return int(self.values.shape[1])

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def window_starts(self, window: int, horizon: int = 0, split: str = "train") -> torch.Tensor:
        """Start indices s of every window ``[s, s + window + horizon)`` that lies in one segment and split.

        ``split`` is ``train``, ``val`` or ``all``. Returns a (W,) int64 tensor on the device.
        """
        span = window + horizon
        n = len(self)
        if span > n:
            return torch.empty(0, dtype=torch.long, device=self.values.device)
        seg = self.segment
        ok = seg[: n - span + 1] == seg[span - 1:]  # segment ids are non-decreasing: ends equal => all equal
        if split != "all":
            tr = self.is_train.to(torch.int32)
            csum = torch.cat([tr.new_zeros(1), tr.cumsum(0)])
            in_train = csum[span:] - csum[: n - span + 1]  # train bars inside each span
            ok &= (in_train == span) if split == "train" else (in_train == 0)
        if split == "train":
            self._note_without_windows(ok, span)
        return torch.nonzero(ok).squeeze(1)

    def _note_without_windows(self, ok: torch.Tensor, span: int) -> None:
        """Warn once about each instrument with too few training bars for one window of ``span`` bars."""
        counts = torch.bincount(self.instrument[: ok.shape[0]][ok], minlength=self.n_instruments).tolist()
        for i, c in enumerate(counts):
            if c or i in self.without_windows:
                continue
            name = self.symbols[i] if i < len(self.symbols) else f"#{i}"
            self.without_windows[i] = name
            bars = int((self.instrument == i).sum())
            train = int(((self.instrument == i) & self.is_train).sum())
            log.warning("instrument %s has too few bars for one training window of %d bars (%d bars, %d in the "
                        "training split, none in one segment that long): it contributes nothing to training and "
                        "is left out of the data_instruments tag. Use more data for it, a shorter window, or "
                        "leave it out of the data.", name, span, bars, train)

    def windows(self, window: int, tensor: torch.Tensor | None = None) -> torch.Tensor:
        """A strided view (N - window + 1, window, F) of ``tensor`` (default ``values``); no copy.

        Index it with :meth:`window_starts` output to get a batch: ``fs.windows(w)[starts]``.
        """
        t = self.values if tensor is None else tensor
        return t.unfold(0, window, 1).movedim(-1, 1) if t.ndim == 2 else t.unfold(0, window, 1)

    def to(self, device: torch.device | str) -> FeatureSet:
        move = {k: getattr(self, k).to(device) for k in
                ("values", "known", "returns", "close_ticks", "instrument", "segment", "is_train")}
        return FeatureSet(**move, names=self.names, n_instruments=self.n_instruments,
                          return_std=self.return_std, symbols=self.symbols, without_windows=self.without_windows)


def _segment_starts(bars: Bars, gap_ns: int) -> np.ndarray:
    """Boolean (N,): True where a new segment starts (:func:`trainbench.core.windows.segment_starts`)."""
    return segment_starts(bars.ts, bars.instrument, bars.contract, gap_ns)


def _trailing(x: np.ndarray, start: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Trailing mean and std (ddof=0) of x over at most w bars, never before ``start`` (per-row index).

    Cumulative sums are restarted per call, never per row, so this is O(N) for any window.
    """
    n = x.shape[0]
    idx = np.arange(n)
    lo = idx - (w - 1)
    np.maximum(lo, start, out=lo)
    cnt = (idx + 1 - lo).astype(np.float64)
    c = np.empty(n + 1)
    c[0] = 0.0
    np.cumsum(x, out=c[1:])
    mean = c[idx + 1] - c[lo]
    mean /= cnt
    np.cumsum(x * x, out=c[1:])
    var = c[idx + 1] - c[lo]
    var /= cnt
    var -= mean * mean
    np.maximum(var, 0.0, out=var)
    return mean, np.sqrt(var, out=var)


def _blocks(inst: np.ndarray) -> list[tuple[int, int, int]]:
    """(instrument, first row, end row) of each contiguous run of one instrument."""
    edges = np.flatnonzero(inst[1:] != inst[:-1]) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [inst.shape[0]]])
    return [(int(inst[a]), int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def compute_features(bars: Bars, vol_window: int = 30, volume_window: int = 60,
                     session_gap_minutes: float = 30.0, train_frac: float = 0.8,
                     device: torch.device | str = "cpu") -> FeatureSet:
    """Bars -> :class:`FeatureSet` on ``device``. Pure numpy until the single transfer at the end.

    Vectorised and allocation-lean (columns are written into one (F, N) buffer and normalised in place):
    a million bars take well under a second on one core (benchmarks/bench_data.py).
    """
    n = len(bars)
    if n < 2:
        raise DataError(f"{n} bar(s) are too few to compute features: at least 2 are needed.")
    inst = bars.instrument.astype(np.int64)
    blocks = _blocks(inst)
    if len({k for k, _, _ in blocks}) != len(blocks):
        raise DataError("bars must hold each instrument as one contiguous block sorted by time "
                        "(read_bars returns them so); sort them by (instrument, ts) first.")
    new_seg = _segment_starts(bars, gap_threshold_ns(bars.schema, session_gap_minutes))
    segment = np.cumsum(new_seg) - 1
    inst_start = np.empty(n, np.int64)
    for _, a, b in blocks:
        inst_start[a:b] = a

    o, h, lo, c = bars.open, bars.high, bars.low, bars.close
    v = bars.volume.astype(np.float64, copy=False)
    tick = bars.tick_size[inst] if len(blocks) > 1 else np.float64(bars.tick_size[inst[0]])
    raw = np.empty((len(FEATURE_NAMES), n))  # one row per feature, normalised in place below
    logc = np.log(c)
    ret = raw[0]
    ret[0] = 0.0
    np.subtract(logc[1:], logc[:-1], out=ret[1:])
    ret[new_seg] = 0.0
    np.log(h / lo, out=raw[1])
    span = np.maximum(h - lo, tick)
    np.divide(c - o, span, out=raw[2])
    np.divide(c - lo, span, out=raw[3])
    vm, vs = _trailing(v, inst_start, volume_window)
    np.maximum(vs, 1e-9, out=vs)
    np.divide(v - vm, vs, out=raw[4])
    raw[5] = _trailing(ret, inst_start, vol_window)[1]
    tod = (bars.ts % _NS_PER_DAY) * (2 * np.pi / _NS_PER_DAY)
    dow = ((bars.ts // _NS_PER_DAY + 3) % 7) * (2 * np.pi / 7)  # 1970-01-01 was a Thursday (index 3)
    np.sin(tod, out=raw[6])
    np.cos(tod, out=raw[7])
    np.sin(dow, out=raw[8])
    np.cos(dow, out=raw[9])
    returns = ret.astype(np.float32)  # raw returns, before normalisation

    # train split: the first train_frac of each instrument's bars; z-score with their statistics only
    is_train = train_split(inst, train_frac)  # the same split the window count of a planned dataset uses
    train_ret = []
    for _, a, b in blocks:
        n_train = int(is_train[a:b].sum())
        train_ret.append(ret[a:a + n_train].copy())  # before ``raw`` is normalised in place
        fit = raw[:, a:a + n_train] if n_train > 0 else raw[:, a:b]
        mu = fit.mean(axis=1, keepdims=True)
        sd = fit.std(axis=1, keepdims=True)
        block = raw[:, a:b]
        block -= mu
        block /= np.where(sd > 1e-12, sd, 1.0)
    if not np.isfinite(raw).all():
        bad = int(np.argwhere(~np.isfinite(raw).all(axis=0))[0, 0])
        raise DataError(f"features are not finite at bar {bad} (ts={bars.ts[bad]}): the bars hold "
                        "non-positive or undefined prices there; clean the data or choose another file.")
    close_ticks = np.round(c / tick)
    tr = np.concatenate(train_ret)
    rstd = float(tr.std()) if tr.size else float(returns.std())

    dev = torch.device(device)
    values_t = torch.from_numpy(raw.astype(np.float32)).T.contiguous().to(dev)  # (N, F)
    return FeatureSet(
        values=values_t,
        known=values_t[:, -4:],
        returns=torch.from_numpy(returns).to(dev),
        close_ticks=torch.from_numpy(close_ticks.astype(np.float32)).to(dev),
        instrument=torch.from_numpy(inst).to(dev),
        segment=torch.from_numpy(segment.astype(np.int64)).to(dev),
        is_train=torch.from_numpy(is_train).to(dev),
        names=list(FEATURE_NAMES),
        n_instruments=len(bars.symbols),
        return_std=rstd if rstd > 0 else 1.0,
        symbols=list(bars.symbols),
    )
