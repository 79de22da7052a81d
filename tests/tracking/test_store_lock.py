"""A SQLite store that another process keeps locked is called locked, by whom, with "wait and run again" (never
"damaged ... move it aside, the runs it held are lost"); a damaged one still is damaged. A real second process
holds a write lock, for a bounded time."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.exceptions import MlflowException

from trainbench.core.errors import TrackingUnavailable
from trainbench.tracking.connection import connect, store_error_message, store_lost_message

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")  # a writer in the middle of a transaction: readers and writers wait
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


@contextmanager
def held(db: Path, seconds: float = 90.0) -> Iterator[subprocess.Popen]:
    """Another process holding ``db``'s write lock (at most ``seconds``; stopped when the block ends)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        yield p
    finally:
        p.kill()
        p.wait(timeout=30)


def _tracking(uri: str, tmp_path: Path, **kw) -> SimpleNamespace:
    return SimpleNamespace(uri=uri, experiment="t", artifact_location=str(tmp_path / "artifacts"), timeout_s=1.0,
                           spool_dir=str(tmp_path / "spool"), min_free_mb=0, **kw)


@pytest.mark.slow
def test_a_store_locked_by_another_process_is_called_locked_for_both_commands(tmp_path):
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    connect(_tracking(uri, tmp_path))  # a store with its tables and an experiment
    with held(db) as holder:
        for create in (True, False):  # run.py / a sweep (writer) and analyze.py / rerun= (reader)
            with pytest.raises(TrackingUnavailable) as e:
                connect(_tracking(uri, tmp_path), create=create)
            msg = str(e.value)
            assert f"the MLflow store {db} is locked by another process (pid {holder.pid} (python" in msg, msg
            assert "Nothing is damaged" in msg and "wait for that process to finish" in msg
            assert "move it aside" not in msg and "lost" not in msg and len(msg.splitlines()) == 1
    connect(_tracking(uri, tmp_path), create=False)  # released: the store is whole


@pytest.mark.slow
def test_analyze_py_says_locked_in_one_line(tmp_path):
    db = tmp_path / "mlflow.db"
    connect(_tracking(f"sqlite:///{db}", tmp_path))
    with held(db):
        p = subprocess.run([sys.executable, "analyze.py", f"tracking.uri=sqlite:///{db}", "tracking.experiment=t",
                            "tracking.timeout_s=1", f"hydra.run.dir={tmp_path}/aout",
                            f"paths.reports={tmp_path}/reports"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert p.returncode == 2 and len(errors) == 1, p.stderr[-3000:]
    assert "is locked by another process" in errors[0] and "damaged" not in errors[0].replace("Nothing is damaged", "")


def test_mlflows_own_lock_error_is_called_locked_too():
    uri = "sqlite:////tmp/x/mlflow.db"
    locked = MlflowException("(sqlite3.OperationalError) database is locked [SQL: INSERT ...]")
    assert "is locked by another process" in store_error_message(uri, locked)
    lost = store_lost_message(locked, uri)
    assert lost is not None and "is locked by another process" in lost and "stopped answering" not in lost
    # a damaged file stays damaged
    assert "damaged" in store_error_message(uri, Exception("file is not a database"))


def test_a_damaged_store_is_still_damaged(tmp_path):
    db = tmp_path / "m.db"
    db.write_bytes(b"\x00garbage" * 5000)
    with pytest.raises(TrackingUnavailable, match="damaged"):
        connect(_tracking(f"sqlite:///{db}", tmp_path), create=False)


CREATE = """
import sys, time
from pathlib import Path
from mlflow.tracking import MlflowClient
from trainbench.tracking.store import sqlite_lock
db, marks = Path(sys.argv[1]), Path(sys.argv[2])
with sqlite_lock(db):  # what a writer holds while MLflow creates a new store
    db.touch()  # the file is there, its tables not yet
    (marks / "locked").touch()
    time.sleep(1.5)
    MlflowClient(f"sqlite:///{db}").search_experiments()  # MLflow creates and migrates the tables
    (marks / "created").touch()
"""


@pytest.mark.slow
def test_a_reader_waits_for_a_store_another_process_is_creating(tmp_path):
    """The analysis (or a test watching a sweep) that opens a store while a run is creating it waits for the
    run's lock, rather than creating the half-made tables a second time (which left CI's store
    half-migrated) or calling a migration in progress cut short."""
    from trainbench.tracking.connection import check_local_store

    db, marks = tmp_path / "mlflow.db", tmp_path / "marks"
    marks.mkdir()
    p = subprocess.Popen([sys.executable, "-c", CREATE, str(db), str(marks)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (marks / "locked").exists():
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else ""
            time.sleep(0.02)
        with check_local_store(f"sqlite:///{db}"):
            assert (marks / "created").exists()  # returned only once the creator let go of the lock
        assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
    from mlflow.tracking import MlflowClient

    assert [e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()] == ["Default"]
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert not [t for t in tables if t.startswith("_alembic_tmp_")]
