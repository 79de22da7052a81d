"""The analysis end to end on runs written through MlflowClient exactly as the run contract says."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy, report_from_store

from trainbench.analysis.pipeline import run_analysis
from trainbench.analysis.report_types import SCHEMA_VERSION
from trainbench.core.errors import AnalysisError
from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Summary, Tag

RTX = "NVIDIA GeForce RTX 3050 Ti Laptop GPU"  # what the laptop card reports (conf/hardware/rtx3050ti_4gb)


def _analyze(store, tmp_path, *overrides, write=False):
    cfg = analyze_cfg(store, tmp_path, list(overrides))
    if write:
        return run_analysis(cfg, log=lambda *_: None)
    return report_from_store(store, tmp_path, *overrides)


def test_original_plan_figures_give_the_known_answer(store, tmp_path):
    # The reference figures: DQN 0.149 ms/epoch x 1,000 epochs, PPO 181.9 ms/epoch x 2,000, 150 W, 0.15 $/kWh.
    store.add_run("dqn", noisy(0.149, 205, 0.005, 1), sweep_id="plan", warmup=5, target_epochs=1000)
    store.add_run("ppo", noisy(181.9, 205, 0.005, 2), sweep_id="plan", warmup=5, target_epochs=2000)
    # These figures price the T4 at the measured speed (relative_speed 1.0), an explicit
    # override (the default projects from the runs' workload profiles, which these synthetic runs lack).
    r = _analyze(store, tmp_path, "sweep=plan", "hardware=rtx3050ti_4gb", "decision.catalogue.0.relative_speed=1.0")
    d, c = r["decision"], r["costs"]
    assert d[Summary.TOTAL_HOURS] == pytest.approx(0.101, rel=0.01)
    assert r["models"]["dqn"]["projection"]["hours"] * 3600 == pytest.approx(0.149, rel=0.01)  # not 2.5 min
    assert d["recommendation"] == "local_gpu"
    assert c["local"]["power_w"] == 150 and c["local"]["usd"] == pytest.approx(0.0023, rel=0.02)
    g4 = next(x for x in c["cloud"] if x["instance"] == "g4dn.xlarge")
    assert g4["usd"] == pytest.approx(0.053, rel=0.02)
    assert r["coverage"]["missing"] == ["mamba2", "tft", "tlob"] and not r["coverage"]["complete"]
    assert d["confidence"] != "high" and any("mamba2" in x for x in d["confidence_reasons"])
    assert r["partial"] and "mamba2" in d["rationale"]
    assert d[Summary.TOTAL_HOURS_CONSERVATIVE] > d[Summary.TOTAL_HOURS] * 1.5


@pytest.mark.slow
def test_every_planned_model_measured_well_gives_high_confidence(store, tmp_path):
    # measured on the local card itself, at the reference sizes, with the target epochs the team set
    models = ["dqn", "ppo", "mamba2", "tft", "tlob"]
    for i, m in enumerate(models):
        store.add_run(m, noisy(5.0 + i, 130, 0.01, 10 + i), sweep_id="full", warmup=5,
                      extra_params={ParamKey.MODEL_SIZE: "reference"})
    epochs = [f"+decision.target_epochs.{m}=1000" for m in models]
    r = _analyze(store, tmp_path, "sweep=full", "hardware=rtx3050ti_4gb", *epochs)
    assert r["coverage"]["complete"] and not r["partial"]
    assert r["decision"]["basis"] == "measured on rtx3050ti_4gb"
    assert r["decision"]["confidence"] == "high", r["decision"]["confidence_reasons"]
    # min_epochs above what was measured lowers it, and says why
    r = _analyze(store, tmp_path, "sweep=full", "hardware=rtx3050ti_4gb", *epochs, "decision.min_epochs=500")
    assert r["decision"]["confidence"] == "medium"
    assert any("decision.min_epochs=500" in x for x in r["decision"]["confidence_reasons"])


def test_failed_oom_and_stale_runs_are_listed_but_not_timed(store, tmp_path):
    store.add_run("dqn", noisy(2.0, 120, 0.01, 1), sweep_id="mixed")
    store.add_run("dqn", noisy(50.0, 40, 0.01, 2), sweep_id="mixed", outcome=Outcome.OOM, job="1")
    store.add_run("dqn", noisy(60.0, 10, 0.01, 3), sweep_id="mixed", outcome=Outcome.FAILED, job="2")
    store.add_run("dqn", noisy(70.0, 10, 0.01, 4), sweep_id="mixed", outcome=Outcome.STALE, job="3")
    r = _analyze(store, tmp_path, "sweep=mixed")
    m = r["models"]["dqn"]
    assert m["outcomes"] == {Outcome.COMPLETED: 1, Outcome.OOM: 1, Outcome.FAILED: 1, Outcome.STALE: 1}
    assert m["runs"] == 4 and m["runs_timed"] == 1 and m["samples_used"] <= 120
    assert m[Series.EPOCH_TIME_MS]["max"] < 10  # no failed run's times leaked in
    outcome = {x["outcome"]: x for x in r["runs"]}
    assert not outcome[Outcome.OOM]["used_for_timing"] and outcome[Outcome.OOM]["excluded_reason"] == "outcome oom"
    assert outcome[Outcome.STALE]["status"] == "RUNNING" and "RUNNING" in outcome[Outcome.STALE]["excluded_reason"]
    assert any("did not complete" in x for x in r["decision"]["confidence_reasons"])


def test_every_run_failed_gives_a_marked_partial_report(store, tmp_path):
    store.add_run("dqn", noisy(2.0, 30, 0.01, 1), sweep_id="allfail", outcome=Outcome.OOM)
    store.add_run("ppo", noisy(9.0, 3, 0.01, 2), sweep_id="allfail", outcome=Outcome.DIVERGED,
                  loss=[1.0, np.nan, np.inf])
    report, folder = _analyze(store, tmp_path, "sweep=allfail", write=True)
    assert report["partial"] and report["decision"]["recommendation"] == "insufficient_data"
    assert report["decision"]["confidence"] == "low" and report["decision"][Summary.TOTAL_HOURS] is None
    assert report["models"]["dqn"]["missing_reason"].startswith("no run completed (oom: 1)")
    md = (folder / "report.md").read_text()
    assert "PARTIAL REPORT" in md and "insufficient_data" in md
    json.loads((folder / "report.json").read_text())  # valid JSON despite NaN/inf in the runs


def test_run_without_epochs_json_falls_back_to_metric_history(store, tmp_path):
    times = noisy(3.0, 25, 0.01, 5)
    store.add_run("dqn", times, sweep_id="nojson", warmup=5, epochs_json=False, history=True)
    store.add_run("ppo", noisy(4.0, 25, 0.01, 6), sweep_id="nojson", epochs_json=False, history=False)
    r = _analyze(store, tmp_path, "sweep=nojson")
    d = r["models"]["dqn"]
    assert d["source"] == "measured" and d[Summary.EPOCHS_MEASURED] == 20
    assert d[Series.EPOCH_TIME_MS]["max"] <= times[5:].max() + 1e-9
    run = next(x for x in r["runs"] if x["model"] == "dqn")
    assert run["series_source"] == "metric_history" and Artifact.EPOCHS in run["notes"][0]
    ppo = next(x for x in r["runs"] if x["model"] == "ppo")
    assert not ppo["used_for_timing"] and "no per-epoch timings" in ppo["excluded_reason"]
    assert r["models"]["ppo"]["source"] == "missing"


def test_run_with_one_epoch_is_reported_without_intervals(store, tmp_path):
    store.add_run("dqn", [7.0], sweep_id="one", warmup=0, target_epochs=100)
    r = _analyze(store, tmp_path, "sweep=one", "decision.plan=[dqn]")
    e = r["models"]["dqn"][Series.EPOCH_TIME_MS]
    assert e["mean"] == 7.0 and e["std"] is None and e["ci95_mean"] is None and e["ci95_median"] is None
    assert r["models"]["dqn"]["projection"]["hours"] == pytest.approx(700 / 3.6e6)
    assert r["decision"]["confidence"] != "high"
    assert any("only 1 epoch" in w for w in r["models"]["dqn"]["stability"]["warnings"])


def test_several_runs_make_the_across_run_interval_the_headline(store, tmp_path):
    for seed in range(3):
        store.add_run("dqn", noisy(4.0 + 0.2 * seed, 60, 0.01, seed), sweep_id="seeds", job=str(seed))
    r = _analyze(store, tmp_path, "sweep=seeds", "+decision.target_epochs.dqn=3000")
    e = r["models"]["dqn"][Series.EPOCH_TIME_MS]
    assert e["ci95_mean_basis"] == "runs"
    width_runs = e["ci95_mean"][1] - e["ci95_mean"][0]
    width_epochs = e["ci95_mean_epochs"][1] - e["ci95_mean_epochs"][0]
    assert width_runs > 5 * width_epochs
    p = r["models"]["dqn"]["projection"]
    assert p["target_epochs"] == 3000 and p["hours_ci95"][1] == pytest.approx(e["ci95_mean"][1] * 3000 / 3.6e6)


def test_estimates_cover_a_missing_model_but_are_labelled(store, tmp_path):
    store.add_run("dqn", noisy(2.0, 120, 0.01, 1), sweep_id="est")
    r = _analyze(store, tmp_path, "sweep=est", "decision.plan=[dqn,tft]", "+decision.estimates.tft.epoch_ms=40",
                 "+decision.target_epochs.tft=1500")
    t = r["models"]["tft"]
    assert t["source"] == "estimate" and t["projection"]["hours"] == pytest.approx(40 * 1500 / 3.6e6)
    assert r["coverage"]["missing"] == [] and r["coverage"]["estimated"] == ["tft"]
    assert r["decision"]["confidence"] == "medium" and r["partial"]


def test_stability_warnings_lower_confidence(store, tmp_path):
    ramp = noisy(5.0, 200, 0.01, 1) * np.linspace(1.0, 1.3, 200)
    store.add_run("dqn", ramp, sweep_id="unstable", loss=np.linspace(1, 3, 200),
                  grad_norm=np.r_[np.full(199, 0.5), 1e5])
    r = _analyze(store, tmp_path, "sweep=unstable", "decision.plan=[dqn]")
    s = r["models"]["dqn"]["stability"]
    assert s[Tag.LOSS_TREND] == "diverging" and s[Tag.GRADIENT_HEALTH] == "exploding"
    text = " ".join(s["warnings"])
    assert "drifts" in text and "diverging" in text and "exploding" in text
    assert r["decision"]["confidence"] == "medium"


def test_outlier_rule_changes_the_counts(store, tmp_path):
    t = noisy(5.0, 200, 0.01, 2)
    t[[20, 80, 150]] = 50.0
    store.add_run("dqn", t, sweep_id="spikes")
    iqr = _analyze(store, tmp_path, "sweep=spikes", "analysis.outliers=iqr")["models"]["dqn"]
    none = _analyze(store, tmp_path, "sweep=spikes", "analysis.outliers=none")["models"]["dqn"]
    assert iqr["outliers_removed"] >= 3 and iqr[Series.EPOCH_TIME_MS]["max"] < 10
    assert none["outliers_removed"] == 0 and none[Series.EPOCH_TIME_MS]["max"] == 50.0


def test_same_model_on_two_devices_reports_the_speed_ratio(store, tmp_path):
    exp = store.new_experiment("twodev")
    exp.add_run("ppo", noisy(180.0, 60, 0.01, 1), sweep_id="laptop", device=RTX)
    exp.add_run("ppo", noisy(30.0, 60, 0.01, 2), sweep_id="h200", device="NVIDIA H200")
    exp.add_run("ppo", noisy(90.0, 60, 0.01, 3), sweep_id="t4", device="Tesla T4")
    r = _analyze(exp, tmp_path, "sweep=laptop")
    comps = {c["device"]: c for c in r["devices"]["comparisons"]}
    assert comps["NVIDIA H200"]["speedup"] == pytest.approx(6.0, rel=0.03)
    assert comps["NVIDIA H200"]["reference_device"] == RTX
    g4 = next(c for c in r["costs"]["cloud"] if c["instance"] == "g4dn.xlarge")
    assert g4["relative_speed"] == pytest.approx(2.0, rel=0.03) and g4["basis"] == "measured"
    assert g4["hours"] == pytest.approx(r["models"]["ppo"]["projection"]["hours"] / 2, rel=0.03)
    t4 = next(p for p in r["projections"] if p["instance"] == "g4dn.xlarge" and p["model"] == "ppo")
    assert "Tesla T4" in t4["notes"][0]
    # sweep=all: the statistics use one device (the most runs, then the newest), the rest are listed
    r = _analyze(exp, tmp_path, "sweep=all", "analysis.device=NVIDIA H200")
    assert r["device"] == "NVIDIA H200" and r["models"]["ppo"][Series.EPOCH_TIME_MS]["mean"] < 40
    assert sum(not x["used_for_timing"] for x in r["runs"]) == 2


@pytest.mark.slow
def test_latest_sweep_and_logging_back_to_mlflow(store, tmp_path):
    exp = store.new_experiment("latest")
    exp.add_run("dqn", noisy(2.0, 40, 0.01, 1), sweep_id="old")
    time.sleep(0.01)
    # a workload profile: without one nothing is priced on the cloud and costs.png is not drawn
    exp.add_run("dqn", noisy(3.0, 40, 0.01, 2), sweep_id="new", extra_metrics={
        "workload.matmul_attention.fp32.flops": 2e9, "workload.matmul_attention.fp32.bytes": 1e8,
        "workload.matmul_attention.fp32.ops": 300, "workload.elementwise_norm.fp32.bytes": 3e8,
        "workload.elementwise_norm.fp32.ops": 2000})
    cfg = analyze_cfg(exp, tmp_path, ["analysis.log_to_mlflow=true", "analysis.plots=true"])
    report, folder = run_analysis(cfg, log=lambda *_: None)
    assert report[Tag.SWEEP_ID] == "new" and folder == tmp_path / "reports" / "new"
    assert {"report.json", "report.md", "epoch_times.png", "timeline.png", "costs.png", "instances.png"} <= {
        p.name for p in folder.iterdir()}
    runs = exp.client.search_runs([exp.exp_id], "tags.kind = 'analysis'")
    assert len(runs) == 1 and runs[0].data.tags[Tag.SWEEP_ID] == "new"
    assert {a.path for a in exp.client.list_artifacts(runs[0].info.run_id)} >= {"report.json", "report.md"}
    # the analysis run is not mistaken for a training run next time
    report2, _ = run_analysis(cfg, log=lambda *_: None)
    assert report2[Tag.SWEEP_ID] == "new" and len(report2["runs"]) == 1


def test_report_json_has_the_schema_keys(store, tmp_path):
    store.add_run("dqn", noisy(2.0, 40, 0.01, 1), sweep_id="schema")
    report, folder = _analyze(store, tmp_path, "sweep=schema", write=True)
    r = json.loads((folder / "report.json").read_text())
    assert r["schema_version"] == SCHEMA_VERSION and r[Tag.SWEEP_ID] == "schema"
    assert {"planned", "measured", "missing", "complete"} <= set(r["coverage"])
    m = r["models"]["dqn"]
    assert {"runs", "outcomes", Summary.EPOCHS_MEASURED, "outliers_removed", "samples_used", Series.EPOCH_TIME_MS,
            "peak_memory_mb", Tag.MEMORY_KIND, "stability", "projection", "source"} <= set(m)
    assert {"mean", "std", "cv", "min", "max", "p50", "p95", "p99", "ci95_mean", "ci95_median",
            "ci95_p95"} <= set(m[Series.EPOCH_TIME_MS])
    assert {Tag.LOSS_TREND, Summary.LOSS_START, Summary.LOSS_END, Tag.GRADIENT_HEALTH, "warnings"} <= set(m["stability"])
    assert {"target_epochs", "hours", "hours_ci95"} <= set(m["projection"])
    assert m[Tag.MEMORY_KIND] == "vram" and m["peak_memory_mb"] == 812.0
    assert {"recommendation", Summary.TOTAL_HOURS, Summary.TOTAL_HOURS_CONSERVATIVE, "thresholds_hours", "buffer",
            "confidence", "confidence_reasons", "rationale"} <= set(r["decision"])
    assert {"hours", "power_w", "price_per_kwh", "usd"} <= set(r["costs"]["local"])
    assert {"instance", "gpu", "usd_per_hour", "relative_speed", "hours", "usd"} <= set(r["costs"]["cloud"][0])
    # the catalogue holds the A10G, L4 and H100 instances too
    assert [c["instance"] for c in r["costs"]["cloud"]] == ["g4dn.xlarge", "g6.xlarge", "g5.xlarge", "p3.2xlarge",
                                                           "p4d.24xlarge", "p5.48xlarge"]
    assert {"projections", "instances", "cheapest"} <= set(r)


# --------------------------------------------------------------------------------------------------
# clear errors
# --------------------------------------------------------------------------------------------------


def test_unknown_sweep_names_the_known_ones(store, tmp_path):
    store.add_run("dqn", noisy(2.0, 20, 0.01, 1), sweep_id="known-1")
    with pytest.raises(AnalysisError, match="'nope' has no training runs.*known-1"):
        _analyze(store, tmp_path, "sweep=nope")


@pytest.mark.slow
def test_empty_experiment_and_missing_experiment(store, tmp_path):
    empty = store.new_experiment("empty")
    with pytest.raises(AnalysisError, match="no training runs"):
        _analyze(empty, tmp_path)
    with pytest.raises(AnalysisError, match="no sweeps at all"):
        _analyze(empty, tmp_path, "sweep=x")
    with pytest.raises(AnalysisError, match="experiment 'absent' does not exist"):
        _analyze(store, tmp_path, "tracking.experiment=absent")


def test_unreachable_or_missing_store_fails_fast(store, tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(AnalysisError, match="did not answer within 1 s"):
        _analyze(store, tmp_path, "tracking.uri=http://127.0.0.1:9", "tracking.timeout_s=1")
    assert time.perf_counter() - t0 < 5
    with pytest.raises(AnalysisError, match="no MLflow store at"):
        _analyze(store, tmp_path, f"tracking.uri=sqlite:///{tmp_path}/absent.db")
    assert not (tmp_path / "absent.db").exists()  # not silently created


def test_config_errors_name_the_key(store, tmp_path):
    from trainbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="decision.local_max_hours"):
        analyze_cfg(store, tmp_path, ["decision.local_max_hours=100"])
    with pytest.raises(ConfigError, match="decision.buffer"):
        analyze_cfg(store, tmp_path, ["decision.buffer=-1"])
    with pytest.raises(Exception, match="outliers"):
        analyze_cfg(store, tmp_path, ["analysis.outliers=zscore"])


def test_rationale_says_when_the_timings_come_from_a_cpu(store, tmp_path):
    store.add_run("dqn", noisy(160.0, 30, 0.01, 40), sweep_id="oncpu", device="cpu", warmup=2)
    store.add_run("dqn", noisy(1.6, 30, 0.01, 41), sweep_id="ongpu", warmup=2)
    cpu = _analyze(store, tmp_path, "sweep=oncpu")["decision"]["rationale"]
    gpu = _analyze(store, tmp_path, "sweep=ongpu")["decision"]["rationale"]
    assert "measured on a CPU" in cpu
    assert "measured on a CPU" not in gpu
