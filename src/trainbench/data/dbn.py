"""Read Databento DBN files (OHLCV bars, MBP-10 books) into numpy arrays, validating as we go.

Decoding goes through ``databento.DBNStore.to_ndarray()`` (structured arrays with fixed-point prices),
and everything after it is vectorised, so a million bars decode in well under a second. The file is opened
within bounds by :mod:`trainbench.core.dbn_file` (the rules the plan's reader shares): a regular file only,
a zstd file checked whole (a cut-off frame is *truncated*) and decompressed as a stream, the DBN header
checked first, at most a third of the host's free memory read. ``DBNStore`` itself only warns about a
truncated file and returns the records it could read; here that warning is an error.

Every problem raises :class:`trainbench.data.DataError` naming the file, the problem (with the record or
event position where there is one) and what to do instead.

Conventions:
    * Prices are floats: fixed-point int64 / 1e9. Timestamps are int64 ns since the epoch, UTC
      (``ts_event`` for bars, ``ts_recv`` for books, the index Databento itself uses).
    * Instruments are told apart by their symbol from the file's symbology mappings, resolved per record
      date, so a continuous symbol (``ES.c.0``) that rolls from one contract to the next stays one
      instrument; :attr:`Bars.contract` keeps the instrument_id of each bar, and features start a new
      segment at a roll. Without a mapping the symbol is ``str(instrument_id)``.
    * Tick size, when not given: the largest grid every price lies on, i.e. the greatest common divisor of
      the fixed-point differences between an instrument's prices (at most the smallest positive price
      difference, and robust where no two prices happen to be one tick apart).
    * Books: leading events where one side of the book is still empty (a session opening, as in the Nasdaq
      sample) are skipped and counted in :attr:`Book.skipped`; afterwards, a missing best bid or ask, or a
      crossed book (best bid above best ask), is refused. A locked book (bid == ask) is accepted.
    * Where a file came from is recorded next to it, in ``<file>.json`` (:func:`sidecar_path`): written by
      :mod:`trainbench.data.dbn_write` for a generated file (``"synthetic": true`` and the generator's
      parameters) and by :mod:`trainbench.data.download` for a downloaded one.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import databento as db
import numpy as np
import pandas as pd

from trainbench.core.dbn_file import CHUNK, open_stream, regular_file, truncated
from trainbench.core.errors import DataError
from trainbench.core.host_memory import host_memory_available
from trainbench.data.arrays import Bars, Book

OHLCV_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d")
BOOK_SCHEMAS = ("mbp-10",)
UNDEF_PRICE = np.int64(2**63 - 1)  # databento_dbn.UNDEF_PRICE
FIXED_SCALE = 1e9
_FIX = "re-generate it (delete the file and run with data.synthetic=true) or download it again"
_FIX_CAP = _FIX[0].upper() + _FIX[1:]


def sidecar_path(path: str | Path) -> Path:
    """The JSON file next to a DBN file that says where it came from (generated or downloaded): ``<name>.json``."""
    p = Path(path)
    return p.with_name(p.name + ".json")


def read_sidecar(path: str | Path) -> dict[str, Any] | None:
    """The sidecar of a DBN file as a dict; None where there is none. An unreadable sidecar still marks a file
    this project wrote (``{"synthetic": True}``, parameters unknown): a downloaded file's says ``false``."""
    try:
        return json.loads(sidecar_path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"synthetic": True}


def _schema_name(store: Any) -> str | None:
    s = store.schema
    return None if s is None else str(s)  # databento_dbn's enums print as their value


_WHERE = "Set data.path to an existing .dbn or .dbn.zst file, or use data.synthetic=true to generate one."


