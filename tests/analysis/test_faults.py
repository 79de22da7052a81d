"""Fault cases of the analysis (issue 31): a sweep still running, a store that dies, a folder that cannot be
written. Each ends as documented: the right word, one line, nothing written half."""

from __future__ import annotations

import errno
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy, report_from_store

from helpers.procs import child_env
from trainbench.analysis.pipeline import run_analysis
from trainbench.analysis.report.report import write_report
from trainbench.core.errors import EXIT_BAD_INPUT
from trainbench.core.vocab import Outcome, Tag

PARENT = "mlflow.parentRunId"


def _parent(store, sweep_id: str, status: str | None) -> str:
    run = store.client.create_run(store.exp_id, run_name=sweep_id, tags={Tag.KIND: "sweep", Tag.SWEEP_ID: sweep_id})
    if status:
        store.client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_open_runs_of_a_sweep_whose_parent_is_running_are_in_progress_not_stale(store, tmp_path):
    live = _parent(store, "live1", None)  # the sweep is still going
    store.add_run("dqn", noisy(50.0, 12, 0.01, 1), sweep_id="live1", job="0", extra_tags={PARENT: live})
    store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="live1", job="1", outcome=Outcome.STALE,
                  extra_tags={PARENT: live})
    cfg = analyze_cfg(store, tmp_path, ["sweep=live1"])
    report, _ = run_analysis(cfg, tmp_path / "r1", log=lambda *_: None)
    row = next(r for r in report["runs"] if r[Tag.JOB] == "1")
    assert row["outcome"] == Outcome.IN_PROGRESS, row
    assert "in progress" in row["excluded_reason"] and "killed" not in row["excluded_reason"]


def test_open_runs_of_a_sweep_whose_parent_ended_stay_stale(store, tmp_path):
    done = _parent(store, "dead1", "KILLED")
    store.add_run("dqn", noisy(50.0, 12, 0.01, 1), sweep_id="dead1", job="0", extra_tags={PARENT: done})
    store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="dead1", job="1", outcome=Outcome.STALE,
                  extra_tags={PARENT: done})
    report, _ = run_analysis(analyze_cfg(store, tmp_path, ["sweep=dead1"]), tmp_path / "r2", log=lambda *_: None)
    row = next(r for r in report["runs"] if r[Tag.JOB] == "1")
    assert row["outcome"] == Outcome.STALE and "killed without closing" in row["excluded_reason"]


# -- a store that dies, a folder that cannot be written ------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _analyze(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "analyze.py"), *args], cwd=REPO,
                          env=child_env(HYDRA_FULL_ERROR="0"), capture_output=True, text=True, timeout=timeout)


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    out = p.stdout + p.stderr
    assert p.returncode == EXIT_BAD_INPUT, out[-3000:]
    assert "Traceback" not in out and "is not valid" not in out, out[-3000:]
    errors = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(errors) == 1, out[-3000:]
    return errors[0]


def unwritable(tmp: Path) -> Path:
    """A folder that cannot be created (PermissionError), also for root: sysfs refuses mkdir to everyone."""
    if os.geteuid() == 0:
        return Path("/sys") / f"trainbench-test-{os.getpid()}" / "out"
    ro = tmp / "read-only"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "out"


class _DiesAfterConnect(http.server.BaseHTTPRequestHandler):
    """An MLflow server that answers the start-up checks (/health, the experiment) and then dies: every
    later request loses its connection, as when the server is killed during the analysis."""

    def _answer(self) -> None:
        if "/health" in self.path or "experiments/get-by-name" in self.path:
            body = b"OK" if "/health" in self.path else json.dumps({"experiment": {
                "experiment_id": "1", "name": "trainbench", "artifact_location": "mlflow-artifacts:/1",
                "lifecycle_stage": "active"}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_the_server_dying_during_the_analysis_is_one_line(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DiesAfterConnect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        p = _analyze("tracking=server", f"tracking.uri=http://127.0.0.1:{server.server_address[1]}",
                     f"paths.root={tmp_path}")
    finally:
        server.shutdown()
    line = _one_error_line(p)
    assert "stopped answering during the analysis" in line and "run again" in line
    assert not (tmp_path / "reports").exists()


def test_an_unwritable_report_folder_is_one_line_before_anything_is_logged(store, tmp_path):
    exp = store.new_experiment("ro-reports")
    exp.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="ro1")
    reports = unwritable(tmp_path)
    p = _analyze(f"tracking.uri={exp.uri}", "tracking.experiment=ro-reports", f"paths.root={tmp_path}",
                 f"paths.reports={reports}", "analysis.bootstrap_resamples=200", "analysis.plots=false")
    line = _one_error_line(p)
    assert str(reports) in line and "paths.reports=" in line
    kinds = [r.data.tags.get(Tag.KIND) for r in exp.client.search_runs([exp.exp_id])]
    assert "analysis" not in kinds  # nothing logged for a report that was never written


def test_an_unwritable_hydra_run_dir_of_analyze_is_one_line(tmp_path):
    folder = unwritable(tmp_path)
    line = _one_error_line(_analyze(f"hydra.run.dir={folder}", timeout=120))
    assert str(folder) in line and "hydra.run.dir=" in line


def test_a_report_file_is_written_whole_or_not_at_all(store, tmp_path, monkeypatch):
    store.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="whole1")
    report = report_from_store(store, tmp_path, "sweep=whole1")
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "report.md").write_text("the previous report\n")
    (folder / "report.json").write_text('{"previous": true}\n')
    real = Path.write_text

    def disk_fills_halfway(self, data, *a, **k):
        real(self, data[: len(data) // 2], *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_fills_halfway)
    with pytest.raises(OSError):
        write_report(report, folder)
    monkeypatch.setattr(Path, "write_text", real)
    assert (folder / "report.md").read_text() == "the previous report\n"
    assert json.loads((folder / "report.json").read_text()) == {"previous": True}
    assert sorted(p.name for p in folder.iterdir()) == ["report.json", "report.md"]  # no temporary file left


def test_nan_epoch_times_are_dropped_with_a_note(store, tmp_path):
    t = noisy(50.0, 30, 0.01, 3)
    t[[5, 9, 17]] = np.nan  # epochs whose time was never recorded
    store.add_run("dqn", t, sweep_id="nan1")
    report = report_from_store(store, tmp_path, "sweep=nan1")
    m = report["models"]["dqn"]
    warned = [w for w in m["stability"]["warnings"] if "no finite epoch time" in w]
    assert len(warned) == 1 and warned[0].startswith("3 epoch(s)"), m["stability"]["warnings"]
    # a clean run says nothing of the kind
    store.add_run("dqn", noisy(50.0, 30, 0.01, 4), sweep_id="nan2")
    clean = report_from_store(store, tmp_path, "sweep=nan2")["models"]["dqn"]["stability"]["warnings"]
    assert not [w for w in clean if "finite epoch time" in w]
