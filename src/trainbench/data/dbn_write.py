"""Write Databento DBN files (OHLCV bars, MBP-10 books) that ``databento`` and :mod:`trainbench.data.dbn` read.

The files are genuine DBN (version 3) streams: the metadata header is encoded by ``databento_dbn``
(dataset, schema, symbols and symbology mappings, so ``databento.DBNStore`` fills its symbol column),
followed by fixed-size records, zstd-compressed when the name ends in ``.zst``. Records are laid out
with numpy structured arrays whose byte layout is the one ``databento_dbn`` writes for ``OHLCVMsg`` and
``MBP10Msg`` (tests/data/test_dbn_write.py checks the bytes against ``bytes(OHLCVMsg(...))``), so a million
bars encode in a fraction of a second instead of a Python loop over record objects.

Files are written atomically (a temporary file in the same folder, then ``os.replace``): a reader never
sees half a file. Where a file came from (generated or downloaded) is recorded in its sidecar JSON
(:func:`trainbench.data.dbn.sidecar_path`), written before the file itself.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import databento_dbn as dbn
import numpy as np
import zstandard

from trainbench.data.arrays import Bars
from trainbench.data.dbn import FIXED_SCALE, UNDEF_PRICE, sidecar_path

PUBLISHER_ID = 1  # GLBX.MDP3.GLBX
RECV_DELAY_NS = 20_000  # an MBP-10 record's ts_recv: 20 us from the matching engine to the capture

OHLCV_DTYPE = np.dtype([("length", "u1"), ("rtype", "u1"), ("publisher_id", "<u2"), ("instrument_id", "<u4"),
                        ("ts_event", "<u8"), ("open", "<i8"), ("high", "<i8"), ("low", "<i8"),
                        ("close", "<i8"), ("volume", "<u8")])
_LEVEL_FIELDS = [(f"{k}_{i:02d}", t) for i in range(10) for k, t in
                 (("bid_px", "<i8"), ("ask_px", "<i8"), ("bid_sz", "<u4"), ("ask_sz", "<u4"),
                  ("bid_ct", "<u4"), ("ask_ct", "<u4"))]
MBP10_DTYPE = np.dtype([("length", "u1"), ("rtype", "u1"), ("publisher_id", "<u2"), ("instrument_id", "<u4"),
                        ("ts_event", "<u8"), ("price", "<i8"), ("size", "<u4"), ("action", "S1"),
                        ("side", "S1"), ("flags", "u1"), ("depth", "u1"), ("ts_recv", "<u8"),
                        ("ts_in_delta", "<i4"), ("sequence", "<u4"), *_LEVEL_FIELDS])
assert OHLCV_DTYPE.itemsize == 56 and MBP10_DTYPE.itemsize == 368

_RTYPE = {"ohlcv-1s": dbn.RType.OHLCV_1S, "ohlcv-1m": dbn.RType.OHLCV_1M, "ohlcv-1h": dbn.RType.OHLCV_1H,
          "ohlcv-1d": dbn.RType.OHLCV_1D, "mbp-10": dbn.RType.MBP_10}
_SCHEMA = {"ohlcv-1s": dbn.Schema.OHLCV_1S, "ohlcv-1m": dbn.Schema.OHLCV_1M, "ohlcv-1h": dbn.Schema.OHLCV_1H,
           "ohlcv-1d": dbn.Schema.OHLCV_1D, "mbp-10": dbn.Schema.MBP_10}


def atomic_write(path: Path, payload: bytes) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_sidecar(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Write ``doc`` as the sidecar JSON of the DBN file ``path`` (atomically); returns the sidecar's path."""
    side = sidecar_path(path)
    atomic_write(side, json.dumps(doc, indent=1, sort_keys=True).encode())
    return side


def _date(ns: int) -> dt.date:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).date()


def encode_dbn(records: np.ndarray, schema: str, symbols: Mapping[str, int], dataset: str = "GLBX.MDP3",
               compress: bool = True) -> bytes:
    """DBN bytes: ``databento_dbn.Metadata`` header (with symbology mappings) + the raw records.

    ``records`` is a structured array of :data:`OHLCV_DTYPE` or :data:`MBP10_DTYPE`; ``symbols`` maps
    each raw symbol to its instrument_id.
    """
    ts = records["ts_event"]
    start = int(ts.min()) if len(ts) else 0
    end = int(ts.max()) + 1 if len(ts) else 1
    d0, d1 = _date(start), _date(end) + dt.timedelta(days=1)
    mappings = [SimpleNamespace(raw_symbol=sym, intervals=[SimpleNamespace(start_date=d0, end_date=d1,
                                                                           symbol=str(iid))])
                for sym, iid in symbols.items()]
    # Continuous symbols (ES.c.0) are written as Databento writes them: stype_in continuous.
    continuous = all(re.fullmatch(r"[^.]+\.[cnv]\.\d+", s) for s in symbols) and bool(symbols)
    stype_in = dbn.SType.CONTINUOUS if continuous else dbn.SType.RAW_SYMBOL
    meta = dbn.Metadata(dataset, start, stype_in, dbn.SType.INSTRUMENT_ID, _SCHEMA[schema],
                        symbols=list(symbols), partial=[], not_found=[], mappings=mappings, end=end)
    raw = meta.encode() + np.ascontiguousarray(records).tobytes()
    return zstandard.ZstdCompressor(level=3).compress(raw) if compress else raw


