"""A real `mlflow server` on a free loopback port for the tracking tests (started once, always stopped)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers.servers import MlflowServer, PostgresCluster, postgres_available


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(client, experiment id) of a new sqlite store, one per test module (creating one costs seconds)."""
    from trainbench.tracking.connection import connect

    tmp = tmp_path_factory.mktemp("mlruns")
    return connect(SimpleNamespace(uri=f"sqlite:///{tmp}/mlflow.db", experiment="t",
                                   artifact_location=str(tmp / "artifacts"), timeout_s=2))


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    server = MlflowServer(f"sqlite:///{root}/server.db", root / "artifacts", root / "server.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_mlflow_server(tmp_path_factory):
    """An mlflow server whose backend store is a throwaway PostgreSQL cluster; skipped where none can run."""
    reason = postgres_available()
    if reason:
        pytest.skip(f"PostgreSQL variant skipped: {reason}")
    root = tmp_path_factory.mktemp("mlflow-pg")
    pg = PostgresCluster().start()
    server = MlflowServer(pg.uri(), root / "artifacts", root / "server.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()
        pg.stop()


@pytest.fixture(scope="session")
def native_sweep(tmp_path_factory):
    """A short `run.py -m model=dqn,ppo` sweep and its analysis, in a store of its own (written once)."""
    import subprocess
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from mlflow import MlflowClient

    repo = Path(__file__).resolve().parents[2]
    root = tmp_path_factory.mktemp("native-sweep")
    uri = f"sqlite:///{root}/mlflow.db"
    p = subprocess.run([sys.executable, "run.py", "-m", "model=dqn,ppo", "debug=default", "trainer.epochs=2",
                        "trainer.warmup_epochs=0", "trainer.latency.samples=1", f"tracking.uri={uri}",
                        f"tracking.artifact_location={root}/artifacts", f"paths.data_dir={root}/data",
                        f"hydra.sweep.dir={root}/multi"], cwd=repo, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    a = subprocess.run([sys.executable, "analyze.py", f"tracking.uri={uri}", f"out_dir={root}/report",
                        "analysis.bootstrap_resamples=200",
                        "analysis.plots=false"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert a.returncode == 0, a.stdout[-2000:] + a.stderr[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trainbench")
    return SimpleNamespace(root=root, uri=uri, client=client, exp=exp, stdout=p.stdout,
                           # the configuration's own managed file (data/loader.py)
                           data_file=next((root / "data" / "debug").glob("6e_ohlcv_1m.*.dbn.zst")))
