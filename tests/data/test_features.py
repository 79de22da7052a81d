"""Features: causal, normalised on the training split, windows inside one instrument and session."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainbench.core.errors import DataError
from trainbench.data import synth
from trainbench.data.arrays import Bars
from trainbench.data.dbn import read_bars
from trainbench.data.features import FEATURE_NAMES, compute_features, gap_threshold_ns

INSTR = [
    {"symbol": "ESH4", "instrument_id": 1, "tick_size": 0.25, "price": 4800.0, "daily_vol": 0.01, "volume": 900},
    {"symbol": "ZNH4", "instrument_id": 3, "tick_size": 1 / 64, "price": 110.0, "daily_vol": 0.004, "volume": 700},
    {"symbol": "6EH4", "instrument_id": 42, "tick_size": 0.00005, "price": 1.08, "daily_vol": 0.005, "volume": 800},
]


@pytest.fixture(scope="module")
def bars(tmp_path_factory) -> Bars:
    """Three instruments, 3000 bars each (two session breaks each), through a real DBN file."""
    p = synth.write_ohlcv(tmp_path_factory.mktemp("f") / "three.dbn.zst", INSTR, n_bars=3000, seed=1)
    return read_bars(p)


def _with(b: Bars, i: int, **changes: float) -> Bars:
    arrays = {k: getattr(b, k).copy() for k in ("open", "high", "low", "close", "volume")}
    for k, v in changes.items():
        arrays[k][i] = v
    return dataclasses.replace(b, **arrays)


def test_changing_a_later_bar_leaves_every_earlier_feature_unchanged(bars) -> None:
    fs = compute_features(bars, train_frac=0.8)
    # bar 2900 of instrument 0 is in its validation part (train = first 2400), so the normalisation
    # statistics are unchanged and the comparison covers the normalised values themselves
    i = 2900
    assert not bool(fs.is_train[i])
    c = bars.close[i] * 1.01
    changed = _with(bars, i, close=c, high=max(bars.high[i], c), volume=bars.volume[i] * 50)
    fs2 = compute_features(changed, train_frac=0.8)
    assert torch.equal(fs.values[:i], fs2.values[:i])
    assert torch.equal(fs.returns[:i], fs2.returns[:i])
    assert not torch.equal(fs.values[i], fs2.values[i])  # the change is seen at bar i ...
    assert not torch.equal(fs.values[i + 1], fs2.values[i + 1])  # ... and after it
    # other instruments are untouched altogether
    assert torch.equal(fs.values[3000:], fs2.values[3000:])


def test_raw_features_are_causal_inside_the_training_split(bars) -> None:
    """A change inside the train split moves the normalisation, but only by an affine map per column."""
    fs = compute_features(bars, train_frac=0.8)
    i = 1000
    changed = _with(bars, i, volume=bars.volume[i] * 3)
    fs2 = compute_features(changed, train_frac=0.8)
    a, b = fs.values[:i].double().numpy(), fs2.values[:i].double().numpy()
    for col in range(a.shape[1]):  # same raw feature up to the (changed) z-score: b = s * a + m
        if a[:, col].std() > 0:
            s, m = np.polyfit(a[:, col], b[:, col], 1)
            np.testing.assert_allclose(s * a[:, col] + m, b[:, col], atol=1e-4)


def test_normalised_with_train_statistics_only(bars) -> None:
    fs = compute_features(bars, train_frac=0.5)
    v = fs.values.double()
    for k in range(3):
        rows = (fs.instrument == k) & fs.is_train
        mu, sd = v[rows].mean(0), v[rows].std(0, unbiased=False)
        assert torch.allclose(mu, torch.zeros_like(mu), atol=1e-5)
        varying = sd > 0
        assert torch.allclose(sd[varying], torch.ones_like(sd[varying]), atol=1e-4)
    assert fs.values.shape == (9000, len(FEATURE_NAMES)) and fs.values.dtype == torch.float32
    assert int(fs.is_train.sum()) == 3 * 1500


def test_windows_never_straddle_instruments_or_session_gaps(bars) -> None:
    fs = compute_features(bars, session_gap_minutes=30)
    w, h = 120, 5
    starts = fs.window_starts(w, h, split="all")
    span = starts[:, None] + torch.arange(w + h)[None]
    inst, ts = torch.as_tensor(bars.instrument)[span], torch.as_tensor(bars.ts)[span]
    assert (inst == inst[:, :1]).all(), "a window crosses instruments"
    assert (ts.diff(dim=1) == 60_000_000_000).all(), "a window crosses a session gap"
    # and nothing was lost: every window that fits inside one session is there
    seg_len = torch.bincount(fs.segment)
    assert len(starts) == int(torch.clamp(seg_len - (w + h) + 1, min=0).sum())
    # three instruments x (two session breaks each) -> 9 segments
    assert int(fs.segment.max()) + 1 == 9
    # train/val windows are inside their split
    tr, va = fs.window_starts(w, h, "train"), fs.window_starts(w, h, "val")
    assert fs.is_train[tr[:, None] + torch.arange(w + h)].all()
    assert not fs.is_train[va[:, None] + torch.arange(w + h)].any()
    batch = fs.windows(w)[tr[:4]]
    assert batch.shape == (4, w, fs.n_features)
    assert torch.equal(batch[1], fs.values[int(tr[1]):int(tr[1]) + w])


def test_first_return_of_each_segment_is_zero(bars) -> None:
    fs = compute_features(bars)
    seg = fs.segment
    starts = torch.ones_like(seg, dtype=torch.bool)
    starts[1:] = seg[1:] != seg[:-1]
    assert (fs.returns[starts] == 0).all()
    assert (fs.returns[~starts] != 0).any()


def test_gap_threshold_depends_on_the_bar_interval() -> None:
    minute = 60_000_000_000
    assert gap_threshold_ns("ohlcv-1m", 30) == 31 * minute
    assert gap_threshold_ns("ohlcv-1h", 30) == 90 * minute  # consecutive hourly bars stay together
    assert gap_threshold_ns("ohlcv-1d", 30) == 4 * 1440 * minute  # a weekend does not split daily bars


def test_hourly_bars_form_sessions_not_single_bar_segments() -> None:
    hour = 3_600_000_000_000
    ts = np.int64(1_704_150_000_000_000_000) + np.arange(40, dtype=np.int64) * hour
    ts[20:] += hour  # the daily break
    c = 100 + np.arange(40) * 0.25
    b = Bars(ts=ts, instrument=np.zeros(40, np.int64), open=c, high=c + 0.25, low=c - 0.25, close=c,
             volume=np.full(40, 10.0), symbols=["X"], instrument_ids=[1], tick_size=np.array([0.25]),
             schema="ohlcv-1h")
    fs = compute_features(b)
    assert torch.bincount(fs.segment).tolist() == [20, 20]


def test_a_contract_roll_starts_a_new_segment() -> None:
    n = 50
    ts = np.int64(1_704_150_000_000_000_000) + np.arange(n, dtype=np.int64) * 60_000_000_000
    c = np.where(np.arange(n) < 25, 4800.0, 4850.0)
    b = Bars(ts=ts, instrument=np.zeros(n, np.int64), open=c, high=c, low=c, close=c, volume=np.ones(n),
             symbols=["ES.c.0"], instrument_ids=[1], tick_size=np.array([0.25]),
             contract=np.where(np.arange(n) < 25, 1, 2))
    fs = compute_features(b)
    assert torch.bincount(fs.segment).tolist() == [25, 25]
    assert float(fs.returns.abs().max()) == 0.0  # the roll's price jump is not a return


def test_too_few_bars() -> None:
    b = Bars(ts=np.array([0]), instrument=np.zeros(1, np.int64), open=np.ones(1), high=np.ones(1),
             low=np.ones(1), close=np.ones(1), volume=np.ones(1), symbols=["X"], instrument_ids=[1],
             tick_size=np.array([0.01]))
    with pytest.raises(DataError, match="at least 2"):
        compute_features(b)
