"""Data parallelism end to end (docs/distributed.md): `python run.py trainer.distributed.nproc=2` as a user runs
it, two gloo ranks started the torchrun way on this CPU, one MLflow run written by rank 0 (its params, the
slowest rank's epochs, each rank's epoch times); one rank killed mid-run: the job ends failed or interrupted
with what was measured, and no rank is left running. (tests/measure/test_distributed.py checks the losses.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from helpers.procs import REPO, child_env
from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Tag

#: A tiny TFT at a global batch of 64, no dropout (so that the ranks' shares reproduce one process's steps).
TFT = ["model=tft", "size=tiny", "model.dropout=0", "model.batch_size=64", "data.n_bars=1500"]


def _cmd(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "run.py", "debug=default", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
            f"tracking.artifact_location={tmp_path}/artifacts", f"paths.data_dir={tmp_path}/data",
            f"hydra.run.dir={tmp_path}/out", *args]


def _runs(tmp_path: Path) -> tuple[MlflowClient, list]:
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    return client, client.search_runs([exp.experiment_id], "tags.kind = 'train'")


def _history(client: MlflowClient, run_id: str, key: str) -> list[float]:
    return [h.value for h in sorted(client.get_metric_history(run_id, key), key=lambda h: h.step)]


def _rank_processes(parent: psutil.Process) -> dict[int, psutil.Process]:
    out = {}
    for child in parent.children(recursive=True):
        try:
            env = child.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "RANK" in env and "trainbench.ranks" in " ".join(child.cmdline()):
            out[int(env["RANK"])] = child
    return out


@pytest.mark.slow
def test_a_killed_rank_ends_the_job_with_what_was_measured_and_no_rank_left(tmp_path):
    proc = subprocess.Popen(_cmd(tmp_path, *TFT, "trainer.distributed.nproc=2", "trainer.epochs=200",
                                 "trainer.flush_every=1", "trainer.flush_min_interval_s=0",
                                 "trainer.progress_every_epochs=1"),
                            cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    parent = psutil.Process(proc.pid)
    ranks: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until rank 0 has logged its second measured epoch
            if len(ranks) < 2:
                ranks = _rank_processes(parent)
            if len(ranks) == 2 and any("(measured 2/" in line for line in list(lines)):
                break
            if proc.poll() is not None:
                pytest.fail("the job ended before a rank was killed:\n" + "".join(lines)[-3000:])
            time.sleep(0.3)
        else:
            pytest.fail("the two ranks did not measure two epochs within 180 s")
        ranks[1].send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    (tmp_path / "out.txt").write_text(out)
    assert proc.returncode != 0, out[-3000:]
    for r in ranks.values():  # torchrun's agent left no rank running
        assert not r.is_running() or r.status() == psutil.STATUS_ZOMBIE
    client, runs = _runs(tmp_path)
    assert len(runs) == 1  # rank 1 never created a run
    run = runs[0]
    params, tags, rid = run.data.params, run.data.tags, run.info.run_id
    assert tags[Tag.OUTCOME] in (Outcome.FAILED, Outcome.INTERRUPTED), tags
    assert run.info.status in ("FAILED", "KILLED")
    assert "rank 1 killed by SIGKILL" in out, out[-3000:]
    assert (params[ParamKey.WORLD_SIZE], params[ParamKey.DIST_BACKEND]) == ("2", "gloo")
    assert (params[ParamKey.BATCH_SIZE_PER_RANK], params[ParamKey.GLOBAL_BATCH_SIZE]) == ("32", "64")
    assert "2 ranks (gloo)" in tags[Tag.DIST_NOTE] and "latency" in tags[Tag.DIST_NOTE]
    # what was measured stays: the epochs (the slowest rank's) and each rank's own epoch times
    epochs = _history(client, rid, Series.EPOCH_TIME_MS)
    assert len(epochs) >= 3
    per_rank = json.loads(Path(client.download_artifacts(rid, Artifact.RANK_EPOCH_MS, str(tmp_path))).read_text())
    assert per_rank[ParamKey.WORLD_SIZE] == 2 and len(per_rank["ranks"]) == 2
    done = min(len(r) for r in per_rank["ranks"])
    assert done >= 3 and epochs[:done] == [max(a, b) for a, b in zip(*per_rank["ranks"], strict=False)][:done]
    comm = _history(client, rid, Series.COMM_EXPOSED_MS)
    assert all(0 <= c <= e for c, e in zip(comm, epochs, strict=False))
