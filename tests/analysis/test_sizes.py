"""Two sizes of one model are two rows, never one pooled figure; the decision uses the profile's size; an
epoch with a validation pass is projected as training + validation; each run says how it stopped."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import noisy, report_from_store

from trainbench.analysis.pipeline import decision_sizes
from trainbench.analysis.report.report import markdown as render_markdown
from trainbench.analysis.runs import RunRecord
from trainbench.core.errors import AnalysisError
from trainbench.core.vocab import Kind, Outcome, ParamKey, ReportKey, Series, Summary, Tag


def _report(store, tmp_path, *overrides):
    return report_from_store(store, tmp_path, *overrides)


def _sized(size, profile="reference"):
    return {ParamKey.MODEL_SIZE: size, "trainer.size": profile}


def test_two_sizes_of_one_model_are_two_rows_and_the_decision_uses_the_profiles(store, tmp_path):
    store.add_run("tft", noisy(100.0, 30, 0.01, 1), sweep_id="sz", extra_params=_sized("reference"))
    store.add_run("tft", noisy(5.0, 30, 0.01, 2), sweep_id="sz", extra_params=_sized("small"), job="1")
    r = _report(store, tmp_path, "sweep=sz", "hardware=cpu")
    ref, small = r["models"]["tft"], r["models"]["tft[small]"]
    assert (ref["size"], small["size"]) == ("reference", "small")
    assert ref["runs"] == small["runs"] == 1  # never pooled
    assert ref[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(100.0, rel=0.02)
    assert small[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(5.0, rel=0.02)
    assert ref["in_plan"] and not small["in_plan"]
    assert r["decision"][ReportKey.MODELS_IN_TOTAL] == ["tft"]
    assert r["decision"][Summary.TOTAL_HOURS] == pytest.approx(ref["projection"]["hours"])
    # decision.size picks the other one
    r = _report(store, tmp_path, "sweep=sz", "hardware=cpu", "decision.size=small")
    assert r["models"]["tft"]["size"] == "small" and r["models"]["tft[reference]"]["size"] == "reference"
    assert r["models"]["tft"][Series.EPOCH_TIME_MS]["mean"] == pytest.approx(5.0, rel=0.02)
    md = render_markdown(r)
    assert "`tft[reference]` = reference" in md and "`tft` = small" in md
    # a size nobody measured or profiled: one line naming the sizes that were and the command that makes it
    with pytest.raises(AnalysisError, match=r"decision.size=large: no run or profile of size large for tft .*"
                                            r"measured or profiled at: reference, small.*size=large"):
        _report(store, tmp_path, "sweep=sz", "hardware=cpu", "decision.size=large")


def test_decision_size_rules():
    def rec(model, size, profile):
        return RunRecord(run_id=f"{model}{size}", run_name="r", model=model, device="cpu", sweep_id="s",
                         outcome=Outcome.COMPLETED, status="FINISHED", start_time=0, warmup_epochs=0, target_epochs=10,
                         params={ParamKey.MODEL_SIZE: size, "trainer.size": profile}, tags={}, metrics={})
    recs = [rec("tft", "small", "reference"), rec("tft", "reference", "reference"), rec("dqn", "small", "reference")]
    got = decision_sizes(recs, None)
    assert got["tft"] == ("reference", "the size the team trains (reference): measured at it")
    assert got["dqn"][0] == "small" and "only size" in got["dqn"][1]
    assert decision_sizes(recs, "small")["tft"][0] == "small"
    # the team's size wherever a run is its workload: one of the same config (tag size_same_as), or a profile
    same = rec("ppo", "small", "small")
    same.tags[Tag.SIZE_SAME_AS] = "reference"
    prof = rec("tlob", "reference", "small")
    prof.tags[Tag.KIND], prof.outcome = Kind.PROFILE, Outcome.PROFILED
    failed = rec("mamba2", "reference", "small")
    failed.tags.update({Tag.KIND: Kind.PROFILE, Tag.ERROR: "reference profile past its budget"})
    failed.outcome = Outcome.FAILED
    got = decision_sizes([same, prof, rec("tlob", "small", "small"), failed, rec("mamba2", "small", "small")], None)
    assert got["ppo"][0] == "reference" and "same workload" in got["ppo"][1]
    assert got["tlob"][0] == "reference" and "profiled without training" in got["tlob"][1]
    assert got["mamba2"][0] == "small" and "profile run ended failed (reference profile past its budget)" in \
        got["mamba2"][1]


def test_epoch_time_is_train_plus_validation_and_stop_reasons_are_reported(store, tmp_path):
    train = np.full(20, 10.0)
    store.add_run("mamba2", train, sweep_id="ev", extra_params=_sized("small", "small"),
                  extra_series={Series.EVAL_TIME_MS: np.full(20, 2.5), Series.VAL_LOSS: np.linspace(1, 0.5, 20)},
                  extra_tags={Tag.STOP_REASON: "converged"})
    r = _report(store, tmp_path, "sweep=ev", "hardware=cpu")
    m = r["models"]["mamba2"]
    assert m[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(12.5)
    assert m["epoch_time_includes_eval"] is True
    assert m["stop_reasons"] == {"converged": 1}
    assert r["runs"][0][Tag.STOP_REASON] == "converged" and "stopped: converged" in r["runs"][0]["notes"]
    assert "How the measurements stopped" in render_markdown(r)
