"""The one rule of which measured epochs a timing uses (the run's summary and the analysis share it)."""

from __future__ import annotations

import numpy as np
import pytest

from trainbench.core.contamination_policy import kept


def test_auto_drops_contaminated_epochs_when_three_clean_ones_remain():
    k = kept([10, 11, 50, 12], [0, 0, 1, 0])
    assert k.mask.tolist() == [True, True, False, True] and not k.used_contaminated


def test_auto_uses_every_finite_epoch_when_the_machine_was_busy_throughout():
    k = kept([50, 52, np.nan, 51], [1, 1, 1, 0])  # one clean epoch: too few
    assert k.mask.tolist() == [True, True, False, True] and k.used_contaminated
    assert kept([50, 52], [1, 1]).used_contaminated


def test_drop_and_use_are_what_they_say():
    assert kept([50, 52, 10], [1, 1, 0], "drop").mask.tolist() == [False, False, True]
    u = kept([50, 52, 10, 11, 12], [1, 1, 0, 0, 0], "use")
    assert u.mask.all() and u.used_contaminated
    assert not kept([10, 11], [0, 0], "use").used_contaminated  # nothing contaminated to use


def test_missing_or_misaligned_flags_count_every_epoch_as_clean():
    assert kept([1, 2, 3], None).mask.all() and kept([1, 2, 3], [1]).mask.all()


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="auto, drop, use"):
        kept([1.0], [0], "sometimes")
