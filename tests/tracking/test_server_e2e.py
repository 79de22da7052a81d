"""End to end against a real `mlflow server` on loopback: concurrent jobs, a server restart, kills.

Each test counts what the store holds (every run, every epoch), not a sample of it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.paced_model import PACED, paced_env
from helpers.procs import child_env, in_process
from helpers.runs import metric_steps, train_runs
from helpers.servers import assert_every_epoch_recorded
from trainbench.cli import analyze_command
from trainbench.core.vocab import Outcome, Summary, Tag

REPO = Path(__file__).resolve().parents[2]
ENV = child_env()


def _args(tmp: Path, uri: str, data_dir: Path, experiment: str, *overrides: str) -> list[str]:
    return ["debug=default", "tracking=server", f"tracking.uri={uri}", f"tracking.experiment={experiment}",
            f"paths.data_dir={data_dir}", f"paths.mlruns={tmp}/mlruns", f"paths.reports={tmp}/reports",
            f"hydra.run.dir={tmp}/out", f"hydra.sweep.dir={tmp}/multi", "trainer.latency.enabled=false",
            *overrides]


def _run_py(*args: str, multirun: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "run.py", *(["-m"] if multirun else []), *args]
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)


def _start_run_py(tmp: Path, *args: str, env: dict[str, str] = ENV) -> subprocess.Popen:
    out = open(tmp / "job.out", "wb")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT)


def _wait_for_epochs(client, experiment, n, proc, timeout=300.0):
    """The experiment's single run once the store holds at least ``n`` of its epochs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it was interrupted"
        runs = train_runs(client, experiment)
        if runs and len(metric_steps(client, runs[0].info.run_id)) >= n:
            return runs[0]
        time.sleep(0.5)
    raise AssertionError(f"no run reached {n} epochs within {timeout:.0f} s")


