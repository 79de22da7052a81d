"""Sweeps through `hydra/launcher=slurm_gpu` against a real single-node SLURM (tests/slurm_cluster.py).

Skipped where slurm-wlm and munge are not installed or the daemons cannot be started (not root).
Every job asks for 1 CPU, no GPU and 1 GB, so that two fit the smallest CI machine at once; each test
counts what the MLflow store holds (every run, every epoch), not a sample of it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.paced_model import PACED, paced_env
from helpers.procs import child_env, in_process
from helpers.runs import ready_client, train_runs
from helpers.servers import assert_every_epoch_recorded
from trainbench.cli import analyze_command
from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Summary, Tag

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _args(tmp: Path, data_dir: Path, *overrides: str) -> list[str]:
    """A sweep of tiny CPU jobs, one SLURM job each, into the embedded store under ``tmp``."""
    return ["-m", "hydra/launcher=slurm_gpu", "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=0",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10",
            "hydra.launcher.poll_s=1", "debug=default", "trainer=quick", f"paths.data_dir={data_dir}",
            f"paths.mlruns={tmp}/mlruns", f"paths.reports={tmp}/reports", f"hydra.sweep.dir={tmp}/multi",
            "trainer.latency.enabled=false", *overrides]


def _run_py(cluster, *args: str, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=env or child_env(cluster.env()),
                          capture_output=True, text=True, timeout=timeout)


def _client(tmp: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp}/mlruns/mlflow.db")


def _slurm_job_dirs(tmp: Path) -> list[Path]:
    """submitit's folder of each job: ``<array id>_<task>`` for an array, ``<job id>`` for a single job."""
    dirs = [d for d in (tmp / "multi" / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", d.name)]
    tasks = [d for d in dirs if "_" in d.name]
    return sorted(tasks or dirs)


def _output(p: subprocess.CompletedProcess) -> str:
    return p.stdout[-4000:] + p.stderr[-4000:]


# --------------------------------------------------------------------------------------------------
# Requests no node can meet: the sweep ends at once, with a message, and nothing is left queued
# --------------------------------------------------------------------------------------------------

def test_launcher_defaults_on_a_small_node_fail_before_anything_is_submitted(slurm_cluster, slurm_data_dir,
                                                                              tmp_path):
    before = slurm_cluster.jobs()
    # slurm_gpu's own defaults: 8 CPUs, 64 GB and a GPU per job, on a node that has none of that
    p = _run_py(slurm_cluster, "-m", "hydra/launcher=slurm_gpu", "hydra.launcher.partition=debug",
                "model=dqn,ppo", "debug=default", f"paths.mlruns={tmp_path}/mlruns",
                f"hydra.sweep.dir={tmp_path}/multi", timeout=300)
    assert p.returncode == 2, _output(p)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    msg = errors[0]
    for part in ("8 CPUs", "64 GB of memory", "1 GPU", "partition 'debug'", f"at most {slurm_cluster.cpus} CPUs",
                 "no GPU", "hydra.launcher.cpus_per_task=8", "hydra.launcher.mem_gb=64",
                 "hydra.launcher.gpus_per_node=1"):
        assert part in msg, (part, msg)
    assert slurm_cluster.jobs() == before  # nothing was submitted


def test_a_request_that_only_slurm_can_judge_is_cancelled_while_pending(slurm_cluster, slurm_data_dir, tmp_path):
    """Without the check before submitting, the jobs pend with reason PartitionConfig: cancelled, exit 2."""
    too_many = slurm_cluster.cpus + 2
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, "model=dqn,ppo", "hydra.launcher.preflight=false",
                                      f"hydra.launcher.cpus_per_task={too_many}"), timeout=300)
    assert p.returncode == 2, _output(p)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    msg = errors[0]
    for part in ("reason PartitionConfig", f"{too_many} CPUs", f"at most {slurm_cluster.cpus} CPUs",
                 f"hydra.launcher.cpus_per_task={too_many}", "Cancelled"):
        assert part in msg, (part, msg)
    job = msg.split("never start job ", 1)[1].split()[0].split("_")[0]
    states = {s for jid, s, _ in slurm_cluster.jobs() if jid.split("_")[0] == job}
    assert states == {"CANCELLED"}, slurm_cluster.jobs()
    assert "sacct" not in p.stdout + p.stderr


