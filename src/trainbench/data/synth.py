"""Synthetic market data: OHLCV bars and an MBP-10 book, written as real DBN files (:mod:`.dbn_write`).

Bars (:func:`generate_bars`, :func:`write_ohlcv`)
    * Sessions: CME Globex hours, Sunday to Friday 17:00-16:00 US Central, with the daily one-hour
      maintenance break and the weekend as gaps. Central time is approximated by the fixed offset UTC-6
      (standard time; daylight saving is ignored, which shifts summer sessions by an hour).
      Generation starts at the open of the session that trades on ``start`` (17:00 CT the evening before).
    * Returns: GARCH(1,1) volatility clustering (alpha 0.05, beta 0.93, unit unconditional variance) with
      Student-t(6) shocks, times an intraday seasonal profile of volatility (peaks at the US open 08:30 CT,
      the close 15:00 CT and the London open 02:00 CT; quiet overnight), scaled so that a session's return
      std is the instrument's ``daily_vol``. Session openings add a gap return.
    * Prices: integer ticks; open = previous close, high/low extend beyond open/close by a random excursion
      of the bar's volatility, so low <= open, close <= high always holds. Volume follows the same seasonal
      profile and the current volatility, with log-normal noise, at least 1 contract.
    * Several instruments share one minute grid; records are written in ts_event order (then in the order
      the instruments were given), as Databento files are.

Book (:func:`generate_book`, :func:`write_mbp10`)
    A ten-level book kept as integer ticks that evolves by adds (at or behind the best, sometimes
    improving inside the spread), cancels and trades. As in Databento MBP data, a trade record ('T')
    leaves the book unchanged and the fill arrives as the next record (a cancel of the traded size at the
    best level). The book is consistent after every event: best bid < best ask, prices on the tick grid,
    sizes positive, levels strictly ordered, at least one level on each side.

Synthetic-ness is recorded in a sidecar JSON next to the data file (``<file>.json``, see
:func:`trainbench.data.dbn.sidecar_path`) holding ``"synthetic": true`` and the generator's parameters; the
DBN metadata has no free-form field for it, and the dataset code must stay the real one (``GLBX.MDP3``)
for the schema checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import databento_dbn as dbn
import numpy as np

from trainbench.core.windows import (  # the generator's calendar: the window count of a planned dataset uses it
    CT_OFFSET_NS,
    NS_PER_DAY,
    NS_PER_MIN,
    SESSION_MINUTES,
    session_minutes,
)
from trainbench.data.arrays import Bars, Book
from trainbench.data.dbn import FIXED_SCALE
from trainbench.data.dbn_write import RECV_DELAY_NS, book_to_records, write_bars, write_records

ADD, CANCEL, TRADE = (str(a.value) for a in (dbn.Action.ADD, dbn.Action.CANCEL, dbn.Action.TRADE))
BID, ASK = str(dbn.Side.BID.value), str(dbn.Side.ASK.value)


# --------------------------------------------------------------------------------------------------
# bars
# --------------------------------------------------------------------------------------------------


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def _profile(m: np.ndarray) -> np.ndarray:
    """Unnormalised intraday volatility profile by US Central minute of day ``m``."""
    return (0.35
            + 1.10 * np.exp(-0.5 * ((m - 515) / 25) ** 2)  # US open 08:30 CT
            + 0.55 * np.exp(-0.5 * ((m - 900) / 20) ** 2)  # US close 15:00 CT
            + 0.35 * np.exp(-0.5 * ((m - 125) / 40) ** 2)  # London open 02:00 CT
            + 0.45 * ((m >= 420) & (m < 915)))  # US day session


def _season(ts_utc: np.ndarray) -> np.ndarray:
    """Intraday volatility multiplier of each bar, with mean square 1 over a session's minutes."""
    grid = np.arange(1440, dtype=np.float64)
    open_grid = ~((grid >= 960) & (grid < 1020))
    norm = np.sqrt(np.mean(_profile(grid[open_grid]) ** 2))
    m = (((ts_utc + CT_OFFSET_NS) % NS_PER_DAY) // NS_PER_MIN).astype(np.float64)
    return _profile(m) / norm


def garch_variance(z: np.ndarray, alpha: float = 0.05, beta: float = 0.93, chunk: int = 256) -> np.ndarray:
    """Conditional variances h_t of a GARCH(1,1) with unit unconditional variance, driven by shocks z.

    h_t = omega + (alpha z_{t-1}^2 + beta) h_{t-1}, omega = 1 - alpha - beta, h_0 = 1. The linear recursion
    with time-varying coefficient is solved in closed form per chunk (cumulative log products), so the
    Python loop runs len(z)/chunk times instead of len(z).
    """
    omega = 1.0 - alpha - beta
    n = z.shape[0]
    h = np.empty(n)
    if n == 0:
        return h
    a = np.empty(n)
    a[0] = 1.0
    a[1:] = alpha * z[:-1] ** 2 + beta
    prev = 1.0
    h[0] = 1.0
    for s in range(1, n, chunk):
        e = min(s + chunk, n)
        logp = np.cumsum(np.log(a[s:e]))
        h[s:e] = np.exp(logp) * (prev + omega * np.cumsum(np.exp(-logp)))
        prev = h[e - 1]
    return h


def generate_bars(instruments: Sequence[Any], n_bars: int = 10_000, start: str = "2024-01-02", seed: int = 0,
                  schema: str = "ohlcv-1m") -> Bars:
    """Synthetic 1-minute bars on the tick grid (see the module docstring), sorted by (instrument, ts).

    ``instruments``: objects or dicts with ``symbol, instrument_id, tick_size, price, daily_vol, volume``
    (e.g. :class:`trainbench.config.run.InstrumentConfig`). Deterministic from ``seed``.
    """
    if schema != "ohlcv-1m":
        raise ValueError(f"the bar generator writes ohlcv-1m only, not {schema!r}")
    if n_bars < 1 or not instruments:
        raise ValueError("generate_bars needs n_bars >= 1 and at least one instrument")
    ts = session_minutes(start, n_bars)
    season = _season(ts)
    gap_min = np.zeros(n_bars)
    gap_min[1:] = np.diff(ts) / NS_PER_MIN - 1.0
    root = np.random.SeedSequence(seed)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("open", "high", "low", "close", "volume")}
    for inst, child in zip(instruments, root.spawn(len(instruments)), strict=True):
        rng = np.random.default_rng(child)
        tick = float(_field(inst, "tick_size"))
        p0 = float(_field(inst, "price"))
        sigma = float(_field(inst, "daily_vol")) / np.sqrt(SESSION_MINUTES)  # per-minute log-return std
        df = 6.0
        z = np.clip(rng.standard_t(df, n_bars) / np.sqrt(df / (df - 2)), -8, 8)
        h = garch_variance(z)
        vol = sigma * np.sqrt(h) * season  # this bar's return std
        ret = vol * z + sigma * 0.3 * np.sqrt(gap_min) * rng.standard_normal(n_bars)  # gaps move the price
        ret[0] = 0.0
        close = np.maximum(np.round(p0 * np.exp(np.cumsum(ret)) / tick), 1.0)
        open_ = np.concatenate([[np.round(p0 / tick)], close[:-1]])
        excursion = np.abs(rng.standard_normal((2, n_bars))) * (0.6 * vol * close)[None]  # in ticks
        high = np.maximum(open_, close) + np.round(excursion[0])
        low = np.maximum(np.minimum(open_, close) - np.round(excursion[1]), 1.0)
        noise = np.exp(rng.standard_normal(n_bars) * 0.5 - 0.125)
        volume = np.maximum(np.round(float(_field(inst, "volume")) * season ** 1.5 * np.sqrt(h) * noise), 1.0)
        # Fixed-point prices are exact integer multiples of the tick in 1e-9 units.
        tick_fx = round(tick * FIXED_SCALE)
        for name, arr in (("open", open_), ("high", high), ("low", low), ("close", close)):
            cols[name].append(arr.astype(np.int64) * tick_fx / FIXED_SCALE)
        cols["volume"].append(volume)
    K = len(instruments)
    return Bars(ts=np.tile(ts, K), instrument=np.repeat(np.arange(K, dtype=np.int64), n_bars),
                open=np.concatenate(cols["open"]), high=np.concatenate(cols["high"]),
                low=np.concatenate(cols["low"]), close=np.concatenate(cols["close"]),
                volume=np.concatenate(cols["volume"]),
                symbols=[str(_field(i, "symbol")) for i in instruments],
                instrument_ids=[int(_field(i, "instrument_id")) for i in instruments],
                tick_size=np.array([float(_field(i, "tick_size")) for i in instruments]), schema=schema)


