"""Fault cases of the analysis (issue 31): a sweep still running, a store that dies, a folder that cannot be
written. Each ends as documented: the right word, one line, nothing written half."""

from __future__ import annotations

from analysis_helpers import analyze_cfg, noisy
from trainbench.analysis.pipeline import run_analysis
from trainbench.core.vocab import Outcome, Tag

PARENT = "mlflow.parentRunId"


def _parent(store, sweep_id: str, status: str | None) -> str:
    run = store.client.create_run(store.exp_id, run_name=sweep_id, tags={Tag.KIND: "sweep", Tag.SWEEP_ID: sweep_id})
    if status:
        store.client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_open_runs_of_a_sweep_whose_parent_is_running_are_in_progress_not_stale(store, tmp_path):
    live = _parent(store, "live1", None)  # the sweep is still going
    store.add_run("dqn", noisy(50.0, 12, 0.01, 1), sweep_id="live1", job="0", extra_tags={PARENT: live})
    store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="live1", job="1", outcome=Outcome.STALE,
                  extra_tags={PARENT: live})
    cfg = analyze_cfg(store, tmp_path, ["sweep=live1"])
    report, _ = run_analysis(cfg, tmp_path / "r1", log=lambda *_: None)
    row = next(r for r in report["runs"] if r[Tag.JOB] == "1")
    assert row["outcome"] == Outcome.IN_PROGRESS, row
    assert "in progress" in row["excluded_reason"] and "killed" not in row["excluded_reason"]


def test_open_runs_of_a_sweep_whose_parent_ended_stay_stale(store, tmp_path):
    done = _parent(store, "dead1", "KILLED")
    store.add_run("dqn", noisy(50.0, 12, 0.01, 1), sweep_id="dead1", job="0", extra_tags={PARENT: done})
    store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="dead1", job="1", outcome=Outcome.STALE,
                  extra_tags={PARENT: done})
    report, _ = run_analysis(analyze_cfg(store, tmp_path, ["sweep=dead1"]), tmp_path / "r2", log=lambda *_: None)
    row = next(r for r in report["runs"] if r[Tag.JOB] == "1")
    assert row["outcome"] == Outcome.STALE and "killed without closing" in row["excluded_reason"]