@pytest.mark.parametrize("preflight", ["true", "false"])
def test_an_unknown_partition_names_the_partitions_there_are(slurm_cluster, slurm_data_dir, tmp_path, preflight):
    """Checked before submitting, or refused by sbatch: the same kind of line either way."""
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, "model=dqn", "hydra.launcher.partition=h100",
                                      f"hydra.launcher.preflight={preflight}"), timeout=300)
    assert p.returncode == 2, _output(p)
    (msg,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert "partition 'h100'" in msg and "does not exist" in msg and "debug" in msg, msg
    if preflight == "false":
        assert "sbatch refused the jobs" in msg and "Invalid partition name" in msg, msg


# --------------------------------------------------------------------------------------------------
# Sweeps that run
# --------------------------------------------------------------------------------------------------

def test_two_model_sweep_through_slurm_records_every_run_and_epoch(slurm_cluster, slurm_data_dir, tmp_path):
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, "model=dqn,ppo", "trainer.epochs=3"))
    assert p.returncode == 0, _output(p)
    client = _client(tmp_path)
    runs = train_runs(client)
    assert sorted(r.data.tags[Tag.MODEL] for r in runs) == ["dqn", "ppo"]
    assert len({r.data.tags[Tag.SWEEP_ID] for r in runs}) == 1
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
        assert assert_every_epoch_recorded(client, r, tmp_path) == 4  # 1 warmup + 3 measured
    # each job was a task of one SLURM array, with the resources asked for
    dirs = _slurm_job_dirs(tmp_path)
    assert len(dirs) == 2 and len({d.name.split("_")[0] for d in dirs}) == 1, dirs
    script = next((tmp_path / "multi" / ".submitit").rglob("*_submission.sh")).read_text()
    for line in ("#SBATCH --partition=debug", "#SBATCH --cpus-per-task=1", "#SBATCH --mem=1GB",
                 "#SBATCH --array=0-1%2"):
        assert line in script, line
    assert "sacct" not in p.stdout + p.stderr  # no accounting here: submitit's sacct warnings stay away
    assert "2 run(s)" in p.stdout


def test_a_job_of_two_slurm_tasks_runs_as_two_data_parallel_ranks(slurm_cluster, slurm_data_dir, tmp_path):
    """hydra.launcher.tasks_per_node=2 with trainer.distributed.nproc=2: each task is a gloo rank, rank 0 writes
    the one run (docs/distributed.md)."""
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, "model=tft", "size=tiny", "model.batch_size=64",
                                      "model.dropout=0", "trainer.epochs=2", "trainer.distributed.nproc=2",
                                      "hydra.launcher.tasks_per_node=2"))
    assert p.returncode == 0, _output(p)
    client = _client(tmp_path)
    runs = train_runs(client)
    assert len(runs) == 1, [r.data.tags for r in runs]  # the second task never creates a run
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    assert (run.data.params[ParamKey.WORLD_SIZE], run.data.params[ParamKey.DIST_BACKEND]) == ("2", "gloo")
    assert run.data.params[ParamKey.BATCH_SIZE_PER_RANK] == "32"
    epochs = [h.value for h in client.get_metric_history(run.info.run_id, Series.EPOCH_TIME_MS)]
    per_rank = json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.RANK_EPOCH_MS,
                                                         str(tmp_path))).read_text())
    assert len(per_rank["ranks"]) == 2 and epochs == [max(a, b) for a, b in zip(*per_rank["ranks"], strict=True)]
    script = next((tmp_path / "multi" / ".submitit").rglob("*_submission.sh")).read_text()
    assert "#SBATCH --ntasks-per-node=2" in script


def test_array_parallelism_runs_the_jobs_one_at_a_time(slurm_cluster, slurm_data_dir, tmp_path):
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, "model=dqn", "trainer.seed=0,1", "trainer.epochs=2",
                                      "hydra.launcher.array_parallelism=1", "hydra.launcher.report_every_s=3"))
    assert p.returncode == 0, _output(p)
    runs = sorted(train_runs(_client(tmp_path)), key=lambda r: r.info.start_time)
    assert [r.data.tags[Tag.OUTCOME] for r in runs] == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert runs[0].info.end_time <= runs[1].info.start_time  # the second started after the first ended
    script = next((tmp_path / "multi" / ".submitit").rglob("*_submission.sh")).read_text()
    assert "#SBATCH --array=0-1%1" in script
    # the wait is reported, with SLURM's reason for the job held back
    out = p.stdout + p.stderr
    assert "still waiting on SLURM" in out and "JobArrayTaskLimit" in out, out[-3000:]


