"""How many model windows a dataset holds: segments, the split, the window count (numpy, no torch).

One concept, one place: :mod:`trainbench.data.features` cuts bars into segments with
:func:`gap_threshold_ns` and :func:`segment_starts`, and the analysis counts the windows of a *planned*
dataset with :func:`count_windows` (analysis/plan/plan.py: a supervised epoch is a pass over its windows, so its
time scales with their number). A *segment* is a run of bars of one instrument without a session gap or a
contract roll; the first ``train_frac`` of each instrument's bars is the training split. A window of
``span`` bars counts for a split when it lies inside one segment and wholly inside that split, exactly as
:meth:`trainbench.data.features.FeatureSet.window_starts` selects them.

:func:`session_minutes` is the calendar of the synthetic generator (:mod:`trainbench.data.synth`), so the
layout of a synthetic dataset is known from its config before the file is generated.
:func:`read_layout` reads what the count needs from a Databento DBN file (``.dbn`` or ``.dbn.zst``): the
schema, and per record the instrument_id and ts_event, from the fixed record header, with numpy and
zstandard only, as a bounded stream (the file rules it shares with the validating reader are
:mod:`trainbench.core.dbn_file`'s). It is not the validating reader (:mod:`trainbench.data.dbn`, which the
analysis may not import): it checks that the file is whole and holds records of one size, as a file of one
schema does, and says so otherwise. Bars are grouped by instrument_id; a continuous symbol (``ES.c.0``) that rolls counts each
contract as its own instrument for the split (the reader keeps it one instrument), which moves at most a
roll's worth of windows between the splits.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from trainbench.core.dbn_file import CHUNK, open_stream, truncated
from trainbench.core.errors import DataError
from trainbench.core.host_memory import host_memory_available

NS_PER_MIN = 60_000_000_000
NS_PER_DAY = 86_400_000_000_000
CT_OFFSET_NS = -6 * 3_600_000_000_000  # US Central standard time, UTC-6 (fixed; see data/synth.py)
SESSION_MINUTES = 23 * 60  # 17:00-16:00 CT
_NS_PER_MIN, _NS_PER_DAY = NS_PER_MIN, NS_PER_DAY
_BAR_NS = {"ohlcv-1s": 1_000_000_000, "ohlcv-1m": _NS_PER_MIN, "ohlcv-1h": 60 * _NS_PER_MIN,
           "ohlcv-1d": _NS_PER_DAY}
#: Databento's schema ids (the u16 after the dataset in the DBN metadata)
_SCHEMAS = {0: "mbo", 1: "mbp-1", 2: "mbp-10", 3: "tbbo", 4: "trades", 5: "ohlcv-1s", 6: "ohlcv-1m", 7: "ohlcv-1h",
            8: "ohlcv-1d", 9: "definition", 10: "statistics", 11: "status", 12: "imbalance", 13: "ohlcv-eod",
            14: "cmbp-1", 15: "cbbo-1s", 16: "cbbo-1m", 17: "tcbbo", 18: "bbo-1s", 19: "bbo-1m"}


def gap_threshold_ns(schema: str, session_gap_minutes: float) -> int:
    """The time between two bars above which a new segment starts.

    Intraday bars: ``session_gap_minutes`` plus one bar interval (so that 1-hour bars are not each their own
    segment; the one-hour CME break still splits 1-hour bars). Daily bars are sessions already: only a
    gap of more than 4 days (more than a weekend plus a holiday) splits them.
    """
    bar = _BAR_NS.get(schema, _NS_PER_MIN)
    if schema == "ohlcv-1d":
        return 4 * _NS_PER_DAY
    return int(session_gap_minutes * _NS_PER_MIN) + bar


def segment_starts(ts: np.ndarray, instrument: np.ndarray, contract: np.ndarray | None, gap_ns: int) -> np.ndarray:
    """Boolean (N,): True where a new segment starts (first bar, new instrument or contract, or a gap).
    The bars are sorted by (instrument, ts)."""
    n = int(ts.shape[0])
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (instrument[1:] != instrument[:-1]) | (np.diff(ts) > gap_ns)
        if contract is not None:  # a continuous symbol rolled: the price jumps to another contract
            new[1:] |= contract[1:] != contract[:-1]
    return new


def train_split(instrument: np.ndarray, train_frac: float) -> np.ndarray:
    """Boolean (N,): the first ``floor(n * train_frac)`` bars of each instrument's contiguous block."""
    n = int(instrument.shape[0])
    is_train = np.zeros(n, dtype=bool)
    if n == 0:
        return is_train
    edges = np.flatnonzero(instrument[1:] != instrument[:-1]) + 1
    for a, b in zip(np.r_[0, edges], np.r_[edges, n], strict=True):
        is_train[a:a + int(np.floor((b - a) * train_frac))] = True
    return is_train


def count_windows(ts: np.ndarray, instrument: np.ndarray, span: int, *, schema: str = "ohlcv-1m",
                  contract: np.ndarray | None = None, session_gap_minutes: float = 30.0,
                  train_frac: float = 0.8) -> tuple[int, int]:
    """(training windows, validation windows) of ``span`` bars: inside one segment and one split each."""
    order = np.lexsort((ts, instrument))
    ts, instrument = ts[order], instrument[order]
    contract = None if contract is None else contract[order]
    new = segment_starts(ts, instrument, contract, gap_threshold_ns(schema, session_gap_minutes))
    is_train = train_split(instrument, train_frac)
    run_start = new.copy()
    run_start[1:] |= is_train[1:] != is_train[:-1]
    starts = np.flatnonzero(run_start)
    lengths = np.diff(np.r_[starts, ts.shape[0]])
    per = np.maximum(0, lengths - span + 1)
    train = is_train[starts]
    return int(per[train].sum()), int(per[~train].sum())


