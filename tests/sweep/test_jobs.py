"""Every job of a sweep is accounted for; the first signal stops the sweep; names stay safe; bad input
exits 2. Real `run.py`/`analyze.py` processes on a temporary store."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from helpers.procs import child_env
from trainbench.core.vocab import Outcome, Tag

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-7Hq2-ZZ81-secret"


def _store(tmp: Path, data: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/artifacts",
            f"paths.mlruns={tmp}/mlruns", f"paths.data_dir={data}", f"paths.reports={tmp}/reports"]


def _run(args: list[str], tmp: Path, data: Path, script: str = "run.py", **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *args, *_store(tmp, data)], cwd=REPO, env=child_env(**env),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    """One sweep whose two jobs fail before their run opens (batch sizes 0 and -5), in a sweep folder whose name
    holds a quote, with a secret (MY_TOKEN's value) in an override: the three tests below read it."""
    tmp = tmp_path_factory.mktemp("failing-sweep")
    sweep_dir = tmp / "it's"
    p = _run(["-m", "model=dqn", "model.batch_size=0,-5", "trainer=quick", f"trainer.profile=p-{TOKEN}",
              f'hydra.sweep.dir="{sweep_dir}"'], tmp, tmp / "data", MY_TOKEN=TOKEN)
    return p, tmp, sweep_dir


@pytest.mark.slow
def test_jobs_failing_before_their_run_are_counted_and_fail_the_sweep(failing_sweep):
    p, _, _ = failing_sweep
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "2 job(s), 0 run(s)" in p.stdout and "2 of 2 job(s) did not complete" in p.stdout
    assert "model.batch_size=0 is invalid" in p.stdout and "model.batch_size=-5 is invalid" in p.stdout


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_the_machine_lacks_is_a_failed_job(tmp_path, shared_data_dir):
    p = _run(["-m", "model=dqn", "trainer.device=cuda,cpu", "debug=default", "size=tiny", "trainer.latency.enabled=false",
              f"hydra.sweep.dir={tmp_path}/sw"], tmp_path, shared_data_dir)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "2 job(s), 1 run(s)" in p.stdout and "1 of 2 job(s) did not complete" in p.stdout


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_first_signal_ends_the_run_as_interrupted_and_stops_the_sweep(tmp_path, shared_data_dir, sig):
    log = tmp_path / "out.txt"
    cmd = [sys.executable, "run.py", "-m", "model=dqn", "trainer.seed=0,1,2", "debug=default", "size=tiny",
           "trainer.epochs=100000", "trainer.stop.rel_ci=0", "trainer.latency.enabled=false", f"hydra.sweep.dir={tmp_path}/sw",
           *_store(tmp_path, shared_data_dir)]
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=f, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 300
            while "MLflow run" not in log.read_text():  # job 0's run is open and training
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            time.sleep(2)
            proc.send_signal(sig)
            try:
                rc = proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pytest.fail("the sweep did not stop:\n" + log.read_text()[-4000:])
        finally:
            if proc.poll() is None:
                proc.kill()
    out = log.read_text()
    assert rc == 130, out[-3000:]
    assert "3 job(s), 1 run(s)" in out and "2 job(s) did not run" in out
    assert "#1 model=dqn trainer.seed=1" in out and "#2 model=dqn trainer.seed=2" in out
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench").experiment_id
    (run,) = client.search_runs([exp], "tags.kind = 'train'")
    assert run.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED and run.data.tags[Tag.JOB] == "0"
    (parent,) = client.search_runs([exp], "tags.kind = 'sweep'")  # the sweep's parent run ends interrupted
    assert parent.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED and parent.info.status == "KILLED"


@pytest.mark.slow
def test_a_quote_in_the_sweep_folder_does_not_hide_a_failed_job(failing_sweep):
    """The derived sweep id stays in the safe set, so the summary's search works and the sweep exits 1."""
    p, _, sweep_dir = failing_sweep
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "2 of 2 job(s) did not complete" in p.stdout and (sweep_dir / "multirun.yaml").is_file()


@pytest.mark.parametrize(Tag.SWEEP_ID, ["..", "\"a'b\""])  # Hydra's quoting passes the quote through
@pytest.mark.slow
def test_unsafe_sweep_ids_are_refused_before_any_job(tmp_path, sweep_id):
    p = _run(["-m", "model=dqn", f"sweep_id={sweep_id}", f"hydra.sweep.dir={tmp_path}/sw"], tmp_path,
             tmp_path / "data")
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "is not a valid sweep id" in p.stderr and "Launching" not in p.stdout + p.stderr
    assert not (tmp_path / "mlflow.db").exists()


def test_single_run_refuses_an_unsafe_sweep_id(tmp_path):
    p = _run(["model=dqn", "sweep_id=..", f"hydra.run.dir={tmp_path}/o"], tmp_path, tmp_path / "data")
    assert p.returncode == 2 and p.stderr.startswith("error: sweep_id='..' is not a valid sweep id"), p.stderr


def test_analysis_refuses_a_sweep_id_that_escapes_reports(tmp_path):
    p = _run(["sweep=.."], tmp_path, tmp_path / "data", script="analyze.py")
    assert p.returncode == 2 and "sweep='..' is not a valid sweep id" in p.stderr, p.stderr
    assert not (tmp_path / "report.json").exists()


def test_report_folders_stay_inside_reports(tmp_path):
    from trainbench.analysis.report.report import report_dir

    for name in ("..", "../../etc", ".", "a/../../b", "x'y"):
        folder = report_dir(tmp_path / "reports", name)
        assert (tmp_path / "reports").resolve() in folder.parents, (name, folder)


@pytest.mark.slow
def test_experiment_name_holding_a_secret_is_refused(tmp_path):
    p = _run(["-m", "model=dqn", f"tracking.experiment=exp-{TOKEN}", f"hydra.sweep.dir={tmp_path}/sw"],
             tmp_path, tmp_path / "data", MY_TOKEN=TOKEN)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "secret environment variable MY_TOKEN" in p.stderr and TOKEN not in p.stderr + p.stdout
    assert not (tmp_path / "mlflow.db").exists()


def test_sweep_level_hydra_files_are_redacted(failing_sweep):
    """multirun.yaml (written by the sweeper, before any job) loses the secret too; the jobs fail fast."""
    p, tmp, sweep_dir = failing_sweep
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    files = [f for f in sweep_dir.rglob("*") if f.is_file()]
    assert (sweep_dir / "multirun.yaml") in files
    leaks = [f.relative_to(tmp).as_posix() for f in files if TOKEN.encode() in f.read_bytes()]
    assert leaks == []
    assert "p-***" in (sweep_dir / "multirun.yaml").read_text()


@pytest.mark.parametrize("script,arg,text", [
    ("run.py", "trainer.epoch=3", "Could not override 'trainer.epoch'"),
    ("run.py", "model=nosuchmodel", "Could not find 'model/nosuchmodel'"),
    ("run.py", "trainer.precision=fp64", "Invalid value 'fp64'"),
    ("analyze.py", "decision.bufer=0.3", "Could not override 'decision.bufer'"),
])
def test_errors_hydra_reports_keep_its_text_and_exit_2(tmp_path, script, arg, text):
    """Also the bad-input exits of tests/tracking/test_reliability.py: an invalid value and an unknown key."""
    p = _run([arg], tmp_path, tmp_path / "data", script=script)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert text in p.stderr and "Traceback" not in p.stderr
    assert arg.split("=")[-1] in p.stderr or arg.split("=")[0] in p.stderr  # the value or the key is named


def test_an_interrupt_lost_in_a_finaliser_is_delivered_again(monkeypatch):
    """Python drops a KeyboardInterrupt raised inside __del__ or a weakref callback (seen with SQLAlchemy's
    during a sweep): the hook delivers SIGINT again, so the training loop still gets its interrupt."""
    from trainbench.sweep import jobs as sweep

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored after the test
    monkeypatch.setattr(signal, "SIGINT", signal.SIGINT)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sweep.install_lost_interrupt_hook()

        class Finaliser:
            def __del__(self):
                raise KeyboardInterrupt("lost in a finaliser")

        with pytest.raises(KeyboardInterrupt):
            Finaliser()
            time.sleep(5)  # the signal comes again within milliseconds and interrupts this
    finally:
        signal.signal(signal.SIGINT, old)
