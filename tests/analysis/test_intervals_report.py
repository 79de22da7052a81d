"""The report side of intervals under autocorrelation: autocorrelation per model, the headline interval
and why, runs that disagree, interrupted runs' epochs, one stability vocabulary."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy, report_from_store

from trainbench.analysis.pipeline import run_analysis
from trainbench.analysis.report_types import SCHEMA_VERSION
from trainbench.analysis.statistics.stats import loss_trend as analysis_loss_trend
from trainbench.core.trend import TRENDS
from trainbench.core.vocab import Artifact, LossTrend, Outcome, Series, Summary
from trainbench.measure.stability import loss_trend as run_tag_loss_trend


def _analyze(store, tmp_path, *overrides):
    return report_from_store(store, tmp_path, *overrides)


def _ar1(rho: float, n: int, mean: float, rel_sd: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for t in range(1, n):
        x[t] = rho * x[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal()
    return mean * (1 + rel_sd * x)


def test_one_autocorrelated_run_reports_tau_warns_and_recommends_seeds(store, tmp_path):
    store.add_run("dqn", _ar1(0.9, 400, 50.0, 0.02, 1), sweep_id="ac1")
    r = _analyze(store, tmp_path, "sweep=ac1", "decision.plan=[dqn]")
    m = r["models"]["dqn"]
    ac, e = m["autocorrelation"], m[Series.EPOCH_TIME_MS]
    assert ac["tau_int_max"] > ac["threshold_tau_int"] == 5.0 and ac["lag1_max"] > 0.7
    assert ac["recommend_more_seeds"] and ac["high_in_runs"] == ["0_dqn"]
    assert m["per_run"][0]["autocorrelation"]["ess"] < 100
    assert e["ci95_mean_basis"] == "batch_means" and "batch means" in e["ci95_mean_why"]
    # the headline allows for the autocorrelation: much wider than the t-interval over epochs
    assert (e["ci95_mean"][1] - e["ci95_mean"][0]) > 2 * (e["ci95_mean_epochs"][1] - e["ci95_mean_epochs"][0])
    assert e["bootstrap"]["method"].startswith("circular block bootstrap") and e["bootstrap"]["block_lengths"][0] > 1
    text = " ".join(m["stability"]["warnings"])
    assert "autocorrelated" in text and "trainer.seed=0,1,2" in text
    assert any("autocorrelated" in x for x in r["decision"]["confidence_reasons"])


def test_independent_epochs_raise_no_autocorrelation_warning(store, tmp_path):
    store.add_run("dqn", noisy(20.0, 300, 0.01, 2), sweep_id="ac0")
    m = _analyze(store, tmp_path, "sweep=ac0", "decision.plan=[dqn]")["models"]["dqn"]
    assert m["autocorrelation"]["tau_int_max"] < 2 and not m["autocorrelation"]["recommend_more_seeds"]
    assert not any("autocorrelated" in w for w in m["stability"]["warnings"])


def test_runs_that_disagree_are_flagged_and_the_interval_stays_positive(store, tmp_path):
    # two runs of one model at 3 s and 11 s per epoch on a busy machine
    store.add_run("ppo", noisy(3000.0, 30, 0.02, 3), sweep_id="busy", job="0")
    store.add_run("ppo", noisy(11000.0, 30, 0.02, 4), sweep_id="busy", job="1")
    r = _analyze(store, tmp_path, "sweep=busy", "decision.plan=[ppo]")
    m = r["models"]["ppo"]
    e = m[Series.EPOCH_TIME_MS]
    assert e["ci95_mean_basis"] == "runs" and "independent runs" in e["ci95_mean_why"]
    # the random-effects interval of the mean (between-run sd integrated out): wide, positive, finite
    assert 0 < e["ci95_mean"][0] < 0.6 * e["mean"] and 11000 < e["ci95_mean"][1] < 3 * e["mean"]
    assert m["projection"]["hours_ci95"][0] > 0
    assert m["runs_disagree"] and any("disagree" in w for w in m["stability"]["warnings"])


def test_runs_that_agree_are_not_flagged(store, tmp_path):
    for seed in range(3):
        store.add_run("ppo", noisy(100.0, 100, 0.02, 10 + seed), sweep_id="agree", job=str(seed))
    m = _analyze(store, tmp_path, "sweep=agree", "decision.plan=[ppo]")["models"]["ppo"]
    assert not m["runs_disagree"] and not any("disagree" in w for w in m["stability"]["warnings"])


def test_an_interrupted_run_keeps_its_measured_epochs(store, tmp_path):
    # an interrupted run's measured epochs count: the model is not "missing, 0 epochs"
    store.add_run("tft", noisy(40.0, 45, 0.01, 5), sweep_id="ctrlc", outcome=Outcome.INTERRUPTED, warmup=5)
    r = _analyze(store, tmp_path, "sweep=ctrlc", "decision.plan=[tft]")
    m = r["models"]["tft"]
    assert m["source"] == "measured" and m["samples_used"] > 0 and m[Summary.EPOCHS_MEASURED] == 40
    assert r["coverage"]["measured"] == ["tft"] and m["per_run"][0]["partial"]
    run = r["runs"][0]
    assert run["used_for_timing"] and "interrupted after 40" in " ".join(run["notes"])
    assert any("did not complete" in x for x in r["decision"]["confidence_reasons"])


def test_a_failed_run_lists_the_epochs_it_measured(store, tmp_path):
    store.add_run("tft", noisy(40.0, 25, 0.01, 6), sweep_id="oomish", outcome=Outcome.FAILED)
    m = _analyze(store, tmp_path, "sweep=oomish", "decision.plan=[tft]")["models"]["tft"]
    assert m["source"] == "missing" and "25 epoch(s) measured" in m["missing_reason"]


@pytest.mark.parametrize("losses,warmup,expected", [
    (np.r_[[50.0, 40.0], np.linspace(1.0, 1.07, 100)], 2, "diverging"),  # +7%: old report said flat
    (np.r_[[50.0, 40.0], np.full(100, 1.0)], 2, "flat"),  # warmup losses dropped: old report said decreasing
    (np.linspace(1.0, 0.5, 100), 0, "converging"),
    (np.r_[np.full(10, 1.0), np.nan], 0, LossTrend.NON_FINITE),  # the old run tag ignored the NaN
    (np.array([1.0]), 0, "unknown"),
])
def test_one_stability_vocabulary_for_the_run_tag_and_the_report(losses, warmup, expected):
    tag = run_tag_loss_trend(list(losses[warmup:])).trend  # the harness passes the post-warmup losses
    report = analysis_loss_trend(losses, warmup)["trend"]  # the analysis reads the whole series
    assert tag == report == expected and expected in TRENDS


def test_report_states_the_headline_and_documents_the_new_fields(store, tmp_path):
    from pathlib import Path

    store.add_run("dqn", noisy(2.0, 60, 0.01, 7), sweep_id="md")
    report, folder = run_analysis(analyze_cfg(store, tmp_path, ["sweep=md", "decision.plan=[dqn]"]),
                                  log=lambda *_: None)
    r = json.loads((folder / "report.json").read_text())
    assert r["schema_version"] == SCHEMA_VERSION and r["models"]["dqn"][Series.EPOCH_TIME_MS]["ci95_mean_basis"] == "batch_means"
    md = (folder / "report.md").read_text()
    assert "headline" in md and "batch means" in md and "block bootstrap" in md and "τ" in md
    doc = (Path(__file__).resolve().parents[2] / "docs" / "report-schema.md").read_text()
    for key in ("ci95_mean_why", "autocorrelation", "runs_disagree", "batch_means", "autocorr_max_tau",
                "block bootstrap", f"schema version {SCHEMA_VERSION}"):
        assert key in doc, key


def test_epochs_flagged_contaminated_are_dropped_when_the_run_has_that_series():
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from trainbench.analysis.fields import to_json
    from trainbench.analysis.statistics.stats import model_stats
    from trainbench.config.analyze import AnalysisConfig

    t = np.r_[noisy(10.0, 60, 0.01, 8), np.full(20, 40.0)]  # the last 20 epochs ran on a busy machine
    flag = np.r_[np.zeros(60), np.ones(20)]
    run = SimpleNamespace(run_id="r", run_name="busy", outcome=Outcome.COMPLETED, series_source=Artifact.EPOCHS,
                          warmup_epochs=0, series={Series.EPOCH_TIME_MS: t, "contaminated": flag})
    run.measured = lambda key=Series.EPOCH_TIME_MS: run.series[key][run.warmup_epochs:]
    cfg = OmegaConf.structured(AnalysisConfig)
    s = to_json(model_stats([run], cfg, np.random.default_rng(0)))
    assert s["samples_used"] == 60 and s["per_run"][0][Summary.CONTAMINATED_EPOCHS] == 20
    assert s[Series.EPOCH_TIME_MS]["max"] < 11 and any("contaminated" in w for w in s["stability"]["warnings"])
    del run.series["contaminated"]  # without the series every epoch counts
    assert model_stats([run], cfg, np.random.default_rng(0)).per_run[0].contaminated_epochs == 0
