"""The report a person reads first, and its words from the computation: the decision and the figure it rests
on lead the console and report.md; what lowers confidence is listed once per kind; an interval the data cannot
resolve is shown as unresolved (never as bounds) and stays out of the conservative total; the Method paragraph
says what the estimators did, so switching one changes its sentence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from analysis_helpers import noisy, report_from_store

from trainbench.analysis.fields import from_json, to_json
from trainbench.analysis.report.method import method_sentences
from trainbench.analysis.report.reasons import reason_kinds
from trainbench.analysis.report.report import console_summary, markdown
from trainbench.analysis.report_types import ModelEntry, Report
from trainbench.analysis.statistics.stats import UNRESOLVED_RATIO, unresolved_reason
from trainbench.core.errors import UnknownReportKey
from trainbench.core.vocab import Series, Summary

PLAN3 = ["dqn", "ppo", "tft"]


def _disagreeing(exp, sweep):
    """Three models, each two runs whose means differ beyond their own noise: the same two kinds of reason
    (runs disagree, train more seeds) for every model."""
    for i, m in enumerate(PLAN3):
        exp.add_run(m, noisy(100.0, 30, 0.002, 10 + i), sweep_id=sweep, job=f"{i}a")
        exp.add_run(m, noisy(120.0, 30, 0.002, 20 + i), sweep_id=sweep, job=f"{i}b")


def test_console_and_report_md_lead_with_the_decision_and_its_figure(store, tmp_path):
    exp = store.new_experiment("first-decision")
    _disagreeing(exp, "lead")
    r = report_from_store(exp, tmp_path, "sweep=lead", f"decision.plan=[{','.join(PLAN3)}]")
    con, md = console_summary(r).splitlines(), markdown(r)
    # the line read first: what the answer rests on (sizes, epochs and where each comes from), then the decision
    assert con[0] == f"answer: {r['decision']['headline']}" and "epochs: " in con[0]
    assert con[1].startswith(f"decision: {r['decision']['recommendation']}") and "rests on:" in con[1]
    assert con[2].strip().startswith("total ") and "conservative" in con[2]
    assert con.index(next(x for x in con if x.startswith("sweep "))) > con.index("what lowers confidence:")
    assert md.index("## Decision") < md.index("## Coverage") < md.index("## Epoch time")
    decision = md[md.index("## Decision"):md.index("## Coverage")]
    assert "Rests on:" in decision and "conservative" in decision
    assert decision.index("The answer rests on") < decision.index("Recommendation:")
    assert md.index("## Per-model detail") > md.index("## Epoch time")


def test_what_lowers_confidence_lists_each_kind_once_with_its_models(store, tmp_path):
    exp = store.new_experiment("first-kinds")
    _disagreeing(exp, "kinds")
    r = report_from_store(exp, tmp_path, "sweep=kinds", f"decision.plan=[{','.join(PLAN3)}]")
    reasons = r["decision"]["confidence_reasons"]
    assert sum("runs disagree" in x for x in reasons) == 3  # report.json keeps every reason, per model
    kinds = reason_kinds(from_json(Report, r))
    disagree = [k for k in kinds if "disagree" in k.text]
    assert len(disagree) == 1 and disagree[0].models == PLAN3
    con = console_summary(r).splitlines()
    start = con.index("what lowers confidence:") + 1
    block = con[start:next(i for i in range(start, len(con)) if not con[i].startswith("  - "))]
    assert sum("disagree" in x for x in block) == 1 and any("(dqn, ppo, tft)" in x for x in block)
    assert len(block) == len(kinds) < len(reasons)
    md = markdown(r)
    lowers = md[md.index("What lowers confidence"):md.index("## Coverage")]
    assert lowers.count("disagree") == 1
    detail = md[md.index("## Per-model detail"):]
    assert detail.count("runs disagree beyond their own 95% intervals: run") == 3  # the words, per model


def test_the_unresolved_rule():
    assert unresolved_reason((10.0, 10.0 * UNRESOLVED_RATIO * 1.01), "batch_means", 1)
    assert unresolved_reason((10.0, 10.0 * UNRESOLVED_RATIO * 0.99), "batch_means", 1) is None
    assert unresolved_reason(None, None, 0) is None
    assert "more seeds" in unresolved_reason((0.0, 5.0), "random_effects", 2)


def test_an_interval_the_data_cannot_resolve_is_shown_as_unresolved_and_not_in_the_conservative_total(
        store, tmp_path):
    """One run of 12 epochs that jumps from 20 ms to 2 s halfway: batch means on one degree of freedom give
    bounds orders of magnitude apart (the dqn of a busy machine once read [17.53, 5.277e+06] ms)."""
    exp = store.new_experiment("first-unresolved")
    exp.add_run("dqn", np.r_[noisy(20.0, 6, 0.01, 1), noisy(2000.0, 6, 0.01, 2)], sweep_id="u", target_epochs=100)
    exp.add_run("ppo", noisy(50.0, 40, 0.01, 3), sweep_id="u", job="1", target_epochs=100)
    r = report_from_store(exp, tmp_path, "sweep=u", "decision.plan=[dqn,ppo]", "analysis.outliers=none")
    e = r["models"]["dqn"][Series.EPOCH_TIME_MS]
    lo, hi = e["centre"]["unresolved_bounds"]
    assert hi / lo > UNRESOLVED_RATIO and e["ci95_mean"] is None and e["ci95_mean_resolved"] is False
    assert "more seeds" in e["ci95_mean_unresolved"]
    assert r["models"]["ppo"][Series.EPOCH_TIME_MS]["ci95_mean_resolved"] is True
    d = r["decision"]
    assert d["conservative_unbounded"] == ["dqn"] and d["confidence"] == "low"
    assert r["models"]["dqn"]["projection"]["hours_ci95"] is None
    # the conservative total counts dqn's central hours (x the buffer), never its unresolved upper bound
    dqn_hours = r["models"]["dqn"]["projection"]["hours"]
    assert d[Summary.TOTAL_HOURS_CONSERVATIVE] < (hi * 100 / 3.6e6) and d[Summary.TOTAL_HOURS_CONSERVATIVE] >= dqn_hours
    assert "cannot bound dqn" in d["rationale"]
    assert "dqn" in d["distribution_left_out"]
    con, md = console_summary(r), markdown(r)
    row = next(x for x in con.splitlines() if x.startswith("dqn "))
    assert "unresolved" in row and f"{hi:.4g}" not in row and f"{lo:.4g}" not in row
    assert "**unresolved**" in md and "more seeds" in md and f"{hi:.4g}" not in md
    assert "cannot bound dqn" in con


@pytest.mark.slow
def test_the_method_paragraph_changes_with_the_estimator(store, tmp_path):
    """The Method sentences come from what the computation recorded: one run is batch means, two runs the
    random-effects mean (never "the t-interval of the per-run means"), the outlier rule is the one set, and
    the bootstrap is the two-stage one where runs were drawn first."""
    exp = store.new_experiment("first-method")
    exp.add_run("dqn", noisy(100.0, 30, 0.01, 1), sweep_id="one")
    exp.add_run("dqn", noisy(100.0, 30, 0.01, 1), sweep_id="two")
    exp.add_run("dqn", noisy(104.0, 30, 0.01, 2), sweep_id="two", job="1")
    one = " ".join(method_sentences(from_json(Report, report_from_store(exp, tmp_path, "sweep=one",
                                                                          "decision.plan=[dqn]"))))
    two = " ".join(method_sentences(from_json(Report, report_from_store(exp, tmp_path, "sweep=two",
                                                                          "decision.plan=[dqn]"))))
    assert "batch-means interval" in one and "random-effects" not in one
    assert "random-effects mean of the run means" in two and "t-interval of the per-run means" not in two
    assert "two-stage bootstrap" in two and "two-stage" not in one
    mad = " ".join(method_sentences(from_json(Report, report_from_store(
        exp, tmp_path, "sweep=two", "decision.plan=[dqn]", "analysis.outliers=mad"))))
    assert "Tukey's fences" in two and "robust z-score" in mad and "Tukey" not in mad
    md = markdown(report_from_store(exp, tmp_path, "sweep=two", "decision.plan=[dqn]"))
    assert "random-effects mean of the run means" in md[md.index("## Method"):]


def test_the_types_hold_every_key_and_their_defaults_once(store, tmp_path):
    """A model without runs has every field of the entry (the defaults live in the type), and a key without a
    field is refused with its name."""
    exp = store.new_experiment("first-types")
    exp.add_run("dqn", noisy(100.0, 20, 0.01, 1), sweep_id="t")
    r = report_from_store(exp, tmp_path, "sweep=t", "decision.plan=[dqn,tft]")
    always = {f.name for f in dataclasses.fields(ModelEntry) if not f.metadata.get("omit_none")}
    assert always <= set(r["models"]["tft"]) and always <= set(r["models"]["dqn"])
    assert to_json(from_json(Report, r)) == r  # report.json is the types' serialisation, and reads back whole
    with pytest.raises(UnknownReportKey, match="models.tft: bogus_field"):
        from_json(Report, {**r, "models": {"tft": {**r["models"]["tft"], "bogus_field": 1}}})


def test_the_plans_reasons_are_one_line_per_kind_whatever_their_details() -> None:
    """Two models whose curves overfit after different epochs, two whose epochs were converted with alpha
    unmeasured at different scales: one line each, naming both models."""
    from types import SimpleNamespace

    from trainbench.analysis.report_types import ConfidenceReason, ReasonKind

    reasons = [ConfidenceReason(ReasonKind.CURVE_OVERFITS, ["a"], "its curve overfits after epoch 2"),
               ConfidenceReason(ReasonKind.CURVE_OVERFITS, ["b"], "its curve overfits after epoch 7"),
               ConfidenceReason(ReasonKind.DATA_SCALE_UNTRUSTED, ["a"], "data scaling not trusted (too small)"),
               ConfidenceReason(ReasonKind.DATA_SCALE_UNTRUSTED, ["b"], "data scaling not trusted (unknown size)"),
               ConfidenceReason("noisy", ["b"], "noisy timings in run 1_b"),
               ConfidenceReason(ReasonKind.PROFILED_OUTSIDE, ["a", "b"], "profiled, not projected"),
               ConfidenceReason(ReasonKind.MISSING, [], "1 of 3 planned models were not measured: c")]
    report = SimpleNamespace(decision=SimpleNamespace(confidence_reason_kinds=reasons))
    kinds = reason_kinds(report)
    assert [k.models for k in kinds] == [["a", "b"], ["a", "b"], ["b"], ["a", "b"], []]
    assert kinds[0].text.startswith("a curve overfits") and kinds[1].text == "data scaling not trusted"
    assert kinds[2].text.startswith("noisy timings (IQR/median")  # a stability warning: the statistics' line
    assert kinds[3].text == "profiled, not projected"  # a kind without a line of its own: its words
    assert kinds[4].line() == "1 of 3 planned models were not measured: c"  # the sweep's: a line of its own
