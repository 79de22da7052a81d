"""Real servers for the tests: an `mlflow server` and a throwaway PostgreSQL cluster, on loopback.

Every wait is bounded, and each process runs in its own session so that stopping it kills its whole
process group (the mlflow CLI forks uvicorn workers).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from trainbench.core.vocab import Artifact, Series


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with the given backend store; start(), stop(), start() again."""

    def __init__(self, backend_uri: str, artifacts_dir: Path, log_path: Path, port: int | None = None,
                 workers: int = 2, command: str = "server") -> None:
        self.backend_uri, self.artifacts_dir, self.log_path = backend_uri, artifacts_dir, log_path
        self.port = port or free_port()
        self.workers = workers
        self.command = command  # `server`, or `ui` (the same app, as `make ui` starts it)
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> MlflowServer:
        exe = Path(sys.executable).with_name("mlflow")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "mlflow"]
        cmd += [self.command, "--backend-store-uri", self.backend_uri, "--artifacts-destination", str(self.artifacts_dir),
                "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers)]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes to it until stop()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.proc.returncode}):\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.uri + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.proc = None
        deadline = time.monotonic() + 10
        while self.healthy() and time.monotonic() < deadline:
            time.sleep(0.2)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def postgres_available() -> str | None:
    """None when a throwaway cluster can be started here, else the reason (for pytest.skip)."""
    for tool in ("initdb", "pg_ctl"):
        if not (shutil.which(tool) or list(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"))):
            return f"{tool} not found (Debian: apt-get install postgresql)"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (pip install .[postgres])"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no `postgres` user to run the cluster as"
    return None


def _pg_tool(tool: str) -> str:
    found = shutil.which(tool)
    return found or str(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"))[-1])


class PostgresCluster:
    """initdb + pg_ctl in a temporary folder, listening on 127.0.0.1 only, trust auth, one database."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tb-pg-"))
        self.data = self.root / "data"
        self._as_user: dict = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def uri(self, db: str = "mlflow") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{db}"

    def _run(self, *cmd: str, timeout: float = 120) -> None:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=self.root,
                           **self._as_user)
        if p.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")

    def start(self) -> PostgresCluster:
        self._run(_pg_tool("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run(_pg_tool("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "pg.log"), "-w",
                  "-t", "60", "start")
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE mlflow")
        conn.close()
        return self

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run(_pg_tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def assert_every_epoch_recorded(client, run, tmp) -> int:
    """Every per-epoch series of a run's epochs.json is in its MLflow metric history at every step, with the
    same values; returns the number of epochs."""
    import json
    from pathlib import Path

    import pytest

    path = client.download_artifacts(run.info.run_id, Artifact.EPOCHS, str(tmp))
    series = {k: v for k, v in json.loads(Path(path).read_text()).items() if k != "warmup_epochs"}
    n = len(series[Series.EPOCH_TIME_MS])
    assert n > 0
    for key, values in series.items():
        hist = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert sorted(hist) == list(range(n)), (run.info.run_id, key)
        assert all(hist[i] == pytest.approx(v, nan_ok=True) for i, v in enumerate(values)), key
    return n
