"""Many jobs writing at once lose nothing: 4 writer processes against one store, every metric counted.

Stores: the embedded SQLite file (created once up front, as the sweep callback does), an `mlflow server`
on SQLite, and an `mlflow server` on PostgreSQL (skipped where no PostgreSQL can be started).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from helpers.procs import child_env
from trainbench.core.vocab import Artifact, Series
from trainbench.tracking.connection import connect

REPO = Path(__file__).resolve().parents[2]
WRITERS, EPOCHS, KEYS = 4, 40, ("loss", Series.GRAD_NORM, Series.EPOCH_TIME_MS, Series.SAMPLES_PER_S, Series.PEAK_HOST_MB, "loss_td")

WORKER = """
import sys
from types import SimpleNamespace
from trainbench.tracking.connection import connect
from trainbench.tracking.writer import RunWriter
uri, exp_name, spool, n, epochs, keys = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]
client, exp = connect(SimpleNamespace(uri=uri, experiment=exp_name, timeout_s=10))
w = RunWriter(client, exp, flush_every=1, spool_dir=spool, spool_wait_s=120)
run_id = w.start(f"writer{n}", {"kind": "train", "model": "dqn", "writer": n}, {f"p{i}": i for i in range(150)})
for step in range(epochs):
    w.log_epoch(step, {k: step + i / 10 for i, k in enumerate(keys)})
w.log_summary({"epoch_time_ms_mean": 1.0})
w.log_text("x" * 1000, "epochs.json")
assert w.end("completed")
print(run_id)
"""


def _hammer(uri: str, experiment: str, tmp: Path) -> None:
    env = child_env()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, uri, experiment, str(tmp / "spool"), str(i), str(EPOCHS),
                               *KEYS], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(WRITERS)]
    for p in procs:
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, err[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert sorted(r.data.tags["writer"] for r in runs) == [str(i) for i in range(WRITERS)]
    for r in runs:
        assert r.info.status == "FINISHED" and len(r.data.params) == 150
        for i, key in enumerate(KEYS):
            hist = client.get_metric_history(r.info.run_id, key)
            assert sorted((m.step, m.value) for m in hist) == [(s, s + i / 10) for s in range(EPOCHS)], key
        assert [a.path for a in client.list_artifacts(r.info.run_id)] == [Artifact.EPOCHS]
    assert not (tmp / "spool").exists() or not any((tmp / "spool").iterdir())


@pytest.mark.slow
def test_concurrent_writers_embedded_sqlite(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    connect(SimpleNamespace(uri=uri, experiment="conc", artifact_location=str(tmp_path / "art"), timeout_s=5))
    _hammer(uri, "conc", tmp_path)


@pytest.mark.slow
def test_concurrent_writers_mlflow_server_sqlite(mlflow_server, tmp_path):
    _hammer(mlflow_server.uri, "conc", tmp_path)


@pytest.mark.slow
def test_concurrent_writers_mlflow_server_postgres(postgres_mlflow_server, tmp_path):
    _hammer(postgres_mlflow_server.uri, "conc", tmp_path)