def instrument_params(instruments: Iterable[Any]) -> list[dict[str, Any]]:
    """The generator parameters of each instrument, as the sidecar records them."""
    keys = ("symbol", "instrument_id", "tick_size", "price", "daily_vol", "volume")
    return [{k: _field(i, k) for k in keys} for i in instruments]


def _sidecar(params: Mapping[str, Any]) -> dict[str, Any]:
    """The sidecar of a generated file: ``"synthetic": true``, this generator, its parameters."""
    return {"synthetic": True, "generator": "trainbench.data.synth", **params}


def write_ohlcv(path: str | Path, instruments: Sequence[Any], n_bars: int = 10_000, start: str = "2024-01-02",
                seed: int = 0, dataset: str = "GLBX.MDP3", schema: str = "ohlcv-1m") -> Path:
    """Generate bars (:func:`generate_bars`) and write them as a DBN file plus its synthetic sidecar."""
    bars = generate_bars(instruments, n_bars, start, seed, schema)
    side = {"schema": schema, "n_bars": n_bars, "start": start, "seed": seed, "dataset": dataset,
            "instruments": instrument_params(instruments)}
    return write_bars(path, bars, dataset, sidecar=_sidecar(side))


# --------------------------------------------------------------------------------------------------
# MBP-10 book
# --------------------------------------------------------------------------------------------------


