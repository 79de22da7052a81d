"""Fault cases of the analysis (issue 31): a sweep still running, a store that dies, a folder that cannot be
written. Each ends as documented: the right word, one line, nothing written half."""

from __future__ import annotations

import errno
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy, report_from_store

from helpers.procs import REPO, in_process
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


def _analyze(*args: str) -> subprocess.CompletedProcess:
    """analyze.py's command in this process (helpers.procs.in_process): its exit status and words."""
    from trainbench.cli import analyze_command

    return in_process(analyze_command, list(args), cwd=REPO, HYDRA_FULL_ERROR="0")


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


@pytest.mark.slow
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


@pytest.mark.slow
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
    line = _one_error_line(_analyze(f"hydra.run.dir={folder}"))
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


# -- logged text in the plots, a full disk, a linked report folder (issue 38) ---------------------------------


def test_a_model_tag_with_math_text_and_escapes_is_plotted_as_plain_text(store, tmp_path, caplog):
    """Math text (`$\\undefinedcmd{$`) does not abort the report; ESC/BEL never reach the log or the console raw
    through matplotlib's warnings."""
    exp = store.new_experiment("plot-text")
    name = "dqn$\\undefinedcmd{$\x1b[2J\x07"
    exp.add_run(name, noisy(50.0, 30, 0.01, 1), sweep_id="pt")
    exp.add_run("dqn", noisy(50.0, 30, 0.01, 2), sweep_id="pt")
    cfg = analyze_cfg(exp, tmp_path, ["sweep=pt", "analysis.plots=true", "decision.plan=[dqn]"])
    with caplog.at_level("WARNING"):
        report, folder = run_analysis(cfg, tmp_path / "r-text", log=lambda *_: None)
    assert (folder / "report.json").is_file() and "epoch_times.png" in report["plots"]
    assert "loss_curves.png" in report["plots"]
    assert not any(ch in caplog.text for ch in "\x1b\x07"), caplog.text


def test_a_plot_that_fails_to_draw_is_left_out_not_the_report(store, tmp_path, monkeypatch, caplog):
    from trainbench.analysis.report import plots

    store.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="pfail")

    def broken(*_a):
        raise ValueError("cannot draw")

    monkeypatch.setattr(plots, "_loss_curves", broken)
    cfg = analyze_cfg(store, tmp_path, ["sweep=pfail", "analysis.plots=true"])
    with caplog.at_level("WARNING"):
        report, folder = run_analysis(cfg, tmp_path / "r-fail", log=lambda *_: None)
    assert "loss_curves.png" not in report["plots"] and "epoch_times.png" in report["plots"]
    assert "loss_curves.png left out" in caplog.text and (folder / "report.md").is_file()


def test_a_full_disk_under_the_report_folder_is_one_line_and_writes_nothing(store, tmp_path, monkeypatch):
    from trainbench.analysis.report import report as report_mod
    from trainbench.core.errors import AnalysisError

    store.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="full1")
    folder = tmp_path / "r-full"
    folder.mkdir()
    (folder / "report.md").write_text("the previous report\n")
    real = report_mod.atomic_write_text

    def full(path, text):
        if path.name == "report.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(report_mod, "atomic_write_text", full)
    cfg = analyze_cfg(store, tmp_path, ["sweep=full1", "analysis.plots=true"])
    with pytest.raises(AnalysisError) as e:
        run_analysis(cfg, folder, log=lambda *_: None)
    msg = str(e.value)
    assert "\n" not in msg and str(folder) in msg and "No space left on device" in msg and "out_dir=" in msg
    # nothing half-written: the previous report stands, no PNG of the failed one, no staging folder left
    assert sorted(p.name for p in folder.iterdir()) == ["report.md"]
    assert (folder / "report.md").read_text() == "the previous report\n"


@pytest.mark.slow
def test_a_linked_report_folder_is_one_line_naming_the_link(store, tmp_path):
    exp = store.new_experiment("linked")
    exp.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="lnk1")
    reports, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    reports.mkdir()
    elsewhere.mkdir()
    (reports / "lnk1").symlink_to(elsewhere)
    line = _one_error_line(_analyze(f"tracking.uri={exp.uri}", "tracking.experiment=linked", f"paths.root={tmp_path}",
                                    f"paths.reports={reports}", "sweep=lnk1", "analysis.bootstrap_resamples=200",
                                    "analysis.plots=false"))
    assert "symbolic link" in line and "remove the link" in line and "out_dir=" in line, line
    assert not any(elsewhere.iterdir())


# -- a sweep killed with SIGKILL: its open runs age into stale ------------------------------------------------


