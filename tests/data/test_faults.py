"""An instrument with too few bars for a single window (issue 31): warned about once, named in its own tag and
left out of ``data_instruments``, never silently kept as if it had been trained on."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from helpers.models import build_model
from trainbench.core.vocab import DataInfo, data_tag
from trainbench.data.arrays import Bars
from trainbench.data.features import compute_features
from trainbench.data.in_memory import random_walk_bars
from trainbench.data.market import MarketData


def _one_short_instrument(short: int = 40) -> Bars:
    """Three instruments of 3000 bars, the last cut to its first ``short`` bars."""
    b = random_walk_bars(3000, n_instruments=3, seed=2)
    keep = (b.instrument != 2) | (np.arange(b.instrument.size) < 2 * 3000 + short)
    return dataclasses.replace(b, **{k: getattr(b, k)[keep] for k in
                                     ("ts", "instrument", "open", "high", "low", "close", "volume")})


def test_an_instrument_without_a_window_is_warned_about_once(caplog):
    fs = compute_features(_one_short_instrument())
    with caplog.at_level(logging.WARNING, logger="trainbench.data.features"):
        starts = fs.window_starts(60, 1, split="train")
        fs.window_starts(60, 1, split="train")  # a second build (memory fitting) does not warn again
    assert starts.numel() > 0 and fs.without_windows == {2: "SYM2"}
    warned = [r.getMessage() for r in caplog.records if "too few bars" in r.getMessage()]
    assert len(warned) == 1 and "SYM2" in warned[0] and data_tag(DataInfo.INSTRUMENTS) in warned[0]
    # with a window that it can fill, nothing is said
    fs = compute_features(_one_short_instrument())
    fs.window_starts(8, 1, split="train")
    assert fs.without_windows == {}


def test_the_run_tags_leave_it_out_of_the_instruments(caplog):
    from trainbench.train import _tag_instruments_without_windows

    bars = _one_short_instrument()
    data = MarketData(name="t", schema="ohlcv-1m", path=Path("memory"), synthetic=True, sha256="0" * 64, bars=bars,
                      features=compute_features(bars))
    build_model("mamba2", "model.seq_len=64", data=data)  # the model asks for its training windows
    tags: dict[str, str] = {}
    run = SimpleNamespace(writer=SimpleNamespace(set_tags=tags.update))
    _tag_instruments_without_windows(run, data)
    assert tags == {data_tag(DataInfo.INSTRUMENTS): "SYM0,SYM1",
                    data_tag(DataInfo.INSTRUMENTS_WITHOUT_WINDOWS): "SYM2"}