def generate_book(n_events: int, seed: int = 0, tick_size: float = 0.00005, price: float = 1.08,
                  start: str = "2024-01-02", mean_size: float = 20.0, p_add: float = 0.5,
                  p_cancel: float = 0.35) -> dict[str, np.ndarray]:
    """Simulate ``n_events`` book events; returns integer-tick arrays (see :func:`write_mbp10`).

    Keys: ``ts`` (E,) ns, ``action`` (E,) bytes A/C/T, ``side`` (E,) bytes B/A, ``price`` (E,) ticks,
    ``size`` (E,), ``depth`` (E,), ``bid_px``/``ask_px`` (E, 10) ticks (0 = empty level),
    ``bid_sz``/``ask_sz``/``bid_ct``/``ask_ct`` (E, 10). Deterministic from ``seed``.
    """
    rng = np.random.default_rng(seed)
    mid = round(price / tick_size)
    bids: dict[int, list[int]] = {}  # price tick -> [size, order count]
    asks: dict[int, list[int]] = {}
    for i in range(12):  # an initial, slightly deeper than ten-level book, one-tick spread
        bids[mid - 1 - i] = [int(rng.integers(5, 3 * mean_size)), int(rng.integers(1, 8))]
        asks[mid + i] = [int(rng.integers(5, 3 * mean_size)), int(rng.integers(1, 8))]
    t0 = int(np.datetime64(start, "D").astype("datetime64[ns]").astype(np.int64)) + 14 * 3600 * 10**9
    gaps = rng.exponential(2e6, n_events).astype(np.int64) + 1_000  # ns between events (~2 ms)
    ts = t0 + np.cumsum(gaps)
    out = {k: np.zeros((n_events, 10), np.int64) for k in ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct",
                                                          "ask_ct")}
    action = np.empty(n_events, "S1")
    side_out = np.empty(n_events, "S1")
    ev_price = np.zeros(n_events, np.int64)
    ev_size = np.zeros(n_events, np.int64)
    depth = np.zeros(n_events, np.int64)
    pending: tuple[str, int, int] | None = None  # the fill of the last trade, applied next event
    u = rng.random((n_events, 4))
    sizes = np.maximum(rng.geometric(1.0 / mean_size, n_events), 1)
    for e in range(n_events):
        bb, ba = max(bids), min(asks)
        if pending is not None:  # the book update of the previous trade: cancel the filled size
            act, sd_out, px_out, qty_out = _fill(bids, asks, pending, int(sizes[e]))
            pending = None
        else:
            r = u[e, 0]
            sd = BID if u[e, 1] < 0.5 else ASK
            if r < p_add:  # liquidity providers refill the thinner side and the holes near the top
                nb = sum(bb - k in bids for k in range(10))  # occupied ticks near each best
                na = sum(ba + k in asks for k in range(10))
                if nb != na and u[e, 1] < 0.5:
                    sd = BID if nb < na else ASK
            book = bids if sd == BID else asks
            best = bb if sd == BID else ba
            sign = -1 if sd == BID else 1  # direction away from the spread
            if r < p_add:
                spread = ba - bb
                holes = [best + sign * k for k in range(1, 10) if best + sign * k not in book]
                if spread > 1 and u[e, 2] < 0.4:  # improve inside the spread
                    px = bb + 1 if sd == BID else ba - 1
                elif holes and u[e, 2] < 0.7:
                    px = holes[0]
                else:
                    px = best + sign * min(int(rng.geometric(0.35)) - 1, 9)
                lvl = book.setdefault(px, [0, 0])
                qty = int(sizes[e])
                lvl[0] += qty
                lvl[1] += 1
                act, sd_out, px_out, qty_out = ADD, sd, px, qty
            elif r < p_add + p_cancel and len(book) > 1:
                levels = sorted(book, reverse=(sd == BID))[:10]
                px = levels[min(int(u[e, 2] * u[e, 3] * len(levels)), len(levels) - 1)]  # favours the top
                lvl = book[px]
                qty = max(1, int(lvl[0] * u[e, 3]))
                if qty >= lvl[0]:
                    qty = lvl[0]
                    del book[px]
                else:
                    lvl[0] -= qty
                    lvl[1] = max(1, lvl[1] - 1)
                act, sd_out, px_out, qty_out = CANCEL, sd, px, qty
            else:  # a trade: an aggressor on side sd takes liquidity at the opposite best
                opp = asks if sd == BID else bids
                px = ba if sd == BID else bb
                qty = max(1, min(int(sizes[e]), opp[px][0]))
                pending = (ASK if sd == BID else BID, px, qty)
                act, sd_out, px_out, qty_out = TRADE, sd, px, qty
        bl, al = _top_levels(out, e, bids, asks)
        action[e] = act.encode()
        side_out[e] = sd_out.encode()
        ev_price[e] = px_out
        ev_size[e] = qty_out
        if act != TRADE:  # the level's index: how many levels on its side are better (also for a removed one)
            depth[e] = sum(p > px_out for p in bl) if sd_out == BID else sum(p < px_out for p in al)
    return {"ts": ts, "action": action, "side": side_out, "price": ev_price, "size": ev_size, "depth": depth,
            **out}


