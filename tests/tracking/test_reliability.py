"""Nothing lost, nothing silently substituted: real processes, real SQLite files, a real
`mlflow server` on 127.0.0.1 and, as root, a small tmpfs that fills up. run.py runs as a process of its own;
analyze.py's command, whose faults here are its words and exit status, in the test's process
(helpers.procs.in_process).

Each test reproduces one fault: several processes creating a new store at once, a half-migrated store,
a full disk before and during a run, a damaged spool, a read-only or unwritable store, a deleted
experiment, a damaged database in the analysis, Ctrl-C while the end of a run waits for the server, a
run left only in the spool, artifacts of a server URI given without tracking=server, and the exit code
of bad input across run.py and analyze.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from helpers.paced_model import PACED, paced_env
from helpers.procs import child_env, in_process
from helpers.runs import metric_steps, train_runs
from helpers.servers import MlflowServer
from trainbench.core.errors import TrackingUnavailable
from trainbench.core.vocab import Outcome, Tag
from trainbench.tracking.connection import connect
from trainbench.tracking.writer import RunWriter

REPO = Path(__file__).resolve().parents[2]
ENV = child_env(HYDRA_FULL_ERROR="0")
ROOT = os.geteuid() == 0


def _tracking(uri: str, tmp: Path, **kw) -> SimpleNamespace:
    return SimpleNamespace(uri=uri, experiment=kw.pop("experiment", "rel"), timeout_s=10,
                           artifact_location=kw.pop("artifact_location", str(tmp / "art")),
                           spool_dir=str(tmp / "spool"), min_free_mb=kw.pop("min_free_mb", 0), **kw)


def _py(*args: str, timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


#: dqn with epochs of a few milliseconds (the fault tests need many epochs, not a measurement).
TINY = ["debug=default", "model=dqn", "model.updates_per_epoch=1", "model.num_envs=2", "model.batch_size=8",
        "model.hidden=8", "model.learning_starts=16", "model.episode_len=8", "model.window=4",
        "trainer.latency.enabled=false", "trainer.stop.rel_ci=0"]  # every epoch runs: no early stop


def _run_py(tmp: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return _py("run.py", *TINY, f"paths.data_dir={tmp}/data", f"hydra.run.dir={tmp}/out", *args, timeout=timeout)


def _analyze(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    from trainbench.cli import analyze_command

    return in_process(analyze_command, [*args, f"hydra.run.dir={tmp}/aout"], cwd=REPO, HYDRA_FULL_ERROR="0")


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert lines, out[-3000:]
    return lines[-1]


# -- 1: a new SQLite store created by several processes at once ------------------------------------------

WORKER = """
import sys, time
from pathlib import Path
from types import SimpleNamespace
uri, n, barrier = sys.argv[1], sys.argv[2], Path(sys.argv[3])
from trainbench.tracking.connection import connect
from trainbench.tracking.writer import RunWriter
(barrier / f"ready{n}").touch()
while not (barrier / "go").exists():
    time.sleep(0.005)
client, exp = connect(SimpleNamespace(uri=uri, experiment="race", timeout_s=10, artifact_location=None,
                                      spool_dir=None, min_free_mb=0))
w = RunWriter(client, exp, flush_every=1)
w.start(f"w{n}", {"kind": "train", "model": "dqn", "writer": n}, {"p": "1"})
for step in range(3):
    w.log_epoch(step, {"loss": float(step)})
