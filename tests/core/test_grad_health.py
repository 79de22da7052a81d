"""One gradient-health definition and vocabulary (trainbench.core.grad_health): old stored words still read."""

from __future__ import annotations

import numpy as np

from trainbench.core.grad_health import LEGACY, classify_gradients, normalise, worst
from trainbench.core.vocab import GradientHealth, names


def test_classify_gradients_rules():
    assert classify_gradients([]).verdict == GradientHealth.UNKNOWN
    assert classify_gradients([1.0, np.inf]).verdict == GradientHealth.NON_FINITE
    assert classify_gradients([np.nan, 1.0, 1.0], warmup_epochs=1).verdict == GradientHealth.HEALTHY
    h = classify_gradients(np.r_[np.full(9, 2.0), 2.0e3 + 1])
    assert h.verdict == GradientHealth.EXPLODING and h.max_ratio > 1e3
    assert classify_gradients(np.r_[np.full(9, 2.0), 1.9e3]).verdict == GradientHealth.HEALTHY
    assert classify_gradients(np.r_[np.ones(10), np.full(20, 1e-9)]).verdict == GradientHealth.VANISHING


def test_old_stored_words_read_as_todays():
    assert normalise("nonfinite") == GradientHealth.NON_FINITE  # the run tag before one vocabulary
    assert normalise("ok") == GradientHealth.HEALTHY  # the report before one vocabulary
    assert normalise(None) == normalise("garbage") == GradientHealth.UNKNOWN
    assert all(normalise(w) == w for w in names(GradientHealth))
    assert set(LEGACY.values()) <= set(names(GradientHealth))
    assert worst(["ok", "nonfinite", "exploding"]) == GradientHealth.NON_FINITE
    assert worst(["healthy", "vanishing"]) == GradientHealth.VANISHING and worst([]) == GradientHealth.UNKNOWN