def session_minutes(start: str, n: int) -> np.ndarray:
    """The first ``n`` CME Globex trading minutes (int64 ns, UTC) from the session trading on ``start``."""
    day0 = np.datetime64(start, "D").astype("datetime64[ns]").astype(np.int64)
    t0_ct = day0 - 7 * 60 * NS_PER_MIN  # 17:00 CT the evening before, in CT "wall" nanoseconds
    week = 7 * 24 * 60
    n_cand = int(np.ceil(n / (5 * SESSION_MINUTES) * week)) + 2 * week
    ct = t0_ct + np.arange(n_cand, dtype=np.int64) * NS_PER_MIN
    minute = (ct % NS_PER_DAY) // NS_PER_MIN
    wd = (ct // NS_PER_DAY + 3) % 7  # Monday = 0; 1970-01-01 was a Thursday
    is_open = ~((minute >= 960) & (minute < 1020))  # daily break 16:00-17:00 CT
    is_open &= wd != 5  # Saturday
    is_open &= ~((wd == 4) & (minute >= 960))  # Friday after the close
    is_open &= ~((wd == 6) & (minute < 1020))  # Sunday before the open
    out = ct[is_open][:n] - CT_OFFSET_NS  # back to UTC
    return out



#: What the plan's reader keeps per record: ts_event and instrument_id as int64, twice while chunks are joined.
_LAYOUT_BYTES_PER_RECORD = 32
_PLAN_WHERE = ("Point decision.plan_data at a .dbn or .dbn.zst file, or name a data config "
               "(conf/data/<name>.yaml).")
_PLAN_FIX = "download or generate the file again"


def read_layout(path: str | Path, max_records: int | None = None) -> tuple[str, np.ndarray, np.ndarray]:
    """(schema, ts_event int64 (N,), instrument_id int64 (N,)) of a DBN file's records, in file order.

    Read as a stream (:func:`trainbench.core.dbn_file.open_stream`): only a regular file is opened, a
    ``.dbn.zst`` is checked whole before it is decompressed and decompressed chunk by chunk, the DBN header
    is checked before anything else is read, the metadata is skipped without being kept, and only the two
    fields the count needs are kept of each record. At most ``max_records`` records are read (default: what
    half of the host's free memory holds). Raises :class:`DataError` naming the file when it is not a
    regular file, not DBN, truncated, damaged, too large, or mixes record sizes.
    """
    p = Path(path)
    if max_records is None:
        avail = host_memory_available()
        max_records = None if avail is None else max(1, avail // 2 // _LAYOUT_BYTES_PER_RECORD)
    with open_stream(p, "decision.plan_data", _PLAN_WHERE, _PLAN_FIX, None) as (stream, _):
        head = stream.read_exact(8)
        if len(head) < 8 or head[:3] != b"DBN":
            raise DataError(f"{p} is not a DBN file (no DBN header): point decision.plan_data at a .dbn or "
                            ".dbn.zst file, or name a data config (conf/data/<name>.yaml).")
        meta_len = struct.unpack_from("<I", head, 4)[0]
        meta = stream.read_exact(min(meta_len, 18))  # the schema is the u16 at offset 16 of the metadata
        if len(meta) < min(meta_len, 18):
            raise truncated(p, "inside its metadata", _PLAN_FIX)
        if len(meta) < 18:
            raise DataError(f"{p}: the DBN metadata is {meta_len} bytes, too short to hold a schema: the file is "
                            f"damaged; {_PLAN_FIX}.")
        schema = _SCHEMAS.get(struct.unpack_from("<H", meta, 16)[0], "unknown")
        left = meta_len - len(meta)
        while left:  # skipped, never kept: a forged length cannot make the reader hold gigabytes
            got = len(stream.read(min(left, CHUNK)))
            if not got:
                raise truncated(p, "inside its metadata", _PLAN_FIX)
            left -= got
        first = stream.read_exact(1)
        if not first:
            return schema, np.empty(0, np.int64), np.empty(0, np.int64)
        size = first[0] * 4
        if size < 16:
            raise DataError(f"{p}: a record of {size} bytes (a DBN record is at least 16): the file is damaged; "
                            f"{_PLAN_FIX}.")
        dtype = np.dtype({"names": ["length", "iid", "ts"], "formats": ["u1", "<u4", "<u8"],
                          "offsets": [0, 4, 8], "itemsize": size})
        per_chunk = max(1, CHUNK // size) * size
        ts_parts, iid_parts, n = [], [], 0
        data = first + stream.read_exact(per_chunk - 1)
        while data:
            whole = len(data) - len(data) % size
            rec = np.frombuffer(data, dtype=dtype, count=whole // size)
            if not (rec["length"] == first[0]).all():
                raise DataError(f"{p}: records of several sizes; the window count reads files of one schema "
                                "only.")
            if whole != len(data):
                raise truncated(p, f"inside a record (after {n + rec.size} whole {size}-byte records)", _PLAN_FIX)
            n += rec.size
            if max_records is not None and n > max_records:
                raise DataError(f"{p}: holds more than {max_records:,} records, more than this machine's free "
                                "memory lets the plan read; plan with a file of a shorter range (or fewer "
                                "instruments), or with a data config.")
            ts_parts.append(rec["ts"].astype(np.int64))
            iid_parts.append(rec["iid"].astype(np.int64))
            data = stream.read_exact(per_chunk)
    return schema, np.concatenate(ts_parts), np.concatenate(iid_parts)
