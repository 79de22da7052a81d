"""End to end through run.py (subprocess, as a user runs it) into a temporary MLflow store."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Summary, Tag, data_tag

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path, *args, multirun=False):
    cmd = [sys.executable, "run.py", *(["-m"] if multirun else []), "debug=default",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
           f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out", f"hydra.sweep.dir={tmp_path}/multi",
           *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def _runs(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    return client, client.search_runs([exp.experiment_id], "tags.kind = 'train'")


@pytest.mark.slow
def test_single_run_follows_the_contract(single_dqn_run, tmp_path):
    # the session's `run.py debug=default model=dqn` (tests/conftest.py: its only train run, exit 0)
    client = single_dqn_run.client
    run = client.get_run(single_dqn_run.run_id)
    t, params, m = run.data.tags, run.data.params, run.data.metrics
    assert run.info.status == "FINISHED"
    assert {k: t[k] for k in ("kind", "model", "data", "job", "device", "outcome", Tag.MEMORY_KIND)} == {
        "kind": "train", "model": "dqn", "data": "6e_ohlcv_1m", "job": "0", "device": "cpu",
        "outcome": Outcome.COMPLETED, Tag.MEMORY_KIND: "host"}
    assert t[Tag.SWEEP_ID] and t[Tag.GIT_COMMIT] and t[Tag.GIT_DIRTY] in ("true", "false", "unknown")
    assert params[ParamKey.BATCH_SIZE] == "230" and params["trainer.epochs"] == "2"
    # every run says its data parallelism, an ordinary one too (docs/distributed.md)
    assert (params[ParamKey.WORLD_SIZE], params[ParamKey.DIST_BACKEND]) == ("1", "none")
    assert params[ParamKey.GLOBAL_BATCH_SIZE] == params[ParamKey.BATCH_SIZE_PER_RANK] == "230"
    assert params[ParamKey.DATA_PARALLEL_SUPPORTED] == "false"  # DQN runs on one rank: the analysis never splits it
    assert params[ParamKey.WARMUP_EPOCHS] == "1" and params[ParamKey.TARGET_EPOCHS] == "1000"
    for key in (Series.EPOCH_TIME_MS, "loss", Series.GRAD_NORM, Series.SAMPLES_PER_S, Series.PEAK_HOST_MB, "loss_td"):
        assert [h.step for h in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2], key
    for key in (Summary.EPOCH_TIME_MS_MEAN, Summary.EPOCH_TIME_MS_STD, Summary.EPOCH_TIME_MS_P50, Summary.EPOCH_TIME_MS_P95,
                Summary.EPOCH_TIME_MS_P99, Summary.PEAK_HOST_MB_MAX, Summary.HARNESS_OVERHEAD_PCT, Summary.INFER_LATENCY_MS_P50,
                Summary.INFER_LATENCY_MS_P99):
        assert key in m, key
    assert Series.PEAK_VRAM_MB not in m and Summary.PEAK_VRAM_MB_MAX not in m  # never a fake VRAM figure on CPU
    arts = {a.path for a in client.list_artifacts(run.info.run_id)} | {
        a.path for a in client.list_artifacts(run.info.run_id, "config")}
    assert {Artifact.CONFIG, Artifact.OVERRIDES, Artifact.ENVIRONMENT, Artifact.EPOCHS,
            Artifact.WORKLOAD_PROFILE} <= arts
    # the workload profile: totals, per class/dtype rows, and the predicted CUDA peak
    assert m[Summary.WORKLOAD_FLOPS_PER_EPOCH] > 0 and m[Summary.WORKLOAD_OPS_PER_EPOCH] > 0
    assert m["workload.matmul_attention.fp32.flops"] > 0 and m[Summary.PREDICTED_PEAK_VRAM_MB] > 0
    local = client.download_artifacts(run.info.run_id, Artifact.EPOCHS, str(tmp_path))
    epochs = json.loads(Path(local).read_text())
    assert epochs["warmup_epochs"] == 1 and len(epochs[Series.EPOCH_TIME_MS]) == 3 and len(epochs["loss"]) == 3
    env = json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.ENVIRONMENT, str(tmp_path))).read_text())
    assert env["torch"] and "environ" not in json.dumps(env).lower()


@pytest.mark.slow
def test_sweep_shares_a_sweep_id_and_a_failing_job_does_not_stop_it(tmp_path):
    # one sweep of four jobs: two batch sizes, each first with episodes that cannot fit in the data (the job
    # fails) and then with episodes that do (the job after a failed one still runs)
    p = _run(tmp_path, "model=dqn", "size=tiny", "trainer.latency.enabled=false", "model.batch_size=64,230",
             "model.episode_len=9000,100", multirun=True)
    assert p.returncode == 1  # the sweep summary reports the failure
    assert "did not complete" in p.stdout
    _, runs = _runs(tmp_path)
    assert len({r.data.tags[Tag.SWEEP_ID] for r in runs}) == 1
    assert sorted(r.data.tags[Tag.JOB] for r in runs) == ["0", "1", "2", "3"]
    assert sorted(r.data.params[ParamKey.BATCH_SIZE] for r in runs) == ["230", "230", "64", "64"]
    assert sorted(r.data.params[ParamKey.BATCH_SIZE] for r in runs if r.data.tags[Tag.OUTCOME] == Outcome.COMPLETED) \
        == ["230", "64"]
    assert sorted((r.data.params["model.episode_len"], r.data.tags[Tag.OUTCOME], r.info.status) for r in runs) == [
        ("100", Outcome.COMPLETED, "FINISHED"), ("100", Outcome.COMPLETED, "FINISHED"),
        ("9000", Outcome.FAILED, "FAILED"), ("9000", Outcome.FAILED, "FAILED")]
    for failed in (r for r in runs if r.data.tags[Tag.OUTCOME] == Outcome.FAILED):
        assert "episode_len" in failed.data.tags[Tag.ERROR]


def test_bad_value_prints_one_error_line_and_exits_2(tmp_path):
    p = _run(tmp_path, "trainer.epochs=0")
    assert p.returncode == 2
    assert "error: trainer.epochs=0 is out of range" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_default_sweep_runs_every_registered_model_with_latency(default_sweep):
    """`python run.py -m` (no model given) covers the registry; every run completes with latency metrics."""
    from trainbench.models.registry import REGISTRY

    client, exp = default_sweep.client, default_sweep.exp
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    assert sorted(r.data.tags[Tag.MODEL] for r in runs) == REGISTRY.names()
    assert len({r.data.tags[Tag.SWEEP_ID] for r in runs}) == 1
    for r in runs:
        assert r.data.tags[Tag.OUTCOME] == Outcome.COMPLETED, (r.data.tags[Tag.MODEL], r.data.tags.get(Tag.ERROR))
        for key in (Summary.INFER_LATENCY_MS_P50, Summary.INFER_LATENCY_MS_P99, Summary.INFER_THROUGHPUT_PER_S,
                    Summary.EPOCH_TIME_MS_MEAN, Summary.HARNESS_OVERHEAD_PCT):
            assert key in r.data.metrics, (r.data.tags[Tag.MODEL], key)
    tlob = next(r for r in runs if r.data.tags[Tag.MODEL] == "tlob")
    assert tlob.data.tags[Tag.DATA] == "mbp10" and tlob.data.tags[data_tag("schema")] == "mbp-10"
    assert {"model_info.label_frac_up", "model_info.label_frac_stat", "model_info.label_frac_down"} <= set(
        tlob.data.params)
