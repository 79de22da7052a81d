"""The DBN writer: records byte-identical to databento_dbn's, files the real databento reader reads."""

from __future__ import annotations

import databento as db
import databento_dbn as dbn
import numpy as np
import pytest

from helpers.data import FOUR, SIX_E
from trainbench.data import dbn_write, synth


def test_records_are_byte_identical_to_databento_dbn_encoding() -> None:
    bars = synth.generate_bars([SIX_E], 5)
    rec = dbn_write.bars_to_records(bars)
    for r in rec:
        msg = dbn.OHLCVMsg(dbn.RType.OHLCV_1M, 1, int(r["instrument_id"]), int(r["ts_event"]), int(r["open"]),
                           int(r["high"]), int(r["low"]), int(r["close"]), int(r["volume"]))
        assert bytes(msg) == r.tobytes()
    ev = synth.generate_book(3, seed=1)
    brec = dbn_write.book_to_records(ev, 0.00005, 42)
    r = brec[1]
    levels = [dbn.BidAskPair(bid_px=int(r[f"bid_px_{i:02d}"]), ask_px=int(r[f"ask_px_{i:02d}"]),
                             bid_sz=int(r[f"bid_sz_{i:02d}"]), ask_sz=int(r[f"ask_sz_{i:02d}"]),
                             bid_ct=int(r[f"bid_ct_{i:02d}"]), ask_ct=int(r[f"ask_ct_{i:02d}"])) for i in range(10)]
    msg = dbn.MBP10Msg(1, 42, int(r["ts_event"]), int(r["price"]), int(r["size"]), dbn.Action(r["action"].decode()),
                       dbn.Side(r["side"].decode()), int(r["depth"]), int(r["ts_recv"]), flags=int(r["flags"]),
                       ts_in_delta=int(r["ts_in_delta"]), sequence=int(r["sequence"]), levels=levels)
    assert bytes(msg) == r.tobytes()


def test_written_file_is_read_by_databento_with_symbols(tmp_path) -> None:
    path = synth.write_ohlcv(tmp_path / "x.dbn.zst", FOUR, n_bars=50)
    store = db.DBNStore.from_file(path)
    assert str(store.schema) == "ohlcv-1m" and store.dataset == "GLBX.MDP3"
    df = store.to_df()
    assert list(df["symbol"].iloc[:4]) == ["ESH4", "NQH4", "ZNH4", "6EH4"]
    assert np.all(np.diff(df.index.asi8) >= 0)  # records in ts_event order
    assert df["close"].iloc[0] == pytest.approx(4800.0)
