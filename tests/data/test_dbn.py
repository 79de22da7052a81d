"""The DBN reader: real Databento samples, and every way a file can be wrong, refused by name."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import databento_dbn as dbn
import numpy as np
import pytest
import zstandard

from helpers.data import SIX_E
from trainbench.core.errors import DataError
from trainbench.data import dbn_write, synth
from trainbench.data.dbn import inspect, read_bars, read_book, sidecar_path

SAMPLES = Path(__file__).resolve().parent / "databento"
ES = {"symbol": "ESH4", "instrument_id": 7, "tick_size": 0.25, "price": 4800.0, "daily_vol": 0.01, "volume": 900}


# ---------------------------------------------------------------------------------------- real samples


@pytest.mark.parametrize("name, schema, symbol, tick, first_close", [
    ("GLBX.MDP3.ohlcv-1m.dbn.zst", "ohlcv-1m", "ESH1", 0.25, 3704.75),
    ("GLBX.MDP3.ohlcv-1h.dbn.zst", "ohlcv-1h", "ESH1", 0.25, 3705.75),
    ("IFEU.IMPACT.ohlcv-1m.dbn.zst", "ohlcv-1m", "BRN FMJ0024!", 0.01, 77.76),
])
def test_real_ohlcv_samples_read(name, schema, symbol, tick, first_close) -> None:
    bars = read_bars(SAMPLES / name)
    assert len(bars) == 4 and bars.schema == schema and bars.symbols == [symbol]
    assert bars.close[0] == pytest.approx(first_close)
    assert bars.tick_size[0] == pytest.approx(tick)
    assert (np.diff(bars.ts) > 0).all() and bars.ts.dtype == np.int64
    step = {"ohlcv-1m": 60, "ohlcv-1h": 3600}[schema] * 10**9
    assert (np.diff(bars.ts) == step).all()
    assert (bars.low <= bars.open).all() and (bars.high >= bars.close).all()


def test_real_glbx_mbp10_sample_reads() -> None:
    book = read_book(SAMPLES / "GLBX.MDP3.mbp-10.dbn.zst")
    assert len(book) == 4 and book.symbol == "ESH1" and book.tick_size == pytest.approx(0.25)
    first = book.levels[0]
    np.testing.assert_allclose(first[0], [3702.75, 13, 3702.25, 19])  # ask px, ask sz, bid px, bid sz
    np.testing.assert_allclose(first[9, [0, 2]], [3705.0, 3700.0])
    assert (book.levels[:, 0, 2] < book.levels[:, 0, 0]).all()
    assert book.mid()[0] == pytest.approx(3702.5)


def test_real_nasdaq_mbp10_sample_skips_the_one_sided_opening() -> None:
    book = read_book(SAMPLES / "XNAS.ITCH.mbp-10.dbn.zst")
    assert book.symbol == "NVDA" and book.skipped == 2 and len(book) == 2
    np.testing.assert_allclose(book.levels[0, 0], [539.0, 17, 512.01, 1])
    assert np.isnan(book.levels[0, 1, 0]) and book.levels[0, 1, 1] == 0  # empty ask level: NaN, size 0
    assert book.levels[0, 1, 2] == pytest.approx(502.0)
    assert book.tick_size == pytest.approx(0.01)


@pytest.mark.parametrize("name, schema", [("GLBX.MDP3.trades.dbn.zst", "trades"),
                                          ("GLBX.MDP3.definition.dbn.zst", "definition"),
                                          ("GLBX.MDP3.mbp-10.dbn.zst", "mbp-10")])
def test_non_ohlcv_files_are_refused_for_bars_naming_their_schema(name, schema) -> None:
    with pytest.raises(DataError) as e:
        read_bars(SAMPLES / name)
    msg = str(e.value)
    assert name in msg and f"'{schema}'" in msg and "ohlcv-1m" in msg


def test_bar_file_refused_as_a_book() -> None:
    with pytest.raises(DataError, match=r"'ohlcv-1m'.*mbp-10"):
        read_book(SAMPLES / "GLBX.MDP3.ohlcv-1m.dbn.zst")


def test_expected_schema_is_enforced() -> None:
    with pytest.raises(DataError, match=r"ohlcv-1h.*data=x expects 'ohlcv-1m'"):
        read_bars(SAMPLES / "GLBX.MDP3.ohlcv-1h.dbn.zst", schema="ohlcv-1m", who="data=x")


def test_inspect_describes_any_file() -> None:
    info = inspect(SAMPLES / "GLBX.MDP3.trades.dbn.zst")
    assert info["schema"] == "trades" and info["symbols"] == ["ESH1"] and info["records"] == 4
    assert info["dataset"] == "GLBX.MDP3" and info["start"].startswith("2020-12-28") and not info["synthetic"]


def test_inspect_reads_the_sidecar_for_the_synthetic_flag(tmp_path) -> None:
    """A generated file's sidecar says synthetic; a downloaded file's sidecar says it is not."""
    path = _good(tmp_path)
    assert inspect(path)["synthetic"] is True
    sidecar_path(path).write_text('{"synthetic": false, "source": "databento"}')
    assert inspect(path)["synthetic"] is False


# ---------------------------------------------------------------------------------------- broken files


def _good(tmp_path: Path, n: int = 200, compress: bool = True) -> Path:
    return synth.write_ohlcv(tmp_path / ("g.dbn.zst" if compress else "g.dbn"), [SIX_E], n_bars=n)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(DataError, match=r"nope\.dbn\.zst: file not found.*data\.path"):
        read_bars(tmp_path / "nope.dbn.zst")


def test_empty_file(tmp_path) -> None:
    (tmp_path / "e.dbn.zst").write_bytes(b"")
    with pytest.raises(DataError, match=r"e\.dbn\.zst: the file is empty"):
        read_bars(tmp_path / "e.dbn.zst")


def test_garbage_file(tmp_path) -> None:
    (tmp_path / "g.dbn").write_bytes(b"date,open,high,low,close\n2024-01-02,1,2,0.5,1.5\n")
    with pytest.raises(DataError, match=r"g\.dbn: not a DBN stream"):
        read_bars(tmp_path / "g.dbn")


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_file(tmp_path, compress, keep) -> None:
    p = _good(tmp_path, compress=compress)
    data = p.read_bytes()
    cut = tmp_path / ("cut.dbn.zst" if compress else "cut.dbn")
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(DataError, match=r"cut\.dbn(\.zst)?: the file is (truncated|corrupt)"):
        read_bars(cut)


def test_truncated_inside_the_metadata(tmp_path) -> None:
    raw = zstandard.ZstdDecompressor().decompressobj().decompress(_good(tmp_path).read_bytes())
    (tmp_path / "h.dbn").write_bytes(raw[:40])
    with pytest.raises(DataError, match=r"h\.dbn: the file is corrupt or truncated"):
        read_bars(tmp_path / "h.dbn")


def test_corrupt_zstd(tmp_path) -> None:
    data = bytearray(_good(tmp_path).read_bytes())
    data[20:60] = b"\xff" * 40
    (tmp_path / "c.dbn.zst").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"c\.dbn\.zst: the file is (corrupt|truncated)"):
        read_bars(tmp_path / "c.dbn.zst")


def test_too_few_bars(tmp_path) -> None:
    p = synth.write_ohlcv(tmp_path / "one.dbn", [SIX_E], n_bars=1)
    with pytest.raises(DataError, match=r"one\.dbn: holds 1 bar\(s\); at least 2"):
        read_bars(p)


def _write_rec(tmp_path: Path, rec: np.ndarray, name: str = "bad.dbn.zst", schema: str = "ohlcv-1m",
               symbols: dict[str, int] | None = None) -> Path:
    return dbn_write.write_records(tmp_path / name, rec, schema, symbols or {"6EH4": 42})


def test_undefined_price_refused_with_its_position(tmp_path) -> None:
    rec = dbn_write.bars_to_records(synth.generate_bars([SIX_E], 50))
    rec["high"][17] = dbn.UNDEF_PRICE
    with pytest.raises(DataError, match=r"bad\.dbn\.zst: record 17 .*undefined price.*UNDEF_PRICE"):
        read_bars(_write_rec(tmp_path, rec))


def test_non_positive_price_refused(tmp_path) -> None:
    rec = dbn_write.bars_to_records(synth.generate_bars([SIX_E], 50))
    rec["low"][5] = -1
    with pytest.raises(DataError, match=r"record 5 .*non-positive"):
        read_bars(_write_rec(tmp_path, rec))


def test_inconsistent_bar_refused(tmp_path) -> None:
    rec = dbn_write.bars_to_records(synth.generate_bars([SIX_E], 50))
    rec["high"][9] = rec["low"][9] - 50_000
    with pytest.raises(DataError, match=r"record 9 .*do not bracket"):
        read_bars(_write_rec(tmp_path, rec))


@pytest.mark.parametrize("how", ["duplicate", "backwards"])
def test_non_increasing_timestamps_refused_with_position(tmp_path, how) -> None:
    rec = dbn_write.bars_to_records(synth.generate_bars([SIX_E], 50))
    rec["ts_event"][30] = rec["ts_event"][29] if how == "duplicate" else rec["ts_event"][20]
    with pytest.raises(DataError, match=r"not increasing within instrument '6EH4': record 30"):
        read_bars(_write_rec(tmp_path, rec))


def test_equal_timestamps_of_different_instruments_are_fine(tmp_path) -> None:
    p = synth.write_ohlcv(tmp_path / "two.dbn.zst", [ES, SIX_E], n_bars=100)
    bars = read_bars(p, tick_sizes={"6EH4": 0.00005})
    assert bars.symbols == ["ESH4", "6EH4"] and len(bars) == 200
    assert (bars.instrument[:100] == 0).all() and (bars.instrument[100:] == 1).all()
    np.testing.assert_array_equal(bars.ts[:100], bars.ts[100:])
    assert bars.tick_size.tolist() == [0.25, 0.00005]
    assert bars.close[:100].min() > 1000 and bars.close[100:].max() < 2


def test_continuous_symbol_keeps_one_instrument_across_a_roll(tmp_path) -> None:
    """ES.c.0 maps to contract 1 on the first day and to contract 2 on the second: one instrument."""
    t0 = 1_704_240_000_000_000_000  # 2024-01-03 00:00 UTC
    ts = t0 + np.arange(6, dtype=np.int64) * 60 * 10**9
    ts[3:] += 86_400 * 10**9  # the next day
    rec = np.zeros(6, dbn_write.OHLCV_DTYPE)
    rec["length"], rec["rtype"], rec["publisher_id"] = 14, 33, 1
    rec["instrument_id"] = [1, 1, 1, 2, 2, 2]
    rec["ts_event"] = ts
    px = np.array([4800, 4801, 4802, 4850, 4851, 4852]) * 10**9
    for f in ("open", "high", "low", "close"):
        rec[f] = px
    rec["volume"] = 10
    d = dt.date(2024, 1, 3)
    ivs = [SimpleNamespace(start_date=d, end_date=d + dt.timedelta(1), symbol="1"),
           SimpleNamespace(start_date=d + dt.timedelta(1), end_date=d + dt.timedelta(2), symbol="2")]
    meta = dbn.Metadata("GLBX.MDP3", int(ts[0]), dbn.SType.CONTINUOUS, dbn.SType.INSTRUMENT_ID,
                        dbn.Schema.OHLCV_1M, symbols=["ES.c.0"], partial=[], not_found=[],
                        mappings=[SimpleNamespace(raw_symbol="ES.c.0", intervals=ivs)], end=int(ts[-1]) + 1)
    (tmp_path / "roll.dbn").write_bytes(meta.encode() + rec.tobytes())
    bars = read_bars(tmp_path / "roll.dbn")
    assert bars.symbols == ["ES.c.0"] and (bars.instrument == 0).all()
    assert bars.contract.tolist() == [1, 1, 1, 2, 2, 2]


def test_file_without_mappings_falls_back_to_the_instrument_id(tmp_path) -> None:
    rec = dbn_write.bars_to_records(synth.generate_bars([SIX_E], 5))
    meta = dbn.Metadata("GLBX.MDP3", int(rec["ts_event"][0]), dbn.SType.INSTRUMENT_ID, dbn.SType.INSTRUMENT_ID,
                        dbn.Schema.OHLCV_1M, symbols=["42"], partial=[], not_found=[], mappings=[])
    (tmp_path / "ids.dbn").write_bytes(meta.encode() + rec.tobytes())
    assert read_bars(tmp_path / "ids.dbn").symbols == ["42"]


# ---------------------------------------------------------------------------------------- books


def _book_rec(n: int = 100) -> np.ndarray:
    return dbn_write.book_to_records(synth.generate_book(n, seed=2), 0.00005, 42)


def test_crossed_book_refused_with_the_event_position(tmp_path) -> None:
    rec = _book_rec()
    rec["bid_px_00"][40] = rec["ask_px_00"][40] + 50_000
    p = _write_rec(tmp_path, rec, "x.dbn.zst", "mbp-10")
    with pytest.raises(DataError, match=r"x\.dbn\.zst: the book is crossed at event 40"):
        read_book(p)


def test_undefined_best_level_refused_with_the_event_position(tmp_path) -> None:
    rec = _book_rec()
    rec["ask_px_00"][55] = dbn.UNDEF_PRICE
    with pytest.raises(DataError, match=r"event 55 .*no best ask"):
        read_book(_write_rec(tmp_path, rec, "u.dbn.zst", "mbp-10"))


def test_levels_out_of_order_refused(tmp_path) -> None:
    rec = _book_rec()
    rec["bid_px_03"][12] = rec["bid_px_01"][12]
    with pytest.raises(DataError, match=r"event 12 has levels out of order"):
        read_book(_write_rec(tmp_path, rec, "o.dbn.zst", "mbp-10"))


def test_book_that_is_never_two_sided_refused(tmp_path) -> None:
    rec = _book_rec(10)
    rec["ask_px_00"] = dbn.UNDEF_PRICE
    with pytest.raises(DataError, match=r"never has both a best bid and a best ask"):
        read_book(_write_rec(tmp_path, rec, "n.dbn.zst", "mbp-10"))
