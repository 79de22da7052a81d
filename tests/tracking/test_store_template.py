"""A new SQLite store is a copy of the empty store MLflow migrated once (tracking/store_template.py): MLflow opens
it as its own (same schema revision and tables as a store it creates itself, its Default experiment where it
would put it), a damaged template is rebuilt, and without a cache folder MLflow creates the store as before."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from trainbench.tracking import store_template
from trainbench.tracking.connection import connect


def _tracking(db: Path) -> SimpleNamespace:
    return SimpleNamespace(uri=f"sqlite:///{db}", experiment="trainbench", artifact_location=str(db.parent / "art"),
                           timeout_s=30, min_free_mb=0, spool_dir=None)


def _schema(db: Path) -> tuple[str, dict[str, list[str]]]:
    """The schema revision, and each table's and index's definition as its sorted clauses (MLflow's own
    migrations write a table's constraints in an order that changes from one store to the next)."""
    with sqlite3.connect(db) as con:
        head = con.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'index') "
                           "AND name NOT LIKE 'sqlite_%'").fetchall()
    con.close()
    return head, {name: sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()) for name, sql in rows}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def in_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache / "trainbench"


def test_a_new_store_is_the_template_and_mlflow_opens_it_as_a_store_it_made(in_cache, tmp_path, monkeypatch):
    client, exp_id = connect(_tracking(tmp_path / "seeded.db"))
    assert [p.name for p in in_cache.glob("mlflow-*-empty-store.db")]  # the template was made once, here
    # a store MLflow creates on its own (no cache folder): the same schema, revision and experiments
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder.txt"))
    (tmp_path / "not-a-folder.txt").write_text("a file where the cache folder would be")
    plain_client, plain_exp = connect(_tracking(tmp_path / "plain.db"))
    assert _schema(tmp_path / "seeded.db") == _schema(tmp_path / "plain.db")
    assert exp_id == plain_exp == "1"
    default = client.get_experiment("0")
    assert default.name == plain_client.get_experiment("0").name == "Default"
    assert default.artifact_location == plain_client.get_experiment("0").artifact_location  # MLflow's, not the cache's
    # the store works: a run is written and read back
    run = client.create_run(exp_id)
    client.log_metric(run.info.run_id, "loss", 0.5, step=0)
    assert MlflowClient(f"sqlite:///{tmp_path / 'seeded.db'}").get_run(run.info.run_id).data.metrics == {"loss": 0.5}


def test_an_existing_store_is_never_replaced(in_cache, tmp_path):
    db = tmp_path / "mine.db"
    client, exp_id = connect(_tracking(db))
    run_id = client.create_run(exp_id).info.run_id
    assert store_template.seed(db) is False
    assert connect(_tracking(db))[0].get_run(run_id).info.run_id == run_id


def test_a_damaged_or_filled_template_is_rebuilt(in_cache, tmp_path):
    connect(_tracking(tmp_path / "first.db"))
    (template,) = in_cache.glob("mlflow-*-empty-store.db")
    template.write_bytes(b"not a database")
    assert store_template.seed(tmp_path / "second.db")
    assert _schema(tmp_path / "second.db") == _schema(tmp_path / "first.db")
    # a template that holds an experiment (not an empty store) is not copied either
    with sqlite3.connect(template) as con:
        con.execute("INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage) "
                    "VALUES (7, 'stray', '/x', 'active')")
    con.close()
    client, _ = connect(_tracking(tmp_path / "third.db"))
    assert [e.name for e in client.search_experiments()] == ["trainbench", "Default"]
