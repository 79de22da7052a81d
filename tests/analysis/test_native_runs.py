"""The analysis on runs written with MLflow's conventions (sweep parent run, nested jobs, dataset inputs,
system tags) gives the same answers as on old-style runs, ignores the parent as a training run, and logs
its own run nested under the sweep with the headline figures as params and metrics."""

from __future__ import annotations

import pytest
from analysis_helpers import analyze_cfg, noisy

from trainbench.analysis.fields import to_json
from trainbench.analysis.pipeline import build_report, run_analysis
from trainbench.analysis.report.record import tracking_uri
from trainbench.analysis.runs import experiment_speeds, find_runs, known_sweeps, load_runs, open_experiment
from trainbench.core.vocab import Summary, Tag
from trainbench.sweep.parent import end_sweep_run, start_sweep_run
from trainbench.tracking.conventions import MLFLOW_PARENT_RUN_ID, dataset_entity, log_inputs, system_tags

INFO = {"path": "/data/6e.dbn.zst", "schema": "ohlcv-1m", "synthetic": True, "sha256": "ab" * 32, "n_bars": 10,
        "instruments": "6EH4", "start": "2024-01-01", "end": "2024-01-02"}


def _plan_sweep(store, sweep_id, new_style):
    """The reference figures (test_pipeline's known answer), as old-style or new-style runs."""
    parent = None
    if new_style:
        parent = start_sweep_run(store.client, store.exp_id, sweep_id, store.root / sweep_id, ["model=dqn,ppo"],
                                 {Tag.GIT_COMMIT: "abc123"})
    ids = [store.add_run("dqn", noisy(0.149, 205, 0.005, 1), sweep_id=sweep_id, warmup=5, target_epochs=1000),
           store.add_run("ppo", noisy(181.9, 205, 0.005, 2), sweep_id=sweep_id, warmup=5, target_epochs=2000,
                         job="1")]
    if new_style:
        for rid in ids:
            for k, v in {**system_tags("run.py", {Tag.GIT_COMMIT: "abc123"}),
                         MLFLOW_PARENT_RUN_ID: parent}.items():
                store.client.set_tag(rid, k, v)
            log_inputs(store.client, rid, [dataset_entity("6e_ohlcv_1m", INFO)], "training")
        end_sweep_run(store.client, store.exp_id, parent, sweep_id)
    return parent, ids


def _report(store, tmp_path, *overrides):
    cfg = analyze_cfg(store, tmp_path, list(overrides))
    uri = tracking_uri(cfg)
    client, exp = open_experiment(cfg.tracking, uri)
    sweep_id, runs = find_runs(client, exp, str(cfg.sweep))
    return to_json(build_report(cfg, load_runs(client, runs, 4), sweep_id, uri, experiment_speeds(client, exp))), runs


@pytest.mark.parametrize("new_style", [False, True], ids=["old-style", "new-style"])
def test_known_answer_on_old_and_new_style_runs(store, tmp_path, new_style):
    exp = store.new_experiment(f"plan-{new_style}")
    parent, ids = _plan_sweep(exp, "plan", new_style)
    r, runs = _report(exp, tmp_path, "sweep=plan", "hardware=rtx3050ti_4gb")
    assert sorted(x.info.run_id for x in runs) == sorted(ids)  # the parent is not a training run
    d = r["decision"]
    assert d[Summary.TOTAL_HOURS] == pytest.approx(0.101, rel=0.01) and d["recommendation"] == "local_gpu"
    assert r["costs"]["local"]["usd"] == pytest.approx(0.0023, rel=0.02)
    assert [x["model"] for x in r["runs"]] == ["dqn", "ppo"]
    # sweep=latest and the experiment-wide speeds see the sweep's training runs only
    assert known_sweeps(exp.client, exp.exp_id) == ["plan"]
    assert len(experiment_speeds(exp.client, exp.exp_id)) == 2
    r_latest, _ = _report(exp, tmp_path, "hardware=rtx3050ti_4gb")
    assert r_latest[Tag.SWEEP_ID] == "plan" and len(r_latest["runs"]) == 2


def test_analysis_run_nests_under_the_sweep_with_its_headline_figures(store, tmp_path):
    exp = store.new_experiment("nested-analysis")
    parent, _ = _plan_sweep(exp, "plan", True)
    cfg = analyze_cfg(exp, tmp_path, ["sweep=plan", "hardware=rtx3050ti_4gb", "analysis.log_to_mlflow=true"])
    report, _ = run_analysis(cfg, log=lambda *_: None)
    run = exp.client.get_run(report["mlflow_run_id"])
    t, p, m = run.data.tags, run.data.params, run.data.metrics
    assert t["kind"] == "analysis" and t[MLFLOW_PARENT_RUN_ID] == parent
    assert t["mlflow.source.name"] == "analyze.py" and "local_gpu" in t["mlflow.note.content"]
    assert p["recommendation"] == "local_gpu" and p["confidence"] == report["decision"]["confidence"]
    assert p[Tag.SWEEP_ID] == "plan" and p["partial"] == "true"
    assert m[Summary.TOTAL_HOURS] == pytest.approx(report["decision"][Summary.TOTAL_HOURS])
    assert m[Summary.TOTAL_HOURS_CONSERVATIVE] == pytest.approx(report["decision"][Summary.TOTAL_HOURS_CONSERVATIVE])
    assert m[Summary.CONFIDENCE_LEVEL] == {"low": 0, "medium": 1, "high": 2}[report["decision"]["confidence"]]
    assert len(exp.client.get_metric_history(run.info.run_id, Summary.TOTAL_HOURS)) == 1  # logged once
    # an old-style sweep (no parent): the analysis run stands alone
    old = store.new_experiment("unnested-analysis")
    _plan_sweep(old, "plan", False)
    cfg = analyze_cfg(old, tmp_path, ["sweep=plan", "analysis.log_to_mlflow=true"])
    report, _ = run_analysis(cfg, log=lambda *_: None)
    run = old.client.get_run(report["mlflow_run_id"])
    assert MLFLOW_PARENT_RUN_ID not in run.data.tags and run.data.params[Tag.SWEEP_ID] == "plan"
