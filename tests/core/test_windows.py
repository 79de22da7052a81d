"""The window count of a dataset (core/windows.py) is the count the models train on (data/features.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.data import FOUR
from trainbench.core.errors import DataError
from trainbench.core.windows import count_windows, read_layout, session_minutes
from trainbench.data.dbn import read_bars
from trainbench.data.features import compute_features
from trainbench.data.synth import write_ohlcv


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ohlcv(tmp_path_factory.mktemp("w") / "four.dbn.zst", FOUR, n_bars=3000, start="2024-01-04", seed=1)


@pytest.mark.parametrize("span", [2, 31, 97, 400])
def test_count_windows_equals_the_features_window_starts(four: Path, span: int) -> None:
    bars = read_bars(four)
    fs = compute_features(bars, session_gap_minutes=30.0, train_frac=0.8)
    want = (int(fs.window_starts(span, split="train").numel()), int(fs.window_starts(span, split="val").numel()))
    got = count_windows(bars.ts, bars.instrument, span, schema=bars.schema, contract=bars.contract,
                        session_gap_minutes=30.0, train_frac=0.8)
    assert got == want and want[0] > 0


def test_read_layout_reads_the_records_the_validating_reader_reads(four: Path) -> None:
    schema, ts, iid = read_layout(four)
    bars = read_bars(four)
    assert schema == "ohlcv-1m" and ts.size == len(bars)
    ids = np.asarray(bars.instrument_ids)[bars.instrument]
    order = np.lexsort((ts, iid))
    assert np.array_equal(ts[order], bars.ts) and np.array_equal(iid[order], ids)
    assert count_windows(ts, iid, 61) == count_windows(bars.ts, bars.instrument, 61)


def test_the_generator_calendar_gives_the_count_before_the_file_exists(four: Path) -> None:
    ts = np.tile(session_minutes("2024-01-04", 3000), len(FOUR))
    inst = np.repeat(np.arange(len(FOUR)), 3000)
    bars = read_bars(four)
    assert count_windows(ts, inst, 61) == count_windows(bars.ts, bars.instrument, 61)


def test_a_session_gap_costs_windows() -> None:
    ts = np.r_[np.arange(100), 1000 + np.arange(100)] * 60_000_000_000
    inst = np.zeros(200, dtype=np.int64)
    assert count_windows(ts, inst, 10, train_frac=1.0) == (2 * 91, 0)
    assert count_windows(ts, inst, 10, train_frac=1.0, session_gap_minutes=2000) == (191, 0)


def test_read_layout_refuses_what_is_not_dbn(tmp_path: Path) -> None:
    p = tmp_path / "x.dbn"
    p.write_bytes(b"not a dbn file at all, really not" * 2)
    with pytest.raises(DataError, match="not a DBN file"):
        read_layout(p)
    with pytest.raises(DataError, match="file not found"):
        read_layout(tmp_path / "missing.dbn")
