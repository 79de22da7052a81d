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
zstandard only. It is not the validating reader (:mod:`trainbench.data.dbn`, which the analysis may not
import): it assumes the file is whole and holds records of one size, as a file of one schema does, and says
so otherwise. Bars are grouped by instrument_id; a continuous symbol (``ES.c.0``) that rolls counts each
contract as its own instrument for the split (the reader keeps it one instrument), which moves at most a
roll's worth of windows between the splits.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np

from trainbench.core.errors import DataError

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
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


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



def read_layout(path: str | Path) -> tuple[str, np.ndarray, np.ndarray]:
    """(schema, ts_event int64 (N,), instrument_id int64 (N,)) of a DBN file's records, in file order.

    Raises :class:`DataError` naming the file when it is not DBN, is cut off, or mixes record sizes.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DataError(f"{p}: cannot read the DBN file ({e.strerror or e}); check decision.plan_data.") from None
    if raw[:4] == _ZSTD_MAGIC:
        import zstandard

        try:
            raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
        except zstandard.ZstdError as e:
            raise DataError(f"{p}: the zstd stream is damaged ({e}); download or generate the file again.") from None
    if raw[:3] != b"DBN" or len(raw) < 34:
        raise DataError(f"{p} is not a DBN file (no DBN header): point decision.plan_data at a .dbn or .dbn.zst "
                        "file, or name a data config (conf/data/<name>.yaml).")
    meta_len = struct.unpack_from("<I", raw, 4)[0]
    schema = _SCHEMAS.get(struct.unpack_from("<H", raw, 24)[0], "unknown")
    body = memoryview(raw)[8 + meta_len:]
    if len(body) == 0:
        return schema, np.empty(0, np.int64), np.empty(0, np.int64)
    size = body[0] * 4
    if size < 16 or len(body) % size:
        raise DataError(f"{p}: the records do not divide into {size}-byte records (a cut-off or mixed file); "
                        "download or generate it again.")
    rec = np.frombuffer(body, dtype=np.dtype({"names": ["length", "iid", "ts"], "formats": ["u1", "<u4", "<u8"],
                                              "offsets": [0, 4, 8], "itemsize": size}))
    if not (rec["length"] == body[0]).all():
        raise DataError(f"{p}: records of several sizes; the window count reads files of one schema only.")
    return schema, rec["ts"].astype(np.int64), rec["iid"].astype(np.int64)
