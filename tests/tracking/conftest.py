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
