"""Reading what runs wrote to an MLflow store, with MLflow's client."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from mlflow.tracking import MlflowClient

from trainbench.tracking.connection import check_local_store, connect


def scratch_store(root: Path, experiment: str = "trainbench", timeout_s: float = 5.0) -> SimpleNamespace:
    """A new SQLite store under ``root`` and its experiment: ``root``, ``tracking`` (the config a run would
    pass), ``client``, ``exp_id``. Creating one costs seconds: make it once per test module."""
    tracking = SimpleNamespace(uri=f"sqlite:///{root}/mlflow.db", experiment=experiment,
                               artifact_location=str(Path(root) / "artifacts"), timeout_s=timeout_s)
    client, exp_id = connect(tracking)
    return SimpleNamespace(root=Path(root), tracking=tracking, client=client, exp_id=exp_id)


def store_ready(db: Path) -> bool:
    """True once the SQLite store ``db`` that another process (a sweep under test) creates is there and
    finished, so that a test's client can read it: MLflow's client would otherwise create the half-made
    store's tables a second time and leave it half-migrated. Waits, as the analysis does, while the creating
    process holds the store's lock."""
    if not db.exists():
        return False
    with check_local_store(f"sqlite:///{db}"):
        return True


def ready_client(db: Path) -> MlflowClient | None:
    """MLflow's client of the SQLite store ``db`` once another process (a sweep under test) has created it
    (:func:`store_ready`); None before. A test watching a sweep must never construct ``MlflowClient`` on a
    store the sweep may be creating: the constructor creates and migrates the store's tables itself, at once,
    and the sweep then finds a migration in progress (CI's scancel test lost its sweep to this)."""
    return MlflowClient(f"sqlite:///{db}") if store_ready(db) else None


def train_runs(client: MlflowClient, experiment: str = "trainbench") -> list:
    """Every train run (``tags.kind = 'train'``) of ``experiment``; none when the experiment does not exist."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], "tags.kind = 'train'", max_results=1000)


def metric_steps(client: MlflowClient, run_id: str, key: str = "loss") -> list[int]:
    """The sorted steps at which ``run_id`` logged ``key``."""
    return sorted(m.step for m in client.get_metric_history(run_id, key))
