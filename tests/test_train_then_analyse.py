"""Train for real through run.py, then analyse that sweep with analyze.py: the report reads back what the trainer
wrote (per model the epochs, the mean epoch time of the logged ``epoch_time_ms`` after warmup, size, precision,
device, and a decision), so the writer and the reader of the run contract cannot drift apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.contamination_policy import kept as contamination_rule
from trainbench.core.vocab import Outcome, ParamKey, ReportKey, Series, Summary, Tag

REPO = Path(__file__).resolve().parents[1]
MODELS = ("dqn", "ppo")  # the two quickest models at debug size


def _python(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, script, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)


def _history(client: MlflowClient, run_id: str, key: str) -> list[float]:
    return [h.value for h in sorted(client.get_metric_history(run_id, key), key=lambda h: h.step)]


@pytest.mark.slow
def test_the_report_reads_back_what_training_wrote(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    train = _python(tmp_path, "run.py", "-m", "debug=default", f"model={','.join(MODELS)}", "trainer.epochs=2",
                    "trainer.warmup_epochs=1", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/art",
                    f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out",
                    f"hydra.sweep.dir={tmp_path}/multi")
    assert train.returncode == 0, train.stderr[-3000:]
    assert_the_report_reads_back_the_runs(tmp_path, uri)


def assert_the_report_reads_back_the_runs(tmp_path: Path, uri: str) -> None:
    """analyze.py on the one sweep in ``uri``; its report.json against what the trainer logged."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trainbench")
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    assert sorted(r.data.tags[Tag.MODEL] for r in runs) == sorted(MODELS)
    (sweep_id,) = {r.data.tags[Tag.SWEEP_ID] for r in runs}

    analyse = _python(tmp_path, "analyze.py", f"tracking.uri={uri}", f"paths.root={tmp_path}", f"sweep={sweep_id}",
                      f"decision.plan=[{','.join(MODELS)}]", "analysis.bootstrap_resamples=200",
                      "analysis.plots=false")
    assert analyse.returncode == 0, analyse.stderr[-3000:]
    report = json.loads((tmp_path / "reports" / sweep_id / "report.json").read_text())
    assert report[Tag.SWEEP_ID] == sweep_id and report["tracking_uri"] == uri
    assert report["device"] == "cpu" and report["coverage"]["planned"] == list(MODELS)

    clean_models = []
    for run in runs:
        t, p, rid = run.data.tags, run.data.params, run.info.run_id
        m = report["models"][t["model"]]
        warmup = int(p[ParamKey.WARMUP_EPOCHS])
        measured = _history(client, rid, Series.EPOCH_TIME_MS)[warmup:]
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
            assert run.data.metrics[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(float(np.mean(clean)), rel=1e-9)
            assert run.data.metrics[Summary.EPOCH_TIME_MS_MEAN_RAW] == pytest.approx(float(np.mean(measured)))
            assert (m["contamination"] or {}).get("used", False) == rule.used_contaminated
            target = int(p[ParamKey.TARGET_EPOCHS])
            assert m["projection"]["target_epochs"] == target
            assert m["projection"]["hours"] == pytest.approx(float(np.mean(clean)) * target / 3.6e6, rel=1e-9)
        else:  # no finite epoch at all: nothing to time, and the report says so
            assert m["source"] == "missing" and m[Series.EPOCH_TIME_MS]["mean"] is None and m["projection"] is None

    d = report["decision"]
    assert d[ReportKey.MODELS_IN_TOTAL] == [x for x in MODELS if x in clean_models]
    assert d["rationale"] and d["confidence"] in ("low", "medium", "high")
    if clean_models:
        assert d["recommendation"] in ("local_gpu", "user_choice", "cloud") and d[Summary.TOTAL_HOURS] > 0
    else:
        assert d["recommendation"] == "insufficient_data"
    # the analysis logged itself back, tagged for its sweep, with the same report
    (logged,) = client.search_runs([exp.experiment_id], f"tags.kind = 'analysis' and tags.sweep_id = '{sweep_id}'")
    back = json.loads(Path(client.download_artifacts(logged.info.run_id, "report.json", str(tmp_path))).read_text())
    assert back["models"] == report["models"] and back["decision"] == report["decision"]