def open_store(path: str | Path) -> tuple[Any, np.ndarray]:
    """Load a DBN file (plain or zstd) into a ``DBNStore`` and its records as one structured array.

    The file is opened by :func:`trainbench.core.dbn_file.open_stream`: a regular file only (a named pipe
    or a device is refused by its kind), a ``.dbn.zst`` checked whole before anything is decompressed and
    decompressed as a stream, the DBN header checked on the first chunk, and at most a third of the host's
    free memory read (the store and its record array hold the bytes twice more). Raises DataError for a
    missing, empty, truncated, corrupt or too large file, or a file mixing several schemas.
    """
    p = Path(path)
    if regular_file(p, "data.path", _WHERE) == 0:
        raise DataError(f"{p}: the file is empty (0 bytes), probably an interrupted write or download; {_FIX}.")
    avail = host_memory_available()
    limit = None if avail is None else avail // 3
    buf = io.BytesIO()
    with open_stream(p, "data.path", _WHERE, _FIX, limit) as (stream, _):
        head = stream.read_exact(CHUNK)
        if head[:3] != b"DBN":
            raise DataError(f"{p}: not a DBN stream (it starts with {head[:8]!r}, a DBN file starts with b'DBN' "
                            "or is zstd-compressed DBN). Point data.path at a Databento .dbn or .dbn.zst file.")
        while head:
            buf.write(head)
            head = stream.read_exact(CHUNK)
    buf.seek(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            store = db.DBNStore.from_bytes(buf)
            records = store.to_ndarray()
        except Exception as e:  # DBNError, BentoError, ValueError: all mean the stream does not decode
            raise DataError(f"{p}: the file is corrupt or truncated: decoding failed ({e}); {_FIX}.") from e
    for w in caught:
        if "truncated" in str(w.message) or "incomplete" in str(w.message):
            raise truncated(p, f"inside a record ({w.message})", _FIX)
    if _schema_name(store) is None:
        raise DataError(f"{p}: the file mixes several schemas; trainbench reads single-schema files "
                        "(one of " + ", ".join(OHLCV_SCHEMAS + BOOK_SCHEMAS) + ").")
    return store, records


def _check_schema(path: Path, schema: str, allowed: tuple[str, ...], what: str, expected: str | None = None,
                  who: str | None = None) -> None:
    if schema not in allowed:
        raise DataError(f"{path}: the file's schema is {schema!r}, but {what} need one of "
                        f"{', '.join(allowed)}. Use a file of that schema (data.path) or the matching "
                        "data config (e.g. data=mbp10 for mbp-10 books, data=6e_ohlcv_1m for bars).")
    if expected is not None and schema != expected:
        raise DataError(f"{path}: the file's schema is {schema!r} but {who or 'the caller'} expects {expected!r} "
                        f"(data.schema). Point data.path at a {expected} file, or set data.schema={schema}.")


def _mapping_table(store: Any) -> dict[int, list[tuple[int, int, str]]]:
    """instrument_id -> [(start_ns, end_ns, raw_symbol)] from the metadata's symbology mappings."""
    table: dict[int, list[tuple[int, int, str]]] = {}
    for raw_symbol, intervals in (store.mappings or {}).items():
        for iv in intervals:
            try:
                iid = int(iv["symbol"])
            except (KeyError, TypeError, ValueError):
                continue
            s = int(np.datetime64(iv["start_date"], "D").astype("datetime64[ns]").astype(np.int64))
            e = int(np.datetime64(iv["end_date"], "D").astype("datetime64[ns]").astype(np.int64))
            table.setdefault(iid, []).append((s, e, str(raw_symbol)))
    for v in table.values():
        v.sort()
    return table


def _symbols_per_record(store: Any, iid: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(index into the symbol list per record, symbols in order of first appearance)."""
    table = _mapping_table(store)
    if iid.size and (iid == iid[0]).all():  # the common case, without hashing a million ids
        codes, uniq = np.zeros(iid.size, np.int64), iid[:1]
    else:
        codes, uniq = pd.factorize(iid, sort=False)  # ids in order of first appearance
    sym_index: dict[str, int] = {}
    lut = np.empty(len(uniq), np.int64)
    resolve = []
    for k, u in enumerate(uniq.tolist()):
        ivs = table.get(int(u), [])
        syms = {s for _, _, s in ivs}
        if len(syms) <= 1:
            lut[k] = sym_index.setdefault(next(iter(syms)) if syms else str(u), len(sym_index))
        else:  # the id maps to different symbols over time: resolve per record by date
            lut[k] = -1
            resolve.append((k, ivs))
    inst = lut[codes]
    for k, ivs in resolve:
        rows = np.flatnonzero(codes == k)
        starts = np.array([s for s, _, _ in ivs])
        pick = np.clip(np.searchsorted(starts, ts[rows], side="right") - 1, 0, len(ivs) - 1)
        names = [s for _, _, s in ivs]
        for j in pd.unique(pick):
            sym_index.setdefault(names[j], len(sym_index))
        inst[rows] = np.array([sym_index[nm] for nm in names])[pick]
    return inst, list(sym_index)


def _infer_tick(fixed: np.ndarray) -> float:
    """The largest grid all these fixed-point prices lie on (gcd of their differences), as a float."""
    g = int(np.gcd.reduce(fixed - fixed.min())) if fixed.size else 0
    return g / FIXED_SCALE if g > 0 else 1.0 / FIXED_SCALE


def _when(ts: np.ndarray, i: int) -> str:
    return str(np.datetime64(int(ts[i]), "ns")) + "Z"


def read_bars(path: str | Path, tick_sizes: dict[str, float] | None = None, schema: str | None = None,
              who: str | None = None) -> Bars:
    """Read an OHLCV DBN file (ohlcv-1s/1m/1h/1d; one or several instruments) into :class:`Bars`.

    Args:
        path: a ``.dbn`` or ``.dbn.zst`` file.
        tick_sizes: tick size per symbol; instruments not in it get an inferred tick (module docstring).
        schema: the one OHLCV schema the caller expects (None: any); ``who`` names the caller in errors.

    Returns bars sorted stably by (instrument, ts); instruments in order of first appearance in the file.
    Raises DataError for the cases in the module docstring, undefined (UNDEF_PRICE) or non-positive
    prices, bars whose low/high do not bracket open and close, non-increasing timestamps within an
    instrument, and fewer than 2 bars.
    """
    p = Path(path)
    store, rec = open_store(p)
    file_schema = _schema_name(store)
    _check_schema(p, file_schema, OHLCV_SCHEMAS, "bar models", schema, who)
    n = rec.shape[0]
    if n < 2:
        raise DataError(f"{p}: holds {n} bar(s); at least 2 are needed (and a model needs a window's worth). "
                        "Use a longer file or data.synthetic=true with data.n_bars set.")
    iid = rec["instrument_id"]
    ts = rec["ts_event"].astype(np.int64)
    o, h, lo, c = (rec[k] for k in ("open", "high", "low", "close"))
    bad = (o == UNDEF_PRICE) | (h == UNDEF_PRICE) | (lo == UNDEF_PRICE) | (c == UNDEF_PRICE)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{p}: record {i} (instrument_id {int(iid[i])}, {_when(ts, i)}) has an undefined price "
                        "(DBN's UNDEF_PRICE sentinel). Bars need defined open/high/low/close: re-download the "
                        "file or cut the range before that record.")
    bad = (o <= 0) | (h <= 0) | (lo <= 0) | (c <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{p}: record {i} (instrument_id {int(iid[i])}, {_when(ts, i)}) has a non-positive "
                        "price; bar features take logarithms of prices, so every price must be > 0 "
                        "(spreads or back-adjusted series need an offset first).")
    bad = (lo > o) | (lo > c) | (h < o) | (h < c)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(f"{p}: record {i} (instrument_id {int(iid[i])}, {_when(ts, i)}) is inconsistent: its "
                        "low/high do not bracket its open and close. The file is damaged; download it again.")

    inst, symbols = _symbols_per_record(store, iid, ts)
    K = len(symbols)
    if K == 1:
        order = None
    else:  # stable by instrument: the file's order (by time) is kept inside each instrument
        order = np.concatenate([np.flatnonzero(inst == k) for k in range(K)])
    take = (lambda a: a) if order is None else (lambda a: a[order])
    ts_s, inst_s, iid_s = take(ts), take(inst), take(iid)
    same = inst_s[1:] == inst_s[:-1]
    bad = same & (ts_s[1:] <= ts_s[:-1])
    if bad.any():
        j = int(np.argmax(bad)) + 1
        i = j if order is None else int(order[j])
        raise DataError(f"{p}: timestamps are not increasing within instrument {symbols[int(inst_s[j])]!r}: "
                        f"record {i} ({_when(ts_s, j)}) does not come after the previous bar of that "
                        f"instrument ({_when(ts_s, j - 1)}). Bars need one record per instrument and "
                        "interval, in time order: re-download, or de-duplicate the file.")

    o_s, h_s, lo_s, c_s = take(o), take(h), take(lo), take(c)
    ticks = np.empty(K)
    given = tick_sizes or {}
    for k, sym in enumerate(symbols):
        if sym in given:
            ticks[k] = float(given[sym])
        else:
            rows = slice(None) if K == 1 else inst_s == k
            ticks[k] = _infer_tick(np.concatenate([o_s[rows], h_s[rows], lo_s[rows], c_s[rows]]))
    first_iid = [int(iid_s[int(np.argmax(inst_s == k))]) for k in range(K)]
    return Bars(ts=ts_s, instrument=inst_s, open=o_s / FIXED_SCALE, high=h_s / FIXED_SCALE,
                low=lo_s / FIXED_SCALE, close=c_s / FIXED_SCALE, volume=take(rec["volume"]).astype(np.float64),
                symbols=symbols, instrument_ids=first_iid, tick_size=ticks, schema=file_schema,
                contract=iid_s.astype(np.int64))


def read_book(path: str | Path, tick_size: float | None = None, symbol: str | None = None,
              who: str | None = None) -> Book:
    """Read an MBP-10 DBN file into a :class:`Book` (levels (E, 10, 4): ask px, ask sz, bid px, bid sz).

    ``symbol`` selects one instrument of a multi-instrument file (required then). ``tick_size`` defaults
    to the inferred grid of all level prices. Raises DataError for the module docstring's cases, a book
    that never has both sides, a missing best level or a crossed book (with the event position),
    non-positive prices, levels out of order, and decreasing timestamps.
    """
    p = Path(path)
    store, rec = open_store(p)
    _check_schema(p, _schema_name(store), BOOK_SCHEMAS, "order-book models (tlob)", "mbp-10", who)
    inst, symbols = _symbols_per_record(store, rec["instrument_id"], rec["ts_recv"].astype(np.int64))
    if len(symbols) > 1:
        if symbol is None or symbol not in symbols:
            raise DataError(f"{p}: holds the books of {len(symbols)} instruments ({', '.join(symbols)}); "
                            "a Book is one instrument: pass symbol=<one of them>.")
        keep = inst == symbols.index(symbol)
        rec, pos = rec[keep], np.flatnonzero(keep)
    else:
        pos = np.arange(rec.shape[0])
    E = rec.shape[0]
    px = np.empty((E, 10, 2), np.int64)  # ask, bid
    levels = np.empty((E, 10, 4))
    for i in range(10):
        px[:, i, 0] = rec[f"ask_px_{i:02d}"]
        px[:, i, 1] = rec[f"bid_px_{i:02d}"]
        levels[:, i, 1] = rec[f"ask_sz_{i:02d}"]
        levels[:, i, 3] = rec[f"bid_sz_{i:02d}"]
    undef = px == UNDEF_PRICE
    two_sided = ~undef[:, 0, 0] & ~undef[:, 0, 1]
    if not two_sided.any():
        raise DataError(f"{p}: the book never has both a best bid and a best ask in its {E} events; a book "
                        "model needs two-sided quotes. Use a longer or later range of mbp-10 data.")
    first = int(np.argmax(two_sided))
    if not two_sided[first:].all():
        j = first + int(np.argmin(two_sided[first:]))
        side = "ask" if undef[j, 0, 0] else "bid"
        raise DataError(f"{p}: event {int(pos[j])} ({_when(rec['ts_recv'], j)}) has no best {side} (UNDEF_PRICE) "
                        "after the book had both sides; a book model needs a defined best level on each side. "
                        "Cut the range, or use another file.")
    defined = ~undef
    if (px[defined] <= 0).any():
        j = int(np.argmax(((px <= 0) & defined).any(axis=(1, 2))))
        raise DataError(f"{p}: event {int(pos[j])} has a non-positive level price; prices must be > 0.")
    crossed = two_sided & (px[:, 0, 1] > px[:, 0, 0])
    if crossed.any():
        j = int(np.argmax(crossed))
        raise DataError(f"{p}: the book is crossed at event {int(pos[j])} ({_when(rec['ts_recv'], j)}): best bid "
                        f"{px[j, 0, 1] / FIXED_SCALE} > best ask {px[j, 0, 0] / FIXED_SCALE}. A consistent book "
                        "has bids below asks: the file is damaged or not a single book; use another file.")
    both = defined[:, 1:] & defined[:, :-1]
    misordered = (both[..., 0] & (px[:, 1:, 0] <= px[:, :-1, 0])) | (both[..., 1] & (px[:, 1:, 1] >= px[:, :-1, 1]))
    if misordered.any():
        j = int(np.argmax(misordered.any(axis=1)))
        raise DataError(f"{p}: event {int(pos[j])} has levels out of order (asks must rise and bids fall "
                        "level by level); the file is damaged: download it again.")
    ts = rec["ts_recv"].astype(np.int64)
    back = ts[1:] < ts[:-1]
    if back.any():
        j = int(np.argmax(back)) + 1
        raise DataError(f"{p}: timestamps go backwards at event {int(pos[j])} ({_when(ts, j)} after "
                        f"{_when(ts, j - 1)}); book events must be in ts_recv order.")
    prices = np.where(undef, np.nan, px / FIXED_SCALE)
    levels[:, :, 0] = prices[:, :, 0]
    levels[:, :, 2] = prices[:, :, 1]
    levels[:, :, 1] = np.where(undef[:, :, 0], 0.0, levels[:, :, 1])
    levels[:, :, 3] = np.where(undef[:, :, 1], 0.0, levels[:, :, 3])
    if tick_size is None:
        tick_size = _infer_tick(px[defined])
    return Book(ts=ts[first:], levels=levels[first:], symbol=symbols[0] if symbol is None else symbol,
                tick_size=float(tick_size), skipped=first)


def inspect(path: str | Path) -> dict[str, Any]:
    """What a DBN file holds: schema, dataset, symbols, record count, first/last timestamp, synthetic flag."""
    p = Path(path)
    store, rec = open_store(p)
    schema = _schema_name(store)
    ts_field = "ts_event" if schema in OHLCV_SCHEMAS or "ts_recv" not in (rec.dtype.names or ()) else "ts_recv"
    ts = rec[ts_field].astype(np.int64) if rec.shape[0] else np.zeros(0, np.int64)
    side = read_sidecar(p)
    info: dict[str, Any] = {
        "path": str(p), "bytes": p.stat().st_size, "schema": schema, "dataset": store.dataset,
        "stype_in": str(store.stype_in),
        "symbols": list(store.symbols or []), "instrument_ids": sorted({int(x) for x in np.unique(
            rec["instrument_id"])}) if rec.shape[0] else [], "records": int(rec.shape[0]),
        "start": _when(ts, 0) if ts.size else None, "end": _when(ts, -1) if ts.size else None,
        "synthetic": bool(side and side.get("synthetic")),
    }
    return info
