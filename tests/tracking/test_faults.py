"""Fault cases of the tracking store (issue 31): a store that cannot be reached ends a command within the
configured timeout, with one line and the documented exit code."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.procs import child_env
from helpers.servers import free_port
from trainbench.core.errors import EXIT_BAD_INPUT, TrackingUnavailable
from trainbench.tracking.connection import check_database_server, connect

REPO = Path(__file__).resolve().parents[2]


def _pg_uri(password: str = "s3cretpw") -> str:
    """A PostgreSQL store where nothing listens (the command line refuses one with a password in it: the
    documented form names the user only, the password is in PGPASSWORD or ~/.pgpass)."""
    user = f"bench:{password}" if password else "bench"
    return f"postgresql+psycopg2://{user}@127.0.0.1:{free_port()}/mlflow"


def test_an_unreachable_database_server_fails_at_once_without_the_password(tmp_path):
    uri = _pg_uri()
    t0 = time.monotonic()
    with pytest.raises(TrackingUnavailable) as e:
        connect(SimpleNamespace(uri=uri, experiment="x", timeout_s=2, artifact_location=None, spool_dir=None,
                                min_free_mb=0))
    assert time.monotonic() - t0 < 60  # MLflow's own engine retries take more than 100 s
    msg = str(e.value)
    assert "127.0.0.1" in msg and "within 2 s" in msg and "tracking.uri" in msg
    assert "s3cretpw" not in msg and "bench" not in msg


def test_other_stores_are_not_probed():
    check_database_server("sqlite:///nowhere/x.db", 1)
    check_database_server("http://127.0.0.1:1", 1)  # the HTTP path has its own /health check


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run.py", "analyze.py"])
def test_run_and_analyze_fail_on_an_unreachable_postgresql_store_with_one_line(tmp_path, script):
    args = [sys.executable, script, f"tracking.uri={_pg_uri(password='')}", "tracking.timeout_s=3",
            f"hydra.run.dir={tmp_path}/out"]
    if script == "run.py":
        args += ["debug=default", "model=dqn", f"paths.data_dir={tmp_path}/data"]
    p = subprocess.run(args, cwd=REPO, env=child_env(HYDRA_FULL_ERROR="0", PGPASSWORD="s3cretpw"),
                       capture_output=True, text=True,
                       timeout=90)  # today's code retries for more than 100 s
    out = p.stdout + p.stderr
    assert p.returncode == EXIT_BAD_INPUT, out[-3000:]
    assert "Traceback" not in out and "Operation will be retried" not in out, out[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "did not accept a connection within 3 s" in errors[0], out[-3000:]
    assert "s3cretpw" not in out
