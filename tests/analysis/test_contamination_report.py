"""A busy machine never makes a measured model "not measured": the report says what happened and what to do."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import noisy, report_from_store

from trainbench.analysis.report.report import console_summary, markdown
from trainbench.core.vocab import Series, Summary

N = 12  # measured epochs, as trainer=cpu measures


@pytest.fixture(scope="module")
def busy(store):
    """A two-model CPU sweep whose every epoch was flagged contaminated, and one model with two flagged."""
    exp = store.new_experiment("busy-machine")
    for model, ms in (("dqn", 120.0), ("ppo", 300.0)):
        exp.add_run(model, noisy(ms, N, 0.02, 1), sweep_id="busy", device="cpu",
                    extra_series={Series.CONTAMINATED: np.ones(N), Series.CPU_OTHER_PCT: np.full(N, 85.0)})
    flags = np.zeros(N)
    flags[[3, 7]] = 1.0
    t = noisy(100.0, N, 0.02, 2)
    t[[3, 7]] = 400.0  # the two loaded epochs were slow
    exp.add_run("dqn", t, sweep_id="mixed", device="cpu",
                extra_series={Series.CONTAMINATED: flags, Series.CPU_OTHER_PCT: flags * 60})
    return exp


def test_every_epoch_contaminated_is_measured_labelled_and_low_confidence(busy, tmp_path):
    r = report_from_store(busy, tmp_path, "sweep=busy", "decision.plan=[dqn,ppo]")
    assert r["coverage"]["missing"] == [] and r["coverage"]["measured"] == ["dqn", "ppo"]
    assert r["settings"]["contaminated"] == "auto"
    for name in ("dqn", "ppo"):
        m = r["models"][name]
        assert m["source"] == "measured" and m["projection"]["hours"] > 0
        assert m["samples_used"] + m["outliers_removed"] == N  # every epoch, less outliers only
        c = m["contamination"]
        assert c["used"] and c["epochs_flagged"] == c[Summary.EPOCHS_MEASURED] == N and c["policy"] == "auto"
        assert c["load"][f"{Series.CPU_OTHER_PCT}_max"] == 85.0
        assert f"{N} of {N} measured epochs were flagged contaminated" in c["meaning"]
        assert "upper bound" in c["meaning"] and "quiet" in c["advice"]
    d = r["decision"]
    assert d["recommendation"] != "insufficient_data" and d["confidence"] == "low"
    assert "busy machine" in d["confidence_reasons"][0]
    text = console_summary(r) + markdown(r)
    assert "BUSY MACHINE" in text and "85%" in text and "planned models were not measured" not in text


def test_drop_leaves_the_model_without_a_timing_and_says_why(busy, tmp_path):
    r = report_from_store(busy, tmp_path, "sweep=busy", "decision.plan=[dqn,ppo]", "analysis.contaminated=drop")
    m = r["models"]["dqn"]
    assert m["source"] == "missing" and r["coverage"]["missing"] == ["dqn", "ppo"]
    why = m["missing_reason"]
    assert why.startswith(f"measured, but all {N} of {N} measured epochs were flagged contaminated")
    assert "85%" in why and "analysis.contaminated=auto" in why


def test_clean_epochs_win_where_there_are_enough(busy, tmp_path):
    r = report_from_store(busy, tmp_path, "sweep=mixed", "decision.plan=[dqn]")
    m = r["models"]["dqn"]
    c = m["contamination"]
    assert not c["used"] and c["epochs_flagged"] == 2 and m["samples_used"] <= N - 2
    assert m[Series.EPOCH_TIME_MS]["max"] < 200  # the loaded 400 ms epochs are out
    assert "busy machine" not in " ".join(r["decision"]["confidence_reasons"][:1])
    # use: the loaded epochs count (and the interval shows it)
    u = report_from_store(busy, tmp_path, "sweep=mixed", "decision.plan=[dqn]", "analysis.contaminated=use")
    assert u["models"]["dqn"]["contamination"]["used"] and u["models"]["dqn"]["samples_used"] >= N - 2
