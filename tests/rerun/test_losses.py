"""The per-epoch series of a rerun against the original's: exact, and blind to timings."""

from __future__ import annotations

import pytest

from trainbench.core.vocab import Series
from trainbench.rerun.losses import loss_comparison


def test_loss_comparison_is_exact_and_ignores_timings():
    a = {"loss": [1.0, 0.5], Series.GRAD_NORM: [2.0, 1.0], Series.EPOCH_TIME_MS: [10.0, 11.0], "warmup_epochs": 1}
    same = loss_comparison(a, {**a, Series.EPOCH_TIME_MS: [12.0, 9.0]})
    assert same["identical"] and set(same["series"]) == {"loss", Series.GRAD_NORM}
    # the machine's load, rates and the validation pass's time are measurements too, never compared
    load = {Series.CPU_BUSY_PCT: [50.0, 60.0], "contaminated": [0, 1], Series.ENV_STEPS_PER_S: [1e4, 2e4],
            Series.EVAL_TIME_MS: [3.0, 4.0]}
    other = {k: [v[1], v[0]] for k, v in load.items()}
    assert loss_comparison({**a, **load}, {**a, **other})["identical"]
    off = loss_comparison(a, {**a, "loss": [1.0, 0.5000001]})
    assert not off["identical"] and off["series"]["loss"]["max_abs_diff"] == pytest.approx(1e-7)
