"""A new embedded SQLite store starts as a copy of an empty one MLflow made, not by replaying every migration.

MLflow creates a SQLite store by creating its first tables and then applying each schema migration in turn
(about 60 with MLflow 3, most of them SQLite "batch" table copies): about 2 s of CPU for every new store,
the same work every time. :func:`seed` does it once per MLflow version on this machine: MLflow creates and
migrates a store in the user's cache folder (``$XDG_CACHE_HOME/trainbench``, else ``~/.cache/trainbench``),
its Default experiment is removed (MLflow makes that one itself, with the artifact location of the store it
is opened as), and each new store is a copy of that file. MLflow then opens the copy as any existing store:
it checks that the schema is at its own head revision and adds the Default experiment.

Anything that stops the copy (no cache folder, a damaged template, a full disk) leaves the store to MLflow,
which creates it the usual way; the template is rebuilt when its MLflow version's file is missing or unreadable.
The caller holds the store's lock (:func:`trainbench.tracking.store.sqlite_lock`), so no other process sees a
half-copied file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

#: The tables MLflow's template may hold rows in: its schema revision and its default workspace (both
#: written by the migrations). Anything else in the template means it is not an empty store.
TEMPLATE_ROWS = frozenset({"alembic_version", "workspaces", "sqlite_sequence"})


def cache_folder() -> Path:
    """Where trainbench keeps per-machine caches: ``$XDG_CACHE_HOME/trainbench`` (else ``~/.cache/trainbench``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainbench"


def seed(path: Path) -> bool:
    """Create the missing SQLite store ``path`` as a copy of the empty-store template; False (nothing
    written) when the template cannot be had, and MLflow creates the store itself."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.seed")
    try:
        shutil.copyfile(_template(), tmp)
        os.replace(tmp, path)
    except Exception as e:  # noqa: BLE001 - a template is only a shortcut: MLflow creates the store instead
        log.debug("no store template (%s): MLflow creates %s itself", e, path)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def _template() -> Path:
    """The empty store for the installed MLflow version, made once (under a lock) in :func:`cache_folder`."""
    import mlflow
    from filelock import FileLock

    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / f"mlflow-{mlflow.__version__}-empty-store.db"
    with FileLock(str(template) + ".lock", timeout=120):
        if template.is_file() and _is_empty_store(template):
            return template
        fd, name = tempfile.mkstemp(prefix=".building-", suffix=".db", dir=folder)
        os.close(fd)
        os.unlink(name)
        try:
            _build(Path(name))
            os.replace(name, template)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)
    return template


def _build(path: Path) -> None:
    """MLflow creates and migrates a store at ``path``; its Default experiment is taken out again."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(f"sqlite:///{path}", str(path.parent / "artifacts-unused"))
    store.engine.dispose()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM experiments WHERE experiment_id = ?", (int(SqlAlchemyStore.DEFAULT_EXPERIMENT_ID),))
    db.close()
    if not _is_empty_store(path):
        raise RuntimeError(f"MLflow's new store {path} holds rows beyond its schema revision")


def _is_empty_store(path: Path) -> bool:
    """A migrated MLflow store with no experiment, run or other row than :data:`TEMPLATE_ROWS`."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if "alembic_version" not in tables or "experiments" not in tables:
                return False
            filled = {t for t in tables if db.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()}
        db.close()
    except sqlite3.Error:
        return False
    return filled <= TEMPLATE_ROWS and "alembic_version" in filled

