"""Fault cases of a sweep (issue 31), with real processes and signals: SIGTERM to a sweep whose jobs run in
submitit's local processes, and a Hydra output folder that cannot be written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from helpers.procs import child_env
from helpers.runs import ready_client
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from trainbench.core.vocab import Outcome, Tag

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra (submitit) is not installed")

REPO = Path(__file__).resolve().parents[2]


def _store(tmp: Path, data: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/artifacts",
            f"paths.mlruns={tmp}/mlruns", f"paths.data_dir={data}", f"paths.reports={tmp}/reports"]


def _train_runs(client: MlflowClient) -> list:
    exp = client.get_experiment_by_name("trainbench")
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.kind = 'train'")


@pytest.mark.slow
def test_sigterm_to_a_submitit_local_sweep_stops_its_jobs_and_ends_with_the_summary(tmp_path, shared_data_dir):
    log = tmp_path / "out.txt"
    cmd = [sys.executable, "run.py", "-m", "hydra/launcher=submitit_local", "model=dqn", "trainer.seed=0,1",
           "debug=default", "size=tiny", "trainer.epochs=100000", "trainer.stop.rel_ci=0", "trainer.latency.enabled=false",
           f"hydra.sweep.dir={tmp_path}/sw", *_store(tmp_path, shared_data_dir)]
    client = None  # the sweep creates the store: a client made before that would create it too
    jobs: list[psutil.Process] = []
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=f, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 400
            while len(_train_runs(client) if client else []) < 2:  # both jobs training
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                client = client or ready_client(tmp_path / "mlflow.db")
                time.sleep(1)
            time.sleep(3)
            jobs = psutil.Process(proc.pid).children(recursive=True)
            assert len(jobs) >= 2
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pytest.fail("the sweep did not stop:\n" + log.read_text()[-4000:])
            gone, alive = psutil.wait_procs(jobs, timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            for p in jobs:  # today's code leaves them training: never leave them to the next test
                if p.is_running():
                    p.kill()
    out = log.read_text()
    assert rc == EXIT_INTERRUPTED, out[-3000:]
    assert not alive, f"job processes still running after the sweep ended: {alive}"
    assert "2 job(s), 2 run(s)" in out, out[-3000:]  # the summary
    runs = _train_runs(client)
    assert sorted(r.data.tags[Tag.OUTCOME] for r in runs) == [Outcome.INTERRUPTED] * 2
    assert {r.info.status for r in runs} == {"KILLED"}
    (parent,) = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id],
                                   "tags.kind = 'sweep'")
    assert parent.info.status == "KILLED" and parent.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED


def _unwritable(tmp: Path) -> Path:
    if os.geteuid() == 0:  # root writes anywhere: sysfs refuses mkdir to everyone
        return Path("/sys") / f"trainbench-test-{os.getpid()}" / "out"
    ro = tmp / "read-only"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "out"


@pytest.mark.parametrize("mode", ["run", "sweep"])
def test_an_unwritable_hydra_output_folder_is_one_line(tmp_path, mode):
    folder = _unwritable(tmp_path)
    key = "hydra.run.dir" if mode == "run" else "hydra.sweep.dir"
    args = ["-m", "model=dqn"] if mode == "sweep" else ["model=dqn"]
    p = subprocess.run([sys.executable, "run.py", *args, f"{key}={folder}", *_store(tmp_path, tmp_path / "data")],
                       cwd=REPO, env=child_env(HYDRA_FULL_ERROR="0"), capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == EXIT_BAD_INPUT, out[-3000:]
    assert "Traceback" not in out and "is not valid" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(errors) == 1 and str(folder) in errors[0] and f"{key}=" in errors[0], out[-3000:]



@pytest.mark.slow
def test_a_stop_marker_left_by_an_earlier_sweep_in_the_folder_stops_nothing(tmp_path, shared_data_dir):
    from trainbench.sweep.jobs import STOP_MARKER, ledger_dir

    sweep_dir = tmp_path / "sw"
    ledger_dir(sweep_dir).mkdir(parents=True)
    (ledger_dir(sweep_dir) / STOP_MARKER).touch()  # an earlier sweep in this folder was stopped
    p = subprocess.run([sys.executable, "run.py", "-m", "model=dqn", "debug=default", "size=tiny", "trainer.latency.enabled=false",
                        f"hydra.sweep.dir={sweep_dir}", *_store(tmp_path, shared_data_dir)], cwd=REPO,
                       env=child_env(), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "1 job(s), 1 run(s)" in p.stdout