@pytest.mark.slow
def test_submitit_multirun_of_four_concurrent_jobs_records_every_run_and_epoch(mlflow_server, shared_data_dir,
                                                                              tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install .[slurm]")
    p = _run_py(*_args(tmp_path, mlflow_server.uri, shared_data_dir, "multirun", "hydra/launcher=submitit_local",
                       "model=dqn,ppo", "trainer.seed=0,1", "trainer.epochs=4", "trainer.flush_every=2", "trainer.flush_min_interval_s=0"),
                multirun=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    client = MlflowClient(mlflow_server.uri)
    runs = train_runs(client, "multirun")
    assert len(runs) == 4
    assert len({r.data.tags[Tag.SWEEP_ID] for r in runs}) == 1
    assert sorted((r.data.tags[Tag.MODEL], r.data.params["trainer.seed"]) for r in runs) == [
        ("dqn", "0"), ("dqn", "1"), ("ppo", "0"), ("ppo", "1")]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
        assert assert_every_epoch_recorded(client, r, tmp_path) == 5  # 1 warmup + 4 measured
    # each job was its own process (submitit's local job id is the process id), and they overlapped
    job_dirs = [d for d in (tmp_path / "multi" / ".submitit").iterdir() if d.name.isdigit()]
    assert len(job_dirs) == 4
    assert max(r.info.start_time for r in runs) < min(r.info.end_time for r in runs)
    assert "4 run(s)" in p.stdout
    # the jobs ran in processes of their own, yet nest under the sweep's parent run (tracking/nesting.py)
    (parent,) = client.search_runs([runs[0].info.experiment_id], "tags.kind = 'sweep' and "
                                   f"tags.sweep_id = '{runs[0].data.tags[Tag.SWEEP_ID]}'")
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs} == {parent.info.run_id}
    assert parent.info.status == "FINISHED" and parent.data.metrics[Summary.RUNS_COMPLETED] == 4


@pytest.mark.slow
def test_server_stopped_and_restarted_mid_run_loses_no_epoch(mlflow_server, shared_data_dir, tmp_path):
    server = mlflow_server  # the same server (port, database) comes back, as after a restart by an admin
    job, epochs = None, 80
    try:
        # the paced model (0.1 s an epoch) is still training while the server goes, without a core of the suite's
        job = _start_run_py(tmp_path, *_args(tmp_path, server.uri, shared_data_dir, "restart", *PACED,
                                             f"trainer.epochs={epochs}", "trainer.flush_every=1",
                                             "trainer.flush_min_interval_s=0", "tracking.resend_every_s=1",
                                             "tracking.spool_wait_s=240"), env=paced_env())
        client = MlflowClient(server.uri)
        run = _wait_for_epochs(client, "restart", 2, job)
        server.stop()
        spool = tmp_path / "mlruns" / "spool" / run.info.run_id
        deadline = time.monotonic() + 120
        while not (spool / "ops.jsonl").exists() and time.monotonic() < deadline:  # the job spools ...
            assert job.poll() is None, (tmp_path / "job.out").read_text()[-3000:]
            time.sleep(0.3)
        assert (spool / "ops.jsonl").exists()
        server.start()  # ... and sends it all once the server is back
        assert job.wait(timeout=300) == 0, (tmp_path / "job.out").read_text()[-3000:]
        run = client.get_run(run.info.run_id)
        assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
        assert assert_every_epoch_recorded(client, run, tmp_path) == epochs + 1  # and the warmup epoch
        assert Summary.EPOCH_TIME_MS_MEAN in run.data.metrics
        assert not spool.exists()
        log = (tmp_path / "job.out").read_text()
        assert "spooled" in log and "answers again" in log
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        if not server.healthy():
            server.start()


@pytest.mark.slow
def test_sigkill_leaves_a_stale_run_and_sigterm_an_interrupted_one(mlflow_server, shared_data_dir, tmp_path):
    client = MlflowClient(mlflow_server.uri)
    jobs = {}
    for sig in ("kill", "term"):
        d = tmp_path / sig
        d.mkdir()
        jobs[sig] = (d, _start_run_py(d, *_args(d, mlflow_server.uri, shared_data_dir, f"signal-{sig}",
                                                 "model=dqn", "trainer.epochs=100000", "trainer.stop.rel_ci=0", "trainer.flush_every=2",
                                                 "trainer.flush_min_interval_s=0")))
    try:
        runs = {sig: _wait_for_epochs(client, f"signal-{sig}", 3, p) for sig, (_, p) in jobs.items()}
        jobs["kill"][1].send_signal(signal.SIGKILL)
        jobs["term"][1].send_signal(signal.SIGTERM)
        assert jobs["kill"][1].wait(timeout=60) == -signal.SIGKILL
        assert jobs["term"][1].wait(timeout=120) == 1, (jobs["term"][0] / "job.out").read_text()[-3000:]
    finally:
        for _, p in jobs.values():
            if p.poll() is None:
                p.kill()

    # SIGTERM: flushed (every epoch it measured is in the store) and ended as interrupted
    term = client.get_run(runs["term"].info.run_id)
    assert term.info.status == "KILLED" and term.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED
    assert assert_every_epoch_recorded(client, term, tmp_path) >= 3

    # SIGKILL: nothing could run, the run stays RUNNING with the epochs up to its last flush, no holes
    kill = client.get_run(runs["kill"].info.run_id)
    assert kill.info.status == "RUNNING"
    steps = metric_steps(client, kill.info.run_id)
    assert steps == list(range(len(steps))) and len(steps) >= 3
    d = jobs["kill"][0]
    p = in_process(analyze_command, ["tracking=server", f"tracking.uri={mlflow_server.uri}",
                                     "tracking.experiment=signal-kill", f"paths.reports={d}/reports",
                                     "analysis.plots=false", "analysis.log_to_mlflow=false"], cwd=REPO)
    report = json.loads(next((d / "reports").rglob("report.json")).read_text())
    assert [(r["run_id"], r["outcome"], r["used_for_timing"]) for r in report["runs"]] == [
        (kill.info.run_id, Outcome.STALE, False)]
    assert "RUNNING" in report["runs"][0]["excluded_reason"]
    assert Outcome.STALE in p.stdout + p.stderr