def _killed_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_open_runs_of_a_sweep_whose_process_is_gone_are_stale_not_in_progress(store, tmp_path):
    live = store.client.create_run(store.exp_id, run_name="gone1", tags={
        Tag.KIND: "sweep", Tag.SWEEP_ID: "gone1", Tag.SWEEP_HOST: socket.gethostname(),
        Tag.SWEEP_PID: str(_killed_pid())}).info.run_id  # RUNNING, its process SIGKILLed
    store.add_run("dqn", noisy(50.0, 12, 0.01, 1), sweep_id="gone1", job="0", extra_tags={PARENT: live})
    store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="gone1", job="1", outcome=Outcome.STALE,
                  extra_tags={PARENT: live})
    report, _ = run_analysis(analyze_cfg(store, tmp_path, ["sweep=gone1"]), tmp_path / "r3", log=lambda *_: None)
    row = next(r for r in report["runs"] if r[Tag.JOB] == "1")
    assert row["outcome"] == Outcome.STALE, row
    assert any("sweep process" in n and "is gone" in n for n in row["notes"]), row["notes"]


def test_open_runs_silent_for_longer_than_the_bound_are_stale(store, tmp_path):
    from trainbench.analysis import pipeline
    from trainbench.analysis.runs import load_runs

    live = _parent(store, "silent1", None)  # no process named: a parent written before the tags
    rid = store.add_run("dqn", noisy(50.0, 4, 0.01, 2), sweep_id="silent1", job="1", outcome=Outcome.STALE,
                        extra_tags={PARENT: live})
    recs = load_runs(store.client, [store.client.get_run(rid)], 1)
    later = recs[0].start_time + int((pipeline.IN_PROGRESS_MAX_SILENCE_H + 1) * 3.6e6)
    pipeline.mark_in_progress(store.client, recs, now_ms=later)
    assert recs[0].outcome == Outcome.STALE and any("nothing was logged" in n for n in recs[0].notes)
    fresh = load_runs(store.client, [store.client.get_run(rid)], 1)
    pipeline.mark_in_progress(store.client, fresh, now_ms=fresh[0].start_time + 60_000)
    assert fresh[0].outcome == Outcome.IN_PROGRESS


# -- typos in the plan ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("override", ["decision.plan=[dqn,zzz]", "+decision.model_plans.zzz.epochs=5",
                                      "+decision.target_epochs.zzz=5"])
def test_a_plan_naming_an_unknown_model_is_refused_with_the_known_ones(store, tmp_path, override):
    from trainbench.core.errors import ConfigError

    store.add_run("dqn", noisy(50.0, 30, 0.01, 1), sweep_id="typo1")
    with pytest.raises(ConfigError, match=r"'zzz'.*no registered model.*use one of .*dqn.*ppo"):
        run_analysis(analyze_cfg(store, tmp_path, ["sweep=typo1", override]), tmp_path / "r4", log=lambda *_: None)


def test_a_plan_may_name_a_registered_model_without_runs_or_a_model_with_runs(store, tmp_path):
    store.add_run("mymodel", noisy(50.0, 30, 0.01, 1), sweep_id="typo2")  # not registered, but in the store
    report, _ = run_analysis(analyze_cfg(store, tmp_path, ["sweep=typo2", "decision.plan=[mymodel,tlob]"]),
                             tmp_path / "r5", log=lambda *_: None)
    assert report["coverage"]["measured"] == ["mymodel"] and report["coverage"]["missing"] == ["tlob"]


@pytest.mark.parametrize(("override", "needle"), [
    ("+decision.model_plans.dqn.epochs=1000000000000", "decision.model_plans.dqn.epochs=1000000000000 is invalid"),
    ("+decision.target_epochs.dqn=1000000000000", "decision.target_epochs.dqn=1000000000000 is invalid"),
    ("+decision.estimates.tft.epoch_ms=40", None),
    ("+decision.estimates.tft.target_epochs=1000000000000", "target_epochs=1000000000000 is out of range"),
    ("hardware.power_w=1e300", "hardware.power_w=1e+300 is out of range"),
    ("hardware.price_per_kwh=1e300", "hardware.price_per_kwh=1e+300 is out of range"),
])
def test_plan_epochs_power_and_tariff_have_upper_bounds(store, tmp_path, override, needle):
    from trainbench.core.errors import ConfigError

    if needle is None:
        analyze_cfg(store, tmp_path, [override])  # an ordinary value passes
        return
    extra = ["+decision.estimates.tft.epoch_ms=40"] if "estimates" in override else []
    with pytest.raises(ConfigError, match=re.escape(needle)):
        analyze_cfg(store, tmp_path, [*extra, override])
