"""The example model's tests: what it computes, what it refuses, and trainbench's conformance check."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from lstm_forecaster.model import SIZES, SPEC, LSTMForecasterConfig

from trainbench.api import INFO_KEYS, BuildContext, ModelDataError, assert_conforms
from trainbench.data.in_memory import make_market_data

CPU = torch.device("cpu")


def _build(n_bars: int = 1200, **cfg):
    """The model at its `tiny` size (SPEC.sizes) with ``cfg`` changed, on ``n_bars`` synthetic bars."""
    config = LSTMForecasterConfig(**{**SIZES["tiny"], "size": "tiny", **cfg})
    return SPEC.build(config, make_market_data(n_bars), BuildContext(device=CPU))


def test_it_passes_the_conformance_check():
    results = assert_conforms(SPEC, size="tiny", bars=1200)
    assert {r.name for r in results} >= {"no host sync", "fixed work", "determinism", "memory", "inference"}


def test_the_target_is_the_scaled_cumulative_return_after_the_window():
    tr = _build(horizon=3)
    fs = tr.fs
    s = int(tr.train_starts[5])
    returns = fs.returns.double().numpy()
    want = returns[s + 8: s + 11].sum() / (fs.return_std * math.sqrt(3))
    assert float(tr.train_targets[5]) == pytest.approx(want, rel=1e-5)
    assert tr.inputs(tr.train_starts[:2]).shape == (2, 8, fs.n_features)
    # every window and its target lie in one session and in the training split
    ends = tr.train_starts + 8 + 3 - 1
    assert bool((fs.segment[tr.train_starts] == fs.segment[ends]).all()) and bool(fs.is_train[ends].all())


def test_an_epoch_is_every_full_batch_of_training_windows_and_learns():
    tr = _build(n_bars=1500)
    assert tr.samples_per_epoch == (tr.n_train // 64) * 64 and tr.batch_limit == tr.n_train
    losses = [float(tr.train_epoch()["loss"]) for _ in range(8)]
    assert np.isfinite(losses).all()
    assert min(losses[-3:]) < losses[0]  # a random walk's target is noise, but the first fit still improves
    assert set(tr.eval_epoch()) == {"val_loss"}
    info = tr.info()  # the run params every model shares, then its own
    assert set(INFO_KEYS) <= set(info) and info["train_windows"] == tr.n_train and info["val_windows"] > 0


def test_too_little_data_names_the_window_and_the_fix():
    with pytest.raises(ModelDataError, match=r"window \+ horizon = 13 .*shorter model.window"):
        _build(n_bars=60, window=8, horizon=5, batch_size=64)


@pytest.mark.slow
def test_the_entry_point_names_the_spec():
    table = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert table["project"]["entry-points"]["trainbench.models"] == {SPEC.name: "lstm_forecaster.model:SPEC"}
    assert set(SPEC.sizes) == {"tiny", "small", "reference"}
