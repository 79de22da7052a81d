"""Real processes on the machines teams have: a machine busy throughout a sweep, a run without a terminal,
trainer=auto on a CPU (issue 30)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from helpers.procs import REPO, child_env, in_process
from trainbench.cli import analyze_command
from trainbench.core.vocab import DataInfo, Series, Summary, Tag, data_tag

BURN = "import time\nt = time.time() + 600\nwhile time.time() < t: pass\n"  # bounded: ends by itself


def _run(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)  # pipes: no terminal


def _store(tmp_path: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/art",
            f"paths.data_dir={tmp_path}/data"]


@pytest.mark.slow
def test_a_sweep_on_a_machine_busy_throughout_is_measured_and_says_so(tmp_path):
    # half the cores busy: other processes then use >= 50% of the machine's CPU time in every epoch, five times
    # the contamination threshold (measure/load.py), without starving the rest of the suite
    hogs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(max(1, (os.cpu_count() or 2) // 2))]
    try:
        train = _run("run.py", "-m", "model=dqn,ppo", "debug=default", "size=tiny", "trainer.epochs=4",
                     "trainer.warmup_epochs=1", "trainer.latency.samples=2", "trainer.profile_workload=false",
                     "trainer.stop.rel_ci=0", *_store(tmp_path), f"hydra.sweep.dir={tmp_path}/multi")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert train.returncode == 0, train.stderr[-3000:]
    # the analysis of that sweep: analyze.py's command in this process (helpers.procs.in_process)
    common = [*_store(tmp_path)[:1], f"paths.root={tmp_path}", "decision.plan=[dqn,ppo]",
              "analysis.outliers=none", "analysis.bootstrap_resamples=200", "analysis.plots=false"]
    analyse = in_process(analyze_command, [*common, f"out_dir={tmp_path}/auto"], cwd=REPO)
    assert analyse.returncode == 0, analyse.stderr[-3000:]
    (report_path,) = (tmp_path / "auto").rglob("report.json")
    r = json.loads(report_path.read_text())
    assert r["coverage"]["measured"] == ["dqn", "ppo"] and not r["coverage"]["missing"]
    runs = {x.data.tags[Tag.MODEL]: x for x in MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_runs(
        [e.experiment_id for e in MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_experiments()],
        "tags.kind = 'train'")}
    for name in ("dqn", "ppo"):
        m = r["models"][name]
        c = m["contamination"]
        assert m["source"] == "measured" and c["used"] and c["epochs_flagged"] == c[Summary.EPOCHS_MEASURED] == 4, c
        assert c["load"][f"{Series.CPU_OTHER_PCT}_max"] >= 10
        # the run's own summary is the figure the analysis uses (every epoch here), flagged as such
        metrics = runs[name].data.metrics
        assert metrics[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(m[Series.EPOCH_TIME_MS]["mean"], rel=1e-9)
        assert metrics[Summary.CONTAMINATED_USED] == 1.0
    assert r["decision"]["confidence"] == "low" and "busy machine" in r["decision"]["confidence_reasons"][0]
    assert "BUSY MACHINE" in analyse.stdout and "4 of 4 measured epochs were flagged contaminated" in analyse.stdout
    # analysis.contaminated=drop: not timed, and the report says why and what to do (exit 0, as documented)
    drop = in_process(analyze_command, [*common, "analysis.contaminated=drop", f"out_dir={tmp_path}/drop"], cwd=REPO)
    assert drop.returncode == 0, drop.stderr[-3000:]
    (report_path,) = (tmp_path / "drop").rglob("report.json")
    d = json.loads(report_path.read_text())
    assert d["coverage"]["missing"] == ["dqn", "ppo"]
    why = d["models"]["dqn"]["missing_reason"]
    assert why.startswith("measured, but all 4 of 4 measured epochs were flagged contaminated") and "quiet" in why


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU side of trainer=auto")
def test_a_run_without_a_terminal_logs_its_phases_and_bounded_epoch_lines_and_picks_the_cpu_profile(tmp_path):
    p = _run("run.py", "model=tft", "size=tiny", "data.n_bars=2000", "trainer.epochs=6", "trainer.warmup_epochs=1",
             "trainer.progress_every_epochs=2", "trainer.progress_every_s=0", "trainer.latency.samples=2",
             "trainer.stop.rel_ci=0", "trainer.reference_profile.enabled=false", *_store(tmp_path),
             f"hydra.run.dir={tmp_path}/out")  # the reference profile has a test of its own
    assert p.returncode == 0, p.stderr[-3000:]
    log = p.stdout + p.stderr
    assert "trainer=auto: no CUDA GPU (torch.cuda.is_available() is false) -> trainer=cpu" in p.stdout
    assert re.search(r"plan: tft \(size tiny\) on cpu.*trainer profile 'cpu' \(trainer=auto: no CUDA GPU", p.stdout)
    for name in ("data", "data generation", "memory fit", "build", "warmup", "measured epochs", "latency",
                 "workload profile"):
        assert f"phase {name}: started" in log, name
        assert re.search(rf"phase {name}: done (in|after) [0-9]", log), name
    epochs = re.findall(r"tft: epoch (\d+)/7 ", log)
    assert epochs == ["2", "4", "6", "7"]  # every 2 epochs and the last; never one per epoch
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.kind = 'train'")
    assert run.data.params["trainer.profile"] == "cpu"
    assert run.data.params["trainer.profile_reason"].startswith("trainer=auto: no CUDA GPU")
    # and the data of this configuration is its own managed file
    assert re.search(r"6e_ohlcv_1m\.[0-9a-f]{12}\.dbn\.zst", run.data.tags[data_tag(DataInfo.PATH)])
