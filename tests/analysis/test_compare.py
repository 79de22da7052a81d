"""Sweep-to-sweep comparison: planted changes are found, one distribution gives no change, runs match by config."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy

from helpers.procs import REPO, in_process
from trainbench.analysis.compare import (
    build_comparison,
    compare_samples,
    run_compare,
    verdict,
)
from trainbench.analysis.runs import find_runs, load_runs, open_experiment
from trainbench.cli import analyze_command
from trainbench.config.analyze import compare_argv
from trainbench.core.vocab import Outcome, ParamKey, ReportKey, Summary, Tag


def _cfg(store, tmp_path, *overrides):
    return analyze_cfg(store, tmp_path, ["compare.resamples=300", *overrides])


def _open(store):
    return open_experiment(SimpleNamespace(experiment=store.experiment), store.uri)


def _load(store, sweep):
    client, exp_id = _open(store)
    return load_runs(client, find_runs(client, exp_id, sweep)[1], workers=1)


def test_a_planted_20pct_slowdown_is_found_and_one_distribution_is_no_change(store, tmp_path):
    exp = store.new_experiment("cmp-planted")
    for i in range(2):  # two runs per model and sweep, 60 epochs each (5 warmup), 2% noise
        exp.add_run("dqn", noisy(100.0, 65, 0.02, seed=i), sweep_id="A", warmup=5, job=str(i))
        exp.add_run("dqn", noisy(120.0, 65, 0.02, seed=10 + i), sweep_id="B", warmup=5, job=str(i))
        # ppo: both sweeps draw from one distribution (different seeds)
        exp.add_run("ppo", noisy(50.0, 65, 0.02, seed=20 + i), sweep_id="A", warmup=5, job=str(i))
        exp.add_run("ppo", noisy(50.0, 65, 0.02, seed=30 + i), sweep_id="B", warmup=5, job=str(i))
    cfg = _cfg(exp, tmp_path)
    r = build_comparison(cfg, _load(exp, "A"), _load(exp, "B"), "A", "B")
    by = {e["model"]: e for e in r["comparisons"]}
    assert set(by) == {"dqn", "ppo"} and r["unmatched"] == []

    dqn = by["dqn"]
    assert dqn["verdict"] == "slower"
    assert dqn["unit"] == "epoch" and dqn["a"]["runs"] == dqn["b"]["runs"] == 2
    # warmup dropped, the two runs pooled, Tukey outliers removed as in the sweep analysis
    assert dqn["n_a"] + dqn["a"]["outliers_removed"] == dqn["n_b"] + dqn["b"]["outliers_removed"] == 120
    assert dqn["change"] == pytest.approx(0.20, abs=0.02)
    lo, hi = dqn["change_ci"]
    assert lo < 0.20 < hi and lo > 0.05  # the interval covers the planted change and clears the threshold
    assert dqn["mannwhitney"]["p"] < 1e-10 and dqn["mannwhitney"]["prob_b_slower"] > 0.99

    ppo = by["ppo"]
    assert ppo["verdict"] == "no significant change"
    assert abs(ppo["change"]) < 0.02 and ppo["change_ci"][0] < 0 < ppo["change_ci"][1]
    assert ppo["mannwhitney"]["p"] > 0.05
    assert r["summary"] == {"faster": 0, "slower": 1, "no significant change": 1}

    # the other way round it is a speed-up
    back = build_comparison(cfg, _load(exp, "B"), _load(exp, "A"), "B", "A")
    assert {e["model"]: e["verdict"] for e in back["comparisons"]} == {"dqn": "faster",
                                                                       "ppo": "no significant change"}


def test_runs_match_by_model_and_config_and_the_rest_is_unmatched(store, tmp_path):
    exp = store.new_experiment("cmp-match")
    exp.add_run("dqn", noisy(100.0, 40, 0.01, 1), sweep_id="A", batch_size=230)
    exp.add_run("dqn", noisy(300.0, 40, 0.01, 2), sweep_id="A", batch_size=64, job="1")
    exp.add_run("tft", noisy(80.0, 40, 0.01, 3), sweep_id="A", job="2")
    exp.add_run("dqn", noisy(100.0, 40, 0.01, 4), sweep_id="B", batch_size=230)
    exp.add_run("dqn", noisy(90.0, 40, 0.01, 5), sweep_id="B", batch_size=64, outcome=Outcome.OOM, job="1")
    cfg = _cfg(exp, tmp_path)
    r = build_comparison(cfg, _load(exp, "A"), _load(exp, "B"), "A", "B")
    # bs=230 is compared with bs=230 only; the 3x slower bs=64 run of A never pollutes it
    assert [(e["model"], e["match"][ParamKey.BATCH_SIZE]) for e in r["comparisons"]] == [("dqn", "230")]
    assert r["comparisons"][0]["verdict"] == "no significant change"
    assert sorted((u["model"], u["match"][ParamKey.BATCH_SIZE], u["only_in"]) for u in r["unmatched"]) == [
        ("dqn", "64", "A"), ("tft", "230", "A")]
    assert r["skipped_runs"]["B"] == {"outcome oom": 1}
    # matching on nothing but the model pools both batch sizes of A
    r2 = build_comparison(_cfg(exp, tmp_path, "compare.match=[]"), _load(exp, "A"), _load(exp, "B"), "A", "B")
    assert [e["model"] for e in r2["comparisons"]] == ["dqn"] and r2["comparisons"][0]["a"]["runs"] == 2


@pytest.mark.slow
def test_run_level_samples_when_there_are_enough_runs(store, tmp_path):
    exp = store.new_experiment("cmp-runs")
    rng = np.random.default_rng(7)
    for i in range(6):
        # each run has its own offset (run-to-run variance) on top of epoch noise
        exp.add_run("dqn", noisy(100.0 * rng.normal(1, 0.01), 30, 0.01, i), sweep_id="A", job=str(i))
        exp.add_run("dqn", noisy(115.0 * rng.normal(1, 0.01), 30, 0.01, 50 + i), sweep_id="B", job=str(i))
    r = build_comparison(_cfg(exp, tmp_path), _load(exp, "A"), _load(exp, "B"), "A", "B")
    (e,) = r["comparisons"]
    assert e["unit"] == "run" and e["n_a"] == e["n_b"] == 6
    assert e["verdict"] == "slower" and e["mannwhitney"]["p"] < 0.01
    forced = build_comparison(_cfg(exp, tmp_path, "compare.unit=epoch"), _load(exp, "A"), _load(exp, "B"), "A", "B")
    assert forced["comparisons"][0]["unit"] == "epoch" and forced["comparisons"][0]["n_a"] > 150


def test_verdict_rules():
    # significant and beyond the threshold
    assert verdict(1e-6, 1.2, (1.15, 1.25), 0.05, 0.05)[0] == "slower"
    assert verdict(1e-6, 0.8, (0.75, 0.85), 0.05, 0.05)[0] == "faster"
    # significant but a 2% change is below a 5% threshold
    v, d = verdict(1e-6, 1.02, (1.01, 1.03), 0.05, 0.05)
    assert v == "no significant change" and "within" in d
    # a big change that is not significant is inconclusive, not "faster"
    v, d = verdict(0.3, 0.8, (0.5, 1.1), 0.05, 0.05)
    assert v == "no significant change" and "inconclusive" in d
    v, d = verdict(0.6, 1.0, (0.98, 1.02), 0.05, 0.05)
    assert v == "no significant change" and "equivalent" in d


def test_compare_samples_with_constant_times_and_tiny_samples():
    cfg = type("C", (), {"alpha": 0.05, "threshold": 0.05, "resamples": 200, "max_samples": 100})()
    rng = np.random.default_rng(0)
    same = compare_samples(np.full(20, 10.0), np.full(20, 10.0), cfg, rng)
    assert same["ratio"] == 1.0 and same["ci"] == [1.0, 1.0] and same["verdict"] == "no significant change"
    tiny = compare_samples(np.array([10.0]), np.array([12.0]), cfg, rng)
    assert tiny["mannwhitney"] is None and tiny["verdict"] == "no significant change"


def test_compare_argv_turns_a_pair_into_a_list():
    assert compare_argv(["compare=a-1,b_2", "x=1"]) == ["compare.sweeps=['a-1','b_2']", "x=1"]
    assert compare_argv(["compare=[a,b]"]) == ["compare.sweeps=['a','b']"]
    assert compare_argv(["compare.threshold=0.1"]) == ["compare.threshold=0.1"]


def test_bad_compare_settings_fail_with_the_key(store, tmp_path):
    from trainbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="compare="):
        _cfg(store, tmp_path, "compare.sweeps=[a]")
    with pytest.raises(ConfigError, match="compare.unit"):
        _cfg(store, tmp_path, "compare.sweeps=[a,b]", "compare.unit=batch")


def test_run_compare_writes_json_plot_and_an_mlflow_run(store, tmp_path):
    exp = store.new_experiment("cmp-out")
    exp.add_run("dqn", noisy(100.0, 40, 0.01, 1), sweep_id="old")
    exp.add_run("dqn", noisy(125.0, 40, 0.01, 2), sweep_id="new")
    cfg = _cfg(exp, tmp_path, "compare.sweeps=[previous,latest]", "analysis.plots=true",
               "analysis.log_to_mlflow=true")
    printed = []
    report, folder = run_compare(cfg, log=printed.append)
    assert folder == tmp_path / "reports" / "compare_old_vs_new"
    data = json.loads((folder / "compare.json").read_text())
    assert data[ReportKey.SWEEP_A] == "old" and data["comparisons"][0]["verdict"] == "slower"
    assert (folder / "compare.png").stat().st_size > 1000 and (folder / "compare.md").is_file()
    assert "SLOWER" in printed[0] and "+25" in printed[0]
    run = exp.client.get_run(report["mlflow_run_id"])
    assert run.data.tags[Tag.KIND] == "compare" and run.data.tags["verdict.dqn"] == "slower"
    assert run.data.metrics["change_pct.dqn"] == pytest.approx(25, abs=2)
    # the compare run is not a training run: the sweeps the analysis sees are unchanged
    client, exp_id = _open(exp)
    assert find_runs(client, exp_id, "latest")[0] == "new"


@pytest.mark.slow
def test_cli_compare_pair_and_a_clean_error(store, tmp_path):
    """`analyze.py compare=a,b` (one value, not a Hydra sweep), in this process (helpers.procs.in_process)."""
    exp = store.new_experiment("cmp-cli")
    exp.add_run("dqn", noisy(100.0, 40, 0.01, 1), sweep_id="s-a")
    exp.add_run("dqn", noisy(100.0, 40, 0.01, 2), sweep_id="s-b")
    common = [f"tracking.uri={exp.uri}", "tracking.experiment=cmp-cli", f"paths.root={tmp_path}",
              "compare.resamples=200", "analysis.log_to_mlflow=false"]
    ok = in_process(analyze_command, ["compare=s-a,s-b", *common], cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert "no significant change" in ok.stdout
    assert (tmp_path / "reports" / "compare_s-a_vs_s-b" / "compare.json").is_file()
    bad = in_process(analyze_command, ["compare=s-a,nope", *common], cwd=REPO)
    assert bad.returncode == 2 and "sweep 'nope' has no training runs" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_comparison_keeps_the_epochs_the_sweep_analysis_keeps(store, tmp_path):
    """One rule for both (stats.kept_epochs): warmup, contaminated and non-finite epochs and outliers dropped."""
    from trainbench.analysis.fields import to_json
    from trainbench.analysis.statistics.stats import model_stats

    exp = store.new_experiment("cmp-kept")
    busy = np.zeros(45)
    busy[5:15] = 1.0  # ten measured epochs flagged as measured on a busy machine (times unremarkable)
    t_a = noisy(100.0, 45, 0.01, 1)
    t_a[20] = np.nan
    exp.add_run("dqn", t_a, sweep_id="A", warmup=5, extra_series={"contaminated": busy})
    exp.add_run("dqn", noisy(100.0, 45, 0.01, 2), sweep_id="B", warmup=5)
    cfg = _cfg(exp, tmp_path)
    rec_a = _load(exp, "A")
    r = build_comparison(cfg, rec_a, _load(exp, "B"), "A", "B")
    (e,) = r["comparisons"]
    s = to_json(model_stats(rec_a, cfg.analysis, np.random.default_rng(0)))
    assert s["per_run"][0][Summary.CONTAMINATED_EPOCHS] == 10
    assert e["a"]["epochs_used"] == s["samples_used"] <= 29 and e["a"]["outliers_removed"] == s["outliers_removed"] >= 11
    assert e["verdict"] == "no significant change" and abs(e["change"]) < 0.02