def write_records(path: str | Path, records: np.ndarray, schema: str, symbols: Mapping[str, int],
                  dataset: str = "GLBX.MDP3", sidecar: Mapping[str, Any] | None = None) -> Path:
    """Encode ``records`` (see :func:`encode_dbn`) and write them atomically; zstd when the name ends in .zst.

    ``sidecar`` (where the file came from) is written first, as is, by :func:`write_sidecar`.
    """
    p = Path(path)
    if sidecar is not None:
        write_sidecar(p, sidecar)
    atomic_write(p, encode_dbn(records, schema, symbols, dataset, compress=p.suffix == ".zst"))
    return p


def bars_to_records(bars: Bars) -> np.ndarray:
    """Bars (sorted by instrument then ts) -> OHLCV records sorted by (ts_event, instrument index)."""
    order = np.lexsort((bars.instrument, bars.ts))
    rec = np.zeros(len(bars), OHLCV_DTYPE)
    rec["length"] = OHLCV_DTYPE.itemsize // 4
    rec["rtype"] = int(_RTYPE[bars.schema])
    rec["publisher_id"] = PUBLISHER_ID
    rec["instrument_id"] = np.asarray(bars.instrument_ids, dtype=np.uint32)[bars.instrument[order]]
    rec["ts_event"] = bars.ts[order]
    for name in ("open", "high", "low", "close"):
        rec[name] = np.round(getattr(bars, name)[order] * FIXED_SCALE).astype(np.int64)
    rec["volume"] = np.round(bars.volume[order]).astype(np.uint64)
    return rec


def write_bars(path: str | Path, bars: Bars, dataset: str = "GLBX.MDP3",
               sidecar: Mapping[str, Any] | None = None) -> Path:
    """Write any :class:`Bars` as a DBN OHLCV file of schema ``bars.schema``."""
    return write_records(path, bars_to_records(bars), bars.schema,
                         dict(zip(bars.symbols, bars.instrument_ids, strict=True)), dataset, sidecar)


def book_to_records(ev: Mapping[str, np.ndarray], tick_size: float, instrument_id: int) -> np.ndarray:
    """Book events in integer ticks -> MBP-10 records (empty levels: UNDEF_PRICE, size 0).

    ``ev`` holds the arrays :func:`trainbench.data.synth.generate_book` returns: ``ts`` (E,) ns (ts_event;
    ts_recv is :data:`RECV_DELAY_NS` later), ``action``/``side`` (E,) bytes, ``price`` (E,) ticks,
    ``size``/``depth`` (E,), ``bid_px``/``ask_px`` (E, 10) ticks (0 = empty level) and
    ``bid_sz``/``ask_sz``/``bid_ct``/``ask_ct`` (E, 10).
    """
    n = len(ev["ts"])
    tick_fx = round(tick_size * FIXED_SCALE)
    rec = np.zeros(n, MBP10_DTYPE)
    rec["length"] = MBP10_DTYPE.itemsize // 4
    rec["rtype"] = int(_RTYPE["mbp-10"])
    rec["publisher_id"] = PUBLISHER_ID
    rec["instrument_id"] = instrument_id
    rec["ts_event"] = ev["ts"]
    rec["ts_recv"] = ev["ts"] + RECV_DELAY_NS
    rec["ts_in_delta"] = 15_000
    rec["sequence"] = np.arange(1, n + 1)
    rec["price"] = ev["price"] * tick_fx
    rec["size"] = ev["size"]
    rec["action"] = ev["action"]
    rec["side"] = ev["side"]
    rec["flags"] = dbn.F_LAST
    rec["depth"] = ev["depth"]
    for i in range(10):
        for name in ("bid", "ask"):
            px = ev[f"{name}_px"][:, i]
            rec[f"{name}_px_{i:02d}"] = np.where(px > 0, px * tick_fx, UNDEF_PRICE)
            rec[f"{name}_sz_{i:02d}"] = ev[f"{name}_sz"][:, i]
            rec[f"{name}_ct_{i:02d}"] = ev[f"{name}_ct"][:, i]
    return rec
