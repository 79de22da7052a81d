"""analyze.py's command as a user runs it: one analysis that succeeds, one that must fail cleanly. In this
process (helpers.procs.in_process): the session's default sweep runs analyze.py as a child process."""

from __future__ import annotations

import json

import pytest
from analysis_helpers import noisy

from helpers.procs import REPO, in_process
from trainbench.cli import analyze_command


def _run(*args: str):
    return in_process(analyze_command, list(args), cwd=REPO)


@pytest.mark.slow
def test_cli_writes_the_report_and_fails_cleanly_on_an_unknown_sweep(store, tmp_path):
    exp = store.new_experiment("cli")
    exp.add_run("dqn", noisy(0.149, 60, 0.01, 1), sweep_id="cli-sweep", target_epochs=1000)
    common = [f"tracking.uri={exp.uri}", "tracking.experiment=cli", f"paths.root={tmp_path}",
              "analysis.bootstrap_resamples=200", "hardware=rtx3050ti_4gb"]
    ok = _run(*common)
    assert ok.returncode == 0, ok.stderr
    assert "decision: local_gpu" in ok.stdout and "PARTIAL REPORT" in ok.stdout
    report = json.loads((tmp_path / "reports" / "cli-sweep" / "report.json").read_text())
    assert report["coverage"]["missing"] == ["mamba2", "ppo", "tft", "tlob"]  # the plan: every model, by name
    assert (tmp_path / "reports" / "cli-sweep" / "timeline.png").is_file()

    bad = _run(*common, "sweep=nope")
    assert bad.returncode == 2
    assert "analyze: error: sweep 'nope' has no training runs" in bad.stderr and "cli-sweep" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout
