"""The synthetic market: realistic bars, a consistent book, read back to the tick, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.data import FOUR, SIX_E
from trainbench.data import synth
from trainbench.data.dbn import read_bars, read_book, sidecar_path


def test_write_then_read_gives_back_the_generated_prices_to_the_tick(tmp_path) -> None:
    gen = synth.generate_bars(FOUR, 2000, seed=3)
    synth.write_ohlcv(tmp_path / "x.dbn.zst", FOUR, n_bars=2000, seed=3)
    got = read_bars(tmp_path / "x.dbn.zst")
    assert got.symbols == ["ESH4", "NQH4", "ZNH4", "6EH4"] and got.instrument_ids == [1, 2, 3, 42]
    np.testing.assert_array_equal(got.ts, gen.ts)
    np.testing.assert_array_equal(got.instrument, gen.instrument)
    tick = gen.tick_size[gen.instrument]
    for name in ("open", "high", "low", "close"):
        a, b = getattr(got, name), getattr(gen, name)
        np.testing.assert_array_equal(np.round(a / tick), np.round(b / tick), err_msg=name)
        assert np.abs(a - b).max() < 1e-9
        assert np.abs(a / tick - np.round(a / tick)).max() < 1e-6, f"{name} off the tick grid"
    np.testing.assert_array_equal(got.volume, gen.volume)
    np.testing.assert_allclose(got.tick_size, [0.25, 0.25, 1 / 64, 0.00005])  # inferred from the prices


def test_bars_are_realistic() -> None:
    b = synth.generate_bars([SIX_E], 20_000, seed=0)
    assert (b.low <= np.minimum(b.open, b.close)).all() and (b.high >= np.maximum(b.open, b.close)).all()
    assert (b.volume >= 1).all() and (b.low > 0).all()
    ct = b.ts + synth.CT_OFFSET_NS
    minute = (ct % synth.NS_PER_DAY) // synth.NS_PER_MIN
    wd = (ct // synth.NS_PER_DAY + 3) % 7
    assert not ((minute >= 960) & (minute < 1020)).any(), "bars inside the daily 16:00-17:00 CT break"
    assert not (wd == 5).any() and not ((wd == 6) & (minute < 1020)).any(), "bars on the weekend"
    gaps = np.diff(b.ts) // synth.NS_PER_MIN
    assert set(np.unique(gaps)) <= {1, 61, 49 * 60 + 1}  # minutes, the daily break, the weekend
    r = np.diff(np.log(b.close))
    r = r[gaps == 1]
    # volatility clustering: |r| is autocorrelated
    a = np.abs(r) - np.abs(r).mean()
    assert (a[1:] * a[:-1]).mean() / a.var() > 0.05
    # seasonality: the US open (08:30-09:30 CT) is busier and more volatile than the night (20:00-01:00 CT)
    m = minute[1:][gaps == 1]
    day, night = (m >= 510) & (m < 570), (m >= 1200) | (m < 60)
    assert r[day].std() > 1.5 * r[night].std()
    v = b.volume[1:][gaps == 1]
    assert v[day].mean() > 1.5 * v[night].mean()
    daily = r.std() * np.sqrt(synth.SESSION_MINUTES)
    assert 0.5 * 0.005 < daily < 2 * 0.005


def test_same_seed_same_file_other_seed_other_file(tmp_path) -> None:
    a = synth.write_ohlcv(tmp_path / "a.dbn.zst", [SIX_E], n_bars=300, seed=7).read_bytes()
    b = synth.write_ohlcv(tmp_path / "b.dbn.zst", [SIX_E], n_bars=300, seed=7).read_bytes()
    c = synth.write_ohlcv(tmp_path / "c.dbn.zst", [SIX_E], n_bars=300, seed=8).read_bytes()
    assert a == b and a != c
    m1 = synth.write_mbp10(tmp_path / "m1.dbn", 200, seed=1).read_bytes()
    m2 = synth.write_mbp10(tmp_path / "m2.dbn", 200, seed=1).read_bytes()
    m3 = synth.write_mbp10(tmp_path / "m3.dbn", 200, seed=2).read_bytes()
    assert m1 == m2 and m1 != m3


def test_sidecar_marks_the_file_synthetic(tmp_path) -> None:
    import json

    p = synth.write_ohlcv(tmp_path / "a.dbn.zst", [SIX_E], n_bars=10, seed=1)
    doc = json.loads(sidecar_path(p).read_text())
    assert doc["synthetic"] is True and doc["seed"] == 1 and doc["n_bars"] == 10
    assert {q.name for q in tmp_path.iterdir()} == {"a.dbn.zst", "a.dbn.zst.json"}  # no temp files left


def test_garch_closed_form_matches_the_recursion() -> None:
    z = np.random.default_rng(0).standard_normal(1000)
    h = synth.garch_variance(z, 0.05, 0.93, chunk=64)
    ref = np.empty_like(z)
    ref[0] = 1.0
    for t in range(1, z.size):
        ref[t] = 0.02 + (0.05 * z[t - 1] ** 2 + 0.93) * ref[t - 1]
    np.testing.assert_allclose(h, ref, rtol=1e-9)


def test_mbp10_round_trip_and_consistent_at_every_event(tmp_path) -> None:
    n, tick = 3000, 0.00005
    ev = synth.generate_book(n, seed=5, tick_size=tick)
    want = synth.book_from_events(ev, tick, "6EH4")
    synth.write_mbp10(tmp_path / "b.dbn.zst", n, seed=5, tick_size=tick)
    book = read_book(tmp_path / "b.dbn.zst")
    assert len(book) == n and book.skipped == 0 and book.symbol == "6EH4"
    assert book.tick_size == pytest.approx(tick)
    np.testing.assert_array_equal(book.ts, want.ts)
    np.testing.assert_array_equal(np.isnan(book.levels), np.isnan(want.levels))
    np.testing.assert_allclose(book.levels, want.levels, atol=1e-12)
    L = book.levels
    ask, asz, bid, bsz = L[..., 0], L[..., 1], L[..., 2], L[..., 3]
    assert (bid[:, 0] < ask[:, 0]).all(), "crossed or locked"
    for px, sz in ((ask, asz), (bid, bsz)):
        ok = ~np.isnan(px)
        assert ok[:, 0].all()
        assert (sz[ok] > 0).all() and (sz[~ok] == 0).all()
        ticks = px[ok] / tick
        assert np.abs(ticks - np.round(ticks)).max() < 1e-6
        # defined levels come first, then the empty ones
        assert (ok[:, 1:] <= ok[:, :-1]).all()
    both = ~np.isnan(ask[:, 1:]) & ~np.isnan(ask[:, :-1])
    assert (np.diff(ask, axis=1)[both] > 0).all()
    both = ~np.isnan(bid[:, 1:]) & ~np.isnan(bid[:, :-1])
    assert (np.diff(bid, axis=1)[both] < 0).all()
    assert (~np.isnan(L[:, :, 0])).sum(1).mean() > 9  # a ten-level book, nearly always full
    acts, counts = np.unique(ev["action"], return_counts=True)
    assert set(acts) == {b"A", b"C", b"T"} and counts.min() > n // 20
    # a trade leaves the book as it was; the next record cancels the traded size at that price
    t = np.flatnonzero(ev["action"] == b"T")
    t = t[t < n - 1][:50]
    assert (ev["action"][t + 1] == b"C").all() and (ev["price"][t + 1] == ev["price"][t]).all()
    np.testing.assert_array_equal(ev["bid_px"][t], ev["bid_px"][t - 1])
    mid = book.mid()
    assert mid.max() > mid.min()  # the price moves