# --------------------------------------------------------------------------------------------------
# Jobs that SLURM ends: a time limit, scancel
# --------------------------------------------------------------------------------------------------

def test_a_time_limit_ends_the_run_as_interrupted_with_its_epochs_kept(slurm_cluster, slurm_data_dir, tmp_path):
    # slurmctld checks limits every 30 s and sends submitit's SIGUSR2 at the first check that finds at most
    # signal_delay_s left: 20-50 s into a 1 min limit, time enough for a few epochs and the flush after it. The
    # paced model waits out that time instead of training at full speed on a core of the suite's.
    p = _run_py(slurm_cluster, *_args(tmp_path, slurm_data_dir, *PACED, "trainer.epochs=1000000", "trainer.stop.rel_ci=0",
                                      "trainer.flush_every=5", "hydra.launcher.timeout_min=1",
                                      "hydra.launcher.signal_delay_s=10"), env=paced_env(slurm_cluster.env()))
    assert p.returncode == 1, _output(p)  # the summary: 1 run did not complete
    client = _client(tmp_path)
    (run,) = train_runs(client)
    assert run.info.status == "KILLED" and run.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED, run.data.tags
    assert assert_every_epoch_recorded(client, run, tmp_path) >= 2
    assert Summary.EPOCH_TIME_MS_MEAN in run.data.metrics
    assert Outcome.INTERRUPTED in p.stdout


def test_scancel_of_a_running_job_is_reported_interrupted_or_stale(slurm_cluster, slurm_data_dir, tmp_path):
    out = open(tmp_path / "sweep.out", "w")  # noqa: SIM115
    sweep = subprocess.Popen([sys.executable, "run.py",
                              *_args(tmp_path, slurm_data_dir, "model=dqn", "trainer.epochs=1000000", "trainer.stop.rel_ci=0",
                                     "trainer.flush_every=2", "trainer.flush_min_interval_s=0")],
                             cwd=REPO, env=child_env(slurm_cluster.env()), stdout=out, stderr=subprocess.STDOUT)
    try:
        client = None  # the sweep creates the store: a client made before that would create it too
        deadline = time.monotonic() + 300
        run = None
        while time.monotonic() < deadline:
            assert sweep.poll() is None, (tmp_path / "sweep.out").read_text()[-3000:]
            client = client or ready_client(tmp_path / "mlruns" / "mlflow.db")
            runs = train_runs(client) if client else []
            if runs and len(client.get_metric_history(runs[0].info.run_id, "loss")) >= 3:
                run = runs[0]
                break
            time.sleep(1)
        assert run is not None, "the job measured no 3 epochs within 300 s"
        (job,) = [d.name for d in _slurm_job_dirs(tmp_path)]
        slurm_cluster.run("scancel", job)
        assert sweep.wait(timeout=240) != 0, (tmp_path / "sweep.out").read_text()[-3000:]
    finally:
        if sweep.poll() is None:
            sweep.kill()
        out.close()
    run = client.get_run(run.info.run_id)
    assert run.info.status in ("KILLED", "RUNNING"), run.info.status
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
    assert steps == list(range(len(steps))) and len(steps) >= 3
    p = in_process(analyze_command, [f"paths.mlruns={tmp_path}/mlruns", f"paths.reports={tmp_path}/reports",
                                     "analysis.plots=false", "analysis.log_to_mlflow=false"], cwd=REPO)
    report = json.loads(next((tmp_path / "reports").rglob("report.json")).read_text())
    rows = [(r["run_id"], r["outcome"], r["used_for_timing"]) for r in report["runs"]]
    assert len(rows) == 1 and rows[0][0] == run.info.run_id, (rows, _output(p))
    # an interrupted run's measured epochs are used (and labelled partial); a stale one is never timed
    assert rows[0][1] in (Outcome.INTERRUPTED, Outcome.STALE) and rows[0][2] is (rows[0][1] == Outcome.INTERRUPTED), rows
