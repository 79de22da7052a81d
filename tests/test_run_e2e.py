"""End to end through run.py (subprocess, as a user runs it) into a temporary MLflow store."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

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
def test_single_run_follows_the_contract(tmp_path):
    p = _run(tmp_path, "model=dqn")
    assert p.returncode == 0, p.stderr[-3000:]
    client, runs = _runs(tmp_path)
    assert len(runs) == 1
    run = runs[0]
    t, params, m = run.data.tags, run.data.params, run.data.metrics
    assert run.info.status == "FINISHED"
    assert {k: t[k] for k in ("kind", "model", "data", "job", "device", "outcome", "memory_kind")} == {
        "kind": "train", "model": "dqn", "data": "6e_ohlcv_1m", "job": "0", "device": "cpu",
        "outcome": "completed", "memory_kind": "host"}
    assert t["sweep_id"] and t["git_commit"] and t["git_dirty"] in ("true", "false", "unknown")
    assert params["model.batch_size"] == "230" and params["trainer.epochs"] == "2"
    assert params["trainer.warmup_epochs"] == "1" and params["model.target_epochs"] == "1000"
    for key in ("epoch_time_ms", "loss", "grad_norm", "samples_per_s", "peak_host_mb", "loss_td"):
        assert [h.step for h in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2], key
    for key in ("epoch_time_ms_mean", "epoch_time_ms_std", "epoch_time_ms_p50", "epoch_time_ms_p95",
                "epoch_time_ms_p99", "peak_host_mb_max", "harness_overhead_pct", "infer_latency_ms_p50",
                "infer_latency_ms_p99"):
        assert key in m, key
    assert "peak_vram_mb" not in m and "peak_vram_mb_max" not in m  # never a fake VRAM figure on CPU
    arts = {a.path for a in client.list_artifacts(run.info.run_id)} | {
        a.path for a in client.list_artifacts(run.info.run_id, "config")}
    assert {"config/config.yaml", "config/overrides.yaml", "environment.json", "epochs.json",
            "workload_profile.json"} <= arts
    # the workload profile: totals, per class/dtype rows, and the predicted CUDA peak
    assert m["workload_flops_per_epoch"] > 0 and m["workload_ops_per_epoch"] > 0
    assert m["workload.matmul_attention.fp32.flops"] > 0 and m["predicted_peak_vram_mb"] > 0
    local = client.download_artifacts(run.info.run_id, "epochs.json", str(tmp_path))
    epochs = json.loads(Path(local).read_text())
    assert epochs["warmup_epochs"] == 1 and len(epochs["epoch_time_ms"]) == 3 and len(epochs["loss"]) == 3
    env = json.loads(Path(client.download_artifacts(run.info.run_id, "environment.json", str(tmp_path))).read_text())
    assert env["torch"] and "environ" not in json.dumps(env).lower()


@pytest.mark.slow
def test_sweep_shares_a_sweep_id_and_a_failing_job_does_not_stop_it(tmp_path):
    p = _run(tmp_path, "model=dqn", "model.batch_size=64,230", multirun=True)
    assert p.returncode == 0, p.stderr[-3000:]
    _, runs = _runs(tmp_path)
    assert sorted(r.data.params["model.batch_size"] for r in runs) == ["230", "64"]
    assert len({r.data.tags["sweep_id"] for r in runs}) == 1
    assert sorted(r.data.tags["job"] for r in runs) == ["0", "1"]

    # the first job cannot fit its episodes in the data and fails; the second still runs
    p = _run(tmp_path, "model=dqn", "model.episode_len=9000,100", multirun=True)
    assert p.returncode == 1  # the sweep summary reports the failure
    assert "did not complete" in p.stdout
    _, runs = _runs(tmp_path)
    second = [r for r in runs if r.data.params.get("model.episode_len") in ("9000", "100")]
    assert sorted((r.data.params["model.episode_len"], r.data.tags["outcome"], r.info.status) for r in second) == [
        ("100", "completed", "FINISHED"), ("9000", "failed", "FAILED")]
    failed = next(r for r in second if r.data.tags["outcome"] == "failed")
    assert "episode_len" in failed.data.tags["error"]


def test_bad_value_prints_one_error_line_and_exits_2(tmp_path):
    p = _run(tmp_path, "trainer.epochs=0")
    assert p.returncode == 2
    assert "error: trainer.epochs=0 is out of range" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_default_sweep_runs_every_registered_model_with_latency(tmp_path):
    """`python run.py -m` (no model given) covers the registry; every run completes with latency metrics."""
    from trainbench.models.registry import REGISTRY

    p = _run(tmp_path, multirun=True)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    _, runs = _runs(tmp_path)
    assert sorted(r.data.tags["model"] for r in runs) == REGISTRY.names()
    assert len({r.data.tags["sweep_id"] for r in runs}) == 1
    for r in runs:
        assert r.data.tags["outcome"] == "completed", (r.data.tags["model"], r.data.tags.get("error"))
        for key in ("infer_latency_ms_p50", "infer_latency_ms_p99", "infer_throughput_per_s",
                    "epoch_time_ms_mean", "harness_overhead_pct"):
            assert key in r.data.metrics, (r.data.tags["model"], key)
    tlob = next(r for r in runs if r.data.tags["model"] == "tlob")
    assert tlob.data.tags["data"] == "mbp10" and tlob.data.tags["data_schema"] == "mbp-10"
    assert {"model_info.label_frac_up", "model_info.label_frac_stat", "model_info.label_frac_down"} <= set(
        tlob.data.params)
