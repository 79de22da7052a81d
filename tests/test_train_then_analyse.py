"""Train for real through run.py, then analyse that sweep with analyze.py (the session's ``default_sweep``): the
report reads back what the trainer wrote (per model the epochs, the mean epoch time of the logged
``epoch_time_ms`` after warmup, size, precision, device, and a decision), so the writer and the reader of the run
contract cannot drift apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.contamination_policy import kept as contamination_rule
from trainbench.core.vocab import Outcome, ParamKey, ReportKey, Series, Summary, Tag


def _history(client: MlflowClient, run_id: str, key: str) -> list[float]:
    return [h.value for h in sorted(client.get_metric_history(run_id, key), key=lambda h: h.step)]


@pytest.mark.slow
def test_the_report_reads_back_what_training_wrote(default_sweep, tmp_path):
    """The session's real sweep of every registered model (``default_sweep``: run.py -m debug=default, then
    analyze.py on its sweep id); its report.json against what the trainer logged."""
    from trainbench.models.registry import REGISTRY

    client, exp, sweep_id, uri = default_sweep.client, default_sweep.exp, default_sweep.sweep_id, default_sweep.uri
    models = tuple(REGISTRY.names())  # the default plan: every registered model
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    assert sorted(r.data.tags[Tag.MODEL] for r in runs) == sorted(models)
    assert {r.data.tags[Tag.SWEEP_ID] for r in runs} == {sweep_id}

    report = default_sweep.report
    assert report[Tag.SWEEP_ID] == sweep_id and report["tracking_uri"] == uri
    assert report["device"] == "cpu" and report["coverage"]["planned"] == list(models)

    clean_models = []
    for run in runs:
        t, p, rid = run.data.tags, run.data.params, run.info.run_id
        m = report["models"][t["model"]]
        warmup = int(p[ParamKey.WARMUP_EPOCHS])
        train = _history(client, rid, Series.EPOCH_TIME_MS)[warmup:]
        # an epoch of the plan is the training pass plus the validation pass where the run timed one (a supervised
        # model's eval_time_ms; analysis/runs.py): the analysis times their sum, the run's epoch_time_ms_mean the
        # training pass and its epoch_total_ms_mean the sum
        evals = _history(client, rid, Series.EVAL_TIME_MS)[warmup:]
        measured = [x + v for x, v in zip(train, evals, strict=True)] if evals else train
        # the harness flags epochs measured on a busy machine; the analysis drops them when at least three clean
        # ones remain and else uses them, labelled (core/contamination_policy.py, analysis.contaminated=auto; it has no
        # outlier rule below four epochs), so the mean it reports is that of the epochs that rule keeps
        flags = _history(client, rid, "contaminated")[warmup:] or [0.0] * len(measured)
        rule = contamination_rule(measured, flags)
        clean = [x for x, u in zip(measured, rule.mask, strict=True) if u]
        assert len(measured) == int(p["trainer.epochs"]) == 2
        assert m["runs"] == m["runs_timed"] == 1 and m[Summary.EPOCHS_MEASURED] == len(measured)
        assert m["samples_used"] == len(clean) and m["outliers_removed"] == len(measured) - len(clean)
        (per_run,) = m["per_run"]
        assert per_run["run_id"] == rid and per_run["outcome"] == t["outcome"] == Outcome.COMPLETED
        assert per_run[Summary.CONTAMINATED_EPOCHS] == int(sum(f > 0.5 for f in flags))
        # what was measured: size, precision (auto resolved), device
        assert m["model"] == t["model"] and m["size"] == p[ParamKey.MODEL_SIZE] == t[Tag.MODEL_SIZE] == "small"
        assert m["precision"] == p[ParamKey.PRECISION_RESOLVED] == t["precision"] == "fp32"
        assert m["device"] == t["device"] == "cpu" and m["in_plan"] is True
        (row,) = [x for x in report["runs"] if x["run_id"] == rid]
        assert row["used_for_timing"] and row[Summary.EPOCHS_MEASURED] == len(measured) and row["size"] == "small"
        if clean:
            clean_models.append(t["model"])
            assert m["source"] == "measured"
            assert m[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(float(np.mean(clean)), rel=1e-9)
            # the run's own summary is the same figure (issue 29, item 12), the raw mean under another name
            clean_train = [x for x, u in zip(train, rule.mask, strict=True) if u]
            assert run.data.metrics[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(float(np.mean(clean_train)), rel=1e-9)
            assert run.data.metrics[Summary.EPOCH_TIME_MS_MEAN_RAW] == pytest.approx(float(np.mean(train)))
            if evals:
                assert run.data.metrics[Summary.EPOCH_TOTAL_MS_MEAN] == pytest.approx(float(np.mean(clean)), rel=1e-9)
            assert (m["contamination"] or {}).get("used", False) == rule.used_contaminated
            target = int(p[ParamKey.TARGET_EPOCHS])
            plan = m.get("plan") or {}
            if plan.get("epochs") is None:  # no plan's epochs: the run's configured target, on the measured data
                assert m["projection"]["target_epochs"] == target
                assert m["projection"]["hours"] == pytest.approx(float(np.mean(clean)) * target / 3.6e6, rel=1e-9)
            else:  # the plan reads the run's configured target, and projects its epochs on the planned data
                assert plan["target_epochs_configured"] == target
                work = plan["data_scale"] * plan["batch_scale"]
                assert m["projection"]["target_epochs"] == plan["epochs"] and m["projection"]["work_scale"] == work
                assert m["projection"]["hours"] == pytest.approx(
                    float(np.mean(clean)) * work * plan["epochs"] / 3.6e6, rel=1e-9)
        else:  # no finite epoch at all: nothing to time, and the report says so
            assert m["source"] == "missing" and m[Series.EPOCH_TIME_MS]["mean"] is None and m["projection"] is None

    d = report["decision"]
    assert d[ReportKey.MODELS_IN_TOTAL] == [x for x in models if x in clean_models]
    assert d["rationale"] and d["confidence"] in ("low", "medium", "high")
    if clean_models:
        assert d["recommendation"] in ("local_gpu", "user_choice", "cloud") and d[Summary.TOTAL_HOURS] > 0
    else:
        assert d["recommendation"] == "insufficient_data"
    # the analysis logged itself back, tagged for its sweep, with the same report
    (logged,) = client.search_runs([exp.experiment_id], f"tags.kind = 'analysis' and tags.sweep_id = '{sweep_id}'")
    back = json.loads(Path(client.download_artifacts(logged.info.run_id, "report.json", str(tmp_path))).read_text())
    assert back["models"] == report["models"] and back["decision"] == report["decision"]