def _fill(bids: dict[int, list[int]], asks: dict[int, list[int]], pending: tuple[str, int, int],
          refill: int) -> tuple[str, str, int, int]:
    """The book update of the previous trade ``pending`` (side, price, size): the filled size cancelled at its
    level; a side is never emptied (``refill`` lots replenish it one tick behind). Returns the event."""
    sd, px, qty = pending
    book = bids if sd == BID else asks
    lvl = book[px]
    lvl[0] -= qty
    if lvl[0] <= 0:
        del book[px]
    elif lvl[1] > 1:
        lvl[1] -= 1
    if not book:  # never empty a side: replenish one tick behind
        book[px - 1 if sd == BID else px + 1] = [refill, 1]
    return CANCEL, sd, px, qty


def _top_levels(out: dict[str, np.ndarray], e: int, bids: dict[int, list[int]],
                asks: dict[int, list[int]]) -> tuple[list[int], list[int]]:
    """Event ``e``'s ten best levels of each side written into ``out``; returns their prices (bids, asks)."""
    bl = sorted(bids, reverse=True)[:10]
    al = sorted(asks)[:10]
    for name, book, lv in (("bid", bids, bl), ("ask", asks, al)):
        n = len(lv)
        out[f"{name}_px"][e, :n] = lv
        out[f"{name}_sz"][e, :n] = [book[p][0] for p in lv]
        out[f"{name}_ct"][e, :n] = [book[p][1] for p in lv]
    return bl, al


def book_from_events(ev: Mapping[str, np.ndarray], tick_size: float, symbol: str) -> Book:
    """The :class:`Book` that reading the written file must give back (for tests)."""
    tick_fx = round(tick_size * FIXED_SCALE)
    levels = np.zeros((len(ev["ts"]), 10, 4))
    for j, (name, kind) in enumerate((("ask", "px"), ("ask", "sz"), ("bid", "px"), ("bid", "sz"))):
        a = ev[f"{name}_{kind}"].astype(np.float64)
        if kind == "px":
            a = np.where(a > 0, ev[f"{name}_px"] * tick_fx / FIXED_SCALE, np.nan)
        levels[:, :, j] = a
    return Book(ts=ev["ts"] + RECV_DELAY_NS, levels=levels, symbol=symbol, tick_size=tick_size)


def write_mbp10(path: str | Path, n_events: int = 10_000, seed: int = 0, symbol: str = "6EH4",
                instrument_id: int = 42, tick_size: float = 0.00005, price: float = 1.08,
                start: str = "2024-01-02", dataset: str = "GLBX.MDP3", mean_size: float = 20.0) -> Path:
    """Generate a book (:func:`generate_book`) and write it as a DBN mbp-10 file plus its sidecar."""
    ev = generate_book(n_events, seed, tick_size, price, start, mean_size)
    side = {"schema": "mbp-10", "n_events": n_events, "seed": seed, "symbol": symbol,
            "instrument_id": instrument_id, "tick_size": tick_size, "price": price, "start": start,
            "dataset": dataset, "mean_size": mean_size}
    return write_records(path, book_to_records(ev, tick_size, instrument_id), "mbp-10", {symbol: instrument_id},
                         dataset, sidecar=_sidecar(side))