assert w.end("completed")
"""


@pytest.mark.slow
def test_four_processes_creating_a_new_sqlite_store_all_record_their_run(tmp_path):
    db = tmp_path / "new.db"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, f"sqlite:///{db}", str(i), str(barrier)], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.monotonic() + 240
    while len(list(barrier.glob("ready*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    (barrier / "go").touch()  # all four open the new store at the same moment
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n---\n".join(e[-1500:] for e in errs)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert not [t for t in tables if t.startswith("_alembic_tmp_")]
    client = MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert sorted(r.data.tags["writer"] for r in runs) == ["0", "1", "2", "3"]
    assert {r.info.status for r in runs} == {"FINISHED"}


@pytest.mark.slow
def test_a_half_migrated_store_is_refused_with_the_way_to_recover(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    connect(_tracking(uri, tmp_path))
    con = sqlite3.connect(tmp_path / "m.db")
    con.execute("CREATE TABLE _alembic_tmp_tags (key VARCHAR(250))")  # what an upgrade cut short leaves
    con.commit()
    con.close()
    with pytest.raises(TrackingUnavailable, match=r"half-migrated.*DROP TABLE _alembic_tmp_tags.*mlflow db upgrade"):
        connect(_tracking(uri, tmp_path))


@pytest.mark.slow
def test_a_migration_in_progress_in_another_program_is_waited_for_not_called_cut_short(tmp_path):
    """MLflow's UI or client creating a new store migrates it without ``<store>.lock``: its temporary tables
    are there while the file keeps changing, and gone once it is done. A run started then waits."""
    uri = f"sqlite:///{tmp_path}/m.db"
    connect(_tracking(uri, tmp_path))
    con = sqlite3.connect(tmp_path / "m.db", check_same_thread=False)
    con.execute("CREATE TABLE _alembic_tmp_tags (key VARCHAR(250))")
    con.execute("CREATE TABLE scratch (i INTEGER)")
    con.commit()

    def migrate() -> None:  # writes for about two seconds, then finishes the upgrade
        for i in range(20):
            time.sleep(0.1)
            con.execute("INSERT INTO scratch VALUES (?)", (i,))
            con.commit()
        con.execute("DROP TABLE _alembic_tmp_tags")
        con.commit()

    other = threading.Thread(target=migrate)
    other.start()
    try:
        connect(_tracking(uri, tmp_path))  # no half-migrated error: it waited for the upgrade to end
    finally:
        other.join()
        con.close()


@pytest.mark.slow
def test_a_store_from_a_newer_mlflow_is_named_as_such(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    connect(_tracking(uri, tmp_path))
    con = sqlite3.connect(tmp_path / "m.db")
    con.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    con.commit()
    con.close()
    with pytest.raises(TrackingUnavailable, match=r"revision ffffffffffff.*newer MLflow wrote it"):
        connect(_tracking(uri, tmp_path))


# -- 2: a full disk ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_too_little_free_space_refuses_the_run_before_it_starts(tmp_path):
    p = _run_py(tmp_path, f"tracking.uri=sqlite:///{tmp_path}/m.db", "tracking.min_free_mb=1e12")
    assert p.returncode == 2
    assert "tracking.min_free_mb" in _one_error_line(p)
    assert not (tmp_path / "m.db").exists() or not train_runs(MlflowClient(f"sqlite:///{tmp_path}/m.db"))


@pytest.fixture
def tmpfs(tmp_path):
    """A 16 MB tmpfs (root only; CI runs as root), unmounted afterwards."""
    if not ROOT:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path) -> Path:
    ballast = folder / "ballast"
    # suppress outermost: the close flushes what the failed write left buffered, and that fails too (ENOSPC)
    with contextlib.suppress(OSError), open(ballast, "wb") as f:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    with contextlib.suppress(OSError):  # fill the last partial block too
        os.fsync(os.open(ballast, os.O_RDONLY))
    return ballast


@pytest.mark.slow
def test_a_disk_that_fills_up_mid_run_ends_the_run_as_disk_full_and_keeps_its_epochs(tmpfs, tmp_path):
    uri = f"sqlite:///{tmpfs}/mlflow.db"
    proc = subprocess.Popen(
        [sys.executable, "run.py", *TINY, "trainer.epochs=100000", f"tracking.uri={uri}",
         f"tracking.artifact_location={tmpfs}/artifacts", f"tracking.spool_dir={tmpfs}/spool",
         "tracking.min_free_mb=4", "trainer.flush_every=1", "trainer.flush_min_interval_s=0.2",
         f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"],
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # wait for a few stored epochs
            with contextlib.suppress(sqlite3.Error):
                con = sqlite3.connect(f"file:{tmpfs}/mlflow.db?mode=ro", uri=True, timeout=5)
                n = con.execute("SELECT COUNT(*) FROM metrics WHERE key = 'loss'").fetchone()[0]
                con.close()
                if n >= 3:
                    break
            time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        ballast = _fill(tmpfs)  # the disk is full from now on
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (tmp_path / "run-output.txt").write_text(out)
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "autoflush" not in out.lower(), out[-3000:]
    assert "disk is full" in out and Outcome.DISK_FULL in out, out[-3000:]
    ballast.unlink()
    runs = train_runs(MlflowClient(uri))
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FAILED" and run.data.tags[Tag.OUTCOME] == Outcome.DISK_FULL
    assert "disk is full" in run.data.tags[Tag.ERROR]
    steps = metric_steps(MlflowClient(uri), run.info.run_id)
    assert len(steps) >= 3 and steps == list(range(len(steps)))  # every stored epoch, none missing
    assert not list(tmpfs.glob("**/.trainbench-reserve-*"))


def test_a_spool_write_on_a_full_disk_leaves_the_spool_readable(tmpfs):
    from trainbench.tracking.spool import Spool

    sp = Spool.create(tmpfs / "spool", "run1", "http://127.0.0.1:9", "0")
    sp.append({"op": "log_batch", "metrics": [["loss", 1.0, 1, 0]]})
    _fill(tmpfs)
    with pytest.raises(OSError):
        sp.append({"op": "log_text", "text": "x" * 200_000, "artifact_file": "big.txt"})
    assert sp.ops() == [{"op": "log_batch", "metrics": [["loss", 1.0, 1, 0]]}]
    with pytest.raises(OSError):  # a new run's spool: no half-written meta.json is left behind
        Spool.create(tmpfs / "spool", "run2", "http://127.0.0.1:9", "0")
    assert not (tmpfs / "spool" / "run2" / "meta.json").exists()


@pytest.mark.slow
def test_sync_reports_a_damaged_spool_and_skips_a_torn_tail(tmp_path, mlflow_server):
    client = MlflowClient(mlflow_server.uri)
    exp = connect(_tracking(mlflow_server.uri, tmp_path, experiment="torn"))[1]
    run_id = client.create_run(exp).info.run_id
    good = tmp_path / "spool" / run_id
    good.mkdir(parents=True)
    (good / "meta.json").write_text(json.dumps({"tracking_uri": mlflow_server.uri, "run_id": run_id,
                                                "experiment_id": exp}))
    (good / "ops.jsonl").write_text(json.dumps({"op": "log_batch", "metrics": [["loss", 2.0, 1, 0]]}) + "\n"
                                    + '{"op": "log_batch", "metr')  # a torn last record
    bad = tmp_path / "spool" / "run-with-empty-meta"
    bad.mkdir()
    (bad / "meta.json").write_text("")  # what a full disk left before meta.json was written atomically
    (bad / "ops.jsonl").write_bytes(b"")
    p = _py("-m", "trainbench.tracking.sync", str(tmp_path / "spool"), "--yes", timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 1 and "Traceback" not in out, out
    assert "meta.json is damaged" in p.stderr
    assert [m.value for m in client.get_metric_history(run_id, "loss")] == [2.0]
    assert not good.exists()


# -- 8: artifacts of an http(s) URI go through the server ----------------------------------------------

def test_a_server_uri_without_tracking_server_still_proxies_artifacts(tmp_path, mlflow_server):
    local = tmp_path / "local-artifacts"  # what tracking=local configures
    client, exp_id = connect(_tracking(mlflow_server.uri, tmp_path, experiment="by-uri",
                                       artifact_location=str(local)))
    assert client.get_experiment(exp_id).artifact_location.startswith("mlflow-artifacts:")
    w = RunWriter(client, exp_id)
    run_id = w.start("r", {"kind": "train"}, {})
    w.log_text("hello", "note.txt")
    assert w.end(Outcome.COMPLETED)
    assert [a.path for a in client.list_artifacts(run_id)] == ["note.txt"]
    assert not local.exists() or not any(local.rglob("note.txt"))
    assert list(mlflow_server.artifacts_dir.rglob("note.txt"))


# -- 9/10: setup problems: one line, non-zero exit ------------------------------------------------------

@pytest.fixture
def readonly_dir(tmp_path):
    """A folder holding an MLflow store that cannot be written: a read-only tmpfs as root, chmod otherwise."""
    d = tmp_path / "ro"
    d.mkdir()
    if ROOT:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(d)], capture_output=True)
        if r.returncode:
            pytest.skip("cannot mount a tmpfs here")
    seed = tmp_path / "seed"  # made here, copied in: this process keeps its own store open
    connect(_tracking(f"sqlite:///{seed}/mlflow.db", tmp_path, experiment="trainbench"))
    shutil.copy(seed / "mlflow.db", d / "mlflow.db")
    if ROOT:
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
    else:
        (d / "mlflow.db").chmod(0o444)
        d.chmod(0o555)
    yield d
    if ROOT:
        subprocess.run(["umount", "-l", str(d)], check=False)
    else:
        d.chmod(0o755)


@pytest.mark.slow
def test_a_read_only_store_fails_in_one_line_for_run_and_analysis(readonly_dir, tmp_path):
    uri = f"sqlite:///{readonly_dir}/mlflow.db"
    p = _run_py(tmp_path, f"tracking.uri={uri}", timeout=120)
    assert p.returncode == 2 and "not writable" in _one_error_line(p)
    p = _analyze(tmp_path, f"tracking.uri={uri}")
    line = _one_error_line(p)
    assert p.returncode == 2 and "not writable" in line and "analysis.log_to_mlflow=false" in line
    # reading it still works (this store holds no runs yet)
    p = _analyze(tmp_path, f"tracking.uri={uri}", "analysis.log_to_mlflow=false")
    assert p.returncode == 2 and "no training runs" in _one_error_line(p)
    # an unwritable folder for a new store fails at once (it used to retry for 107 s)
    p = _run_py(tmp_path, f"tracking.uri=sqlite:///{readonly_dir}/sub/new.db", timeout=60)
    assert p.returncode == 2 and "not writable" in _one_error_line(p)


@pytest.mark.slow
def test_a_deleted_experiment_is_named_with_how_to_restore_it(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    client, exp_id = connect(_tracking(uri, tmp_path, experiment="gone"))
    client.delete_experiment(exp_id)
    p = _run_py(tmp_path, f"tracking.uri={uri}", "tracking.experiment=gone", timeout=120)
    line = _one_error_line(p)
    assert p.returncode == 2 and "was deleted" in line and f"mlflow experiments restore --experiment-id {exp_id}" in line
    p = _analyze(tmp_path, f"tracking.uri={uri}", "tracking.experiment=gone")
    line = _one_error_line(p)
    assert p.returncode == 2 and "was deleted" in line and "no training runs" not in line


@pytest.mark.slow
def test_a_damaged_database_in_the_analysis_is_one_line(tmp_path):
    (tmp_path / "m.db").write_bytes(os.urandom(40_000))
    p = _analyze(tmp_path, f"tracking.uri=sqlite:///{tmp_path}/m.db")
    assert p.returncode == 2 and "damaged" in _one_error_line(p)


def test_bad_input_exits_2_in_run_and_analyze(tmp_path):
    p = _py("run.py", "--experimental-rerun", str(tmp_path / "missing.pickle"), timeout=120)
    assert p.returncode == 2 and "missing.pickle does not exist" in _one_error_line(p)
    # an unknown analyze.py key and an invalid trainer.precision exit 2 naming the value, without a traceback:
    # tests/sweep/test_jobs.py::test_errors_hydra_reports_keep_its_text_and_exit_2 runs those processes


@pytest.mark.slow
def test_runs_left_in_the_spool_exit_non_zero_and_ctrl_c_in_the_wait_is_clean(tmp_path):
    """The server goes away mid-run: a run that cannot deliver exits 1 naming `trainbench sync`; Ctrl-C while
    the end of a run waits for the server stops the wait cleanly; `trainbench sync` then finishes both."""
    # one uvicorn worker serves two runs' writes (each worker costs ~2 CPU-s to start, and this server starts twice)
    server = MlflowServer(f"sqlite:///{tmp_path}/server.db", tmp_path / "artifacts", tmp_path / "server.log",
                          workers=1).start()
    spool = tmp_path / "spool"
    epochs = 150  # the paced model's 15 s: still training when the server goes, without a core of the suite's
    common = [*PACED, "debug=default", "trainer.latency.enabled=false", "trainer.stop.rel_ci=0",
              f"trainer.epochs={epochs}", f"tracking.uri={server.uri}", f"tracking.spool_dir={spool}",
              "tracking.resend_every_s=0.5", f"paths.data_dir={tmp_path}/data"]
    logs = {k: open(tmp_path / f"{k}.log", "w+") for k in ("nowait", "wait")}  # noqa: SIM115
    procs = {k: subprocess.Popen([sys.executable, "run.py", *common, f"hydra.run.dir={tmp_path}/{k}",
                                  f"tracking.spool_wait_s={0 if k == 'nowait' else 600}"],
                                 cwd=REPO, env=paced_env(HYDRA_FULL_ERROR="0"), stdout=logs[k],
                                 stderr=subprocess.STDOUT, text=True)
             for k in logs}

    def text(k):
        return (tmp_path / f"{k}.log").read_text()

    def wait_for(cond, what, timeout=300):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {text('nowait')[-1500:]}" \
                                                f"\n{text('wait')[-1500:]}"
            time.sleep(0.2)
    try:
        wait_for(lambda: all("MLflow run" in text(k) for k in logs), "both runs to open")
        server.stop()
        wait_for(lambda: procs["nowait"].poll() is not None, "the run without a wait to end")
        assert procs["nowait"].returncode == 1
        assert "trainbench sync" in text("nowait") and "Traceback" not in text("nowait")
        wait_for(lambda: "Ctrl-C stops waiting" in text("wait"), "the end-of-run wait")
        procs["wait"].send_signal(signal.SIGINT)
        procs["wait"].wait(timeout=60)
        assert procs["wait"].returncode == 1
        assert "trainbench sync" in text("wait") and "Traceback" not in text("wait")
        assert len([p for p in spool.iterdir() if (p / "meta.json").exists()]) == 2
        server.start()
        p = _py("-m", "trainbench.tracking.sync", str(spool), "--yes", timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        client = MlflowClient(server.uri)
        runs = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id])
        assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
        for r in runs:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, "loss")]
            assert sorted(steps) == list(range(epochs + 1))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()
        server.stop()


# -- 11: messages --------------------------------------------------------------------------------------

def test_a_dns_failure_is_not_called_a_refusal(tmp_path):
    import databento as db

    from trainbench.core.errors import DataError
    from trainbench.data.__main__ import compose_data
    from trainbench.data.download import download

    cfg = compose_data(["data=futures_90d", f"paths.data_dir={tmp_path}"], REPO)
    with pytest.raises(DataError) as e:
        download(cfg, root=tmp_path, env={"DATABENTO_API_KEY": "db-" + "x" * 29},
                 client_factory=lambda key: db.Historical(key=key, gateway="https://trainbench-nowhere.invalid"))
    assert "cannot reach Databento" in str(e.value) and "refused" not in str(e.value)



def test_too_few_bars_names_the_file_data_path_points_at(tmp_path):
    import torch

    from trainbench.config.run import DataConfig
    from trainbench.core.errors import ModelDataError
    from trainbench.data.loader import load_market_data
    from trainbench.models.base import BuildContext
    from trainbench.models.tft import TFTConfig, build

    small = tmp_path / "elsewhere" / "small.dbn.zst"
    data = load_market_data(DataConfig(name="futures_90d", synthetic=True, path=str(small), n_bars=300),
                            root=tmp_path, data_dir=tmp_path / "data")
    with pytest.raises(ModelDataError) as e:
        build(TFTConfig(batch_size=10_000), data, BuildContext(device=torch.device("cpu")))
    assert str(small) in str(e.value)
