"""analysis/logged.py: a logged value (MLflow keeps params and tags as strings) read back as an integer."""

from __future__ import annotations

import pytest

from trainbench.analysis.logged import logged_int


@pytest.mark.parametrize("value,want", [("64", 64), ("64.0", 64), (64, 64), (2.9, 2), ("-3", -3), ("1e3", 1000),
                                        ("inf", None), ("-inf", None), ("nan", None), ("", None), ("abc", None),
                                        (None, None)])
def test_a_logged_value_is_an_integer_or_none_never_an_error(value, want):
    assert logged_int(value) == want


@pytest.mark.parametrize("value,want", [("1", 1), ("64", 64), ("0", None), ("-3", None), ("0.5", None),
                                        ("inf", None), (None, None)])
def test_a_count_below_its_minimum_is_none(value, want):
    assert logged_int(value, minimum=1) == want


def test_the_plan_reads_an_infinite_logged_window_count_as_unknown():
    """The plan's own parser used to raise OverflowError on a logged 'inf' (int(float('inf')))."""
    from types import SimpleNamespace

    from trainbench.analysis.plan.plan import windows_of
    from trainbench.core.vocab import model_info

    run = SimpleNamespace(params={model_info("train_windows"): "inf", model_info("val_windows"): "10"})
    assert windows_of(run) is None
    run.params[model_info("train_windows")] = "90"
    assert windows_of(run) == 100
