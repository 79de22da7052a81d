"""Connecting to the MLflow tracking store: reachability, lock contention, the experiment, clear errors.

:func:`connect` is the one way in, for a run, a sweep and the analysis (:func:`open_store`, its first
half, for the rerun); the tracking config's ``timeout_s`` bounds every wait on a server. A tracking
server is checked with ``GET /health`` before anything is written (failing fast, with the fix, when it
does not answer); an embedded SQLite store is checked to be writable, healthy and on a disk with room,
and is created or upgraded by one process at a time. A reader (``create=False``) creates nothing: a
missing store or experiment is an error. Calls that meet another job's lock are retried (:func:`retry`);
:func:`is_transient` tells an outage (the writer spools) from a bad request.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from mlflow.tracking import MlflowClient

from trainbench.core.errors import ExperimentNotFound, StoreProblem, TrackingUnavailable
from trainbench.tracking.conventions import TRAINING_EXPERIMENT_TAGS, mark_training_experiment
from trainbench.tracking.store import check_exists

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long to wait for a tracking server when the tracking config does not say (``tracking.timeout_s``).
DEFAULT_TIMEOUT_S = 10.0


def timeout_of(tracking: Any) -> float:
    """The seconds a tracking config allows a server to answer (``tracking.timeout_s``)."""
    return float(getattr(tracking, "timeout_s", None) or DEFAULT_TIMEOUT_S)


def resolve_uri(tracking: Any) -> str:
    uri = tracking.uri
    if not uri:
        raise TrackingUnavailable("tracking.uri is empty: use tracking=local (sqlite under mlruns/) or set "
                                  "tracking.uri=http://host:port for a tracking server.")
    return str(uri)


def check_reachable(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Fail fast, with the fix, when a tracking server does not answer; create a local store's folder.

    A server that answers ``/health`` with a client error (a proxy without that route) is reachable; one
    that answers with a server error (a proxy whose backend is down) is not."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):  # noqa: S310 (user-given server)
                pass
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise TrackingUnavailable(f"the MLflow tracking server at {uri} answered /health with HTTP "
                                          f"{e.code}: check the server (its log) and tracking.uri.") from None
        except (urllib.error.URLError, OSError, TimeoutError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise TrackingUnavailable(
                f"cannot reach the MLflow tracking server at {uri}: it did not answer within {timeout_s:g} s "
                f"({reason}). Start it with `make server`, check tracking.uri, or use tracking=local.") from None
    elif uri.startswith("sqlite:///"):
        try:
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackingUnavailable(f"cannot create the folder of the MLflow store {uri} ({e.strerror or e}), "
                                      f"so it is not writable: point tracking.uri at a writable folder.") from None


#: Database servers an MLflow store may live on (SQLAlchemy dialects), with their default ports.
DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def store_lost_message(e: BaseException, uri: str, doing: str = "the analysis") -> str | None:
    """One line for a store that stopped answering in the middle of ``doing`` (a server that died, a
    database that went away), or None when ``e`` is not such an outage (a bug keeps its traceback)."""
    if not is_transient(e):
        return None
    from trainbench.tracking.store import is_locked, locked_message, sqlite_path

    if is_locked(e) and sqlite_path(uri) is not None:
        return f"{locked_message(sqlite_path(uri))} ({doing} stopped there)"
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cause = text.rsplit("(Caused by ", 1)[-1].rstrip(")") if "(Caused by " in text else text
    return (f"the MLflow store {uri} stopped answering during {doing} ({cause[:200]}). Nothing more was "
            f"logged to it; check the server (its log) or tracking.uri, then run again.")


def check_database_server(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Fail within ``timeout_s``, with the fix, when the database server of a SQLAlchemy store
    (``postgresql+psycopg2://user@host:port/db``, MySQL, SQL Server) does not accept a connection.

    MLflow retries creating its engine ten times with a growing back-off (more than 100 s) and libpq waits
    for ever by default; this opens one TCP connection to the server first, and bounds libpq's own connect
    (``PGCONNECT_TIMEOUT``, unless the user set it) by the same timeout. The message names the host and
    port only, never the user or password of the URI. A store reached through a Unix socket (no host) is
    left to the driver."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    dialect = scheme.split("+", 1)[0]
    if dialect not in DATABASE_PORTS:
        return
    try:
        parts = urllib.parse.urlsplit(uri)
        host, port = parts.hostname, parts.port or DATABASE_PORTS[dialect]
    except ValueError as e:
        raise TrackingUnavailable(f"tracking.uri is not a valid {dialect} URL ({e}): write it as "
                                  f"{scheme}://<user>@<host>:<port>/<database>.") from None
    if dialect == "postgresql":
        os.environ.setdefault("PGCONNECT_TIMEOUT", str(max(2, math.ceil(timeout_s))))
    if not host:
        return
    where = f"{dialect} store at {host}:{port}/{parts.path.lstrip('/')}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        reason = "no answer" if isinstance(e, TimeoutError | socket.timeout) else (e.strerror or str(e))
        raise TrackingUnavailable(
            f"cannot reach the MLflow {where}: it did not accept a connection within {timeout_s:g} s "
            f"({reason}). Start the database server, check tracking.uri (host and port), or use "
            f"tracking=local.") from None


#: What a store says when a concurrent writer holds it: SQLite's lock (MLflow wraps sqlite3's
#: OperationalError "database is locked" in an MlflowException TEMPORARILY_UNAVAILABLE after its own
#: 20 s busy timeout) and PostgreSQL's deadlock / serialization failures.
_CONTENTION = ("database is locked", "database table is locked", "database is busy", "sqlite_busy",
               "deadlock detected", "could not serialize")
#: What an unreachable or overloaded tracking server looks like through MLflow's REST client.
_UNREACHABLE = ("max retries exceeded", "failed with exception", "connection refused", "connection aborted",
                "connection reset", "remote end closed", "timed out", "temporarily unavailable",
                "service unavailable", "bad gateway", "gateway timeout")


def is_contention(e: BaseException) -> bool:
    msg = str(e).lower()
    return any(s in msg for s in _CONTENTION)


def is_transient(e: BaseException) -> bool:
    """A failure to reach the store that may pass (server down, overloaded, locked), not a bad request."""
    import requests

    from trainbench.tracking.store import is_disk_full

    if is_disk_full(e):  # MLflow calls SQLite's "disk is full" TEMPORARILY_UNAVAILABLE: it is not an outage
        return False
    if isinstance(e, requests.exceptions.ConnectionError | requests.exceptions.Timeout | ConnectionError
                  | TimeoutError):
        return True
    if is_contention(e) or any(s in str(e).lower() for s in _UNREACHABLE):
        return True
    return getattr(e, "error_code", None) in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED")


def retry(fn: Callable[[], T], what: str, attempts: int = 8, base_delay: float = 0.05) -> T:
    """Retry ``fn`` while the store reports a lock or deadlock held by a concurrent job."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:
            if not is_contention(e) or i == attempts - 1:
                raise
            time.sleep(base_delay * 2**i)
            log.debug("retrying %s after lock contention (%s)", what, e)
    raise AssertionError("unreachable")


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The experiment's id, created if needed; safe when several jobs race to create it.

    The experiment is marked as model training (tracking/conventions.py) as it is created, or once when
    found without a kind (made by hand or by an older trainbench); a kind already there is kept."""
    exp = retry(lambda: client.get_experiment_by_name(name), "get_experiment")
    if exp is not None:
        check_active(exp, str(client.tracking_uri))
        _mark_training(client, exp)
        return exp.experiment_id
    try:
        loc = None
        if artifact_location:
            Path(artifact_location).mkdir(parents=True, exist_ok=True)
            loc = Path(artifact_location).resolve().as_uri()
        return client.create_experiment(name, artifact_location=loc, tags=dict(TRAINING_EXPERIMENT_TAGS))
    except Exception:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def _mark_training(client: MlflowClient, exp: Any) -> None:
    try:
        retry(lambda: mark_training_experiment(client, exp), "set_experiment_tag")
    except Exception as e:  # noqa: BLE001 - a missing UI hint must not stop a run
        log.warning("could not tag experiment %s as model training for the MLflow UI: %s", exp.experiment_id, e)


def find_experiment(client: MlflowClient, name: str) -> str:
    """The id of an existing, active experiment (a reader's: nothing is created or tagged)."""
    uri = str(client.tracking_uri)
    exp = retry(lambda: client.get_experiment_by_name(name), "get_experiment")
    if exp is None:
        raise ExperimentNotFound(f"experiment {name!r} does not exist at {uri}")
    check_active(exp, uri)
    return exp.experiment_id


def check_active(exp: Any, uri: str) -> None:
    """A deleted experiment (in MLflow's trash) takes no runs: say so and how to restore it."""
    if getattr(exp, "lifecycle_stage", "active") == "deleted":
        raise TrackingUnavailable(
            f"experiment {exp.name!r} (id {exp.experiment_id}) in {uri} was deleted. Restore it with "
            f"`mlflow experiments restore --experiment-id {exp.experiment_id}` (MLFLOW_TRACKING_URI={uri}), or "
            f"use another name with tracking.experiment=<name> (`mlflow gc` removes a deleted one for good).")


def connect(tracking: Any, *, create: bool = True, uri: str | None = None) -> tuple[MlflowClient, str]:
    """(client, experiment_id) for a tracking config; raises :class:`TrackingUnavailable` with the fix.

    ``create``: a run or a sweep creates the store and the experiment when missing; a reader (the
    analysis) gets :class:`StoreNotFound` / :class:`ExperimentNotFound` instead. ``uri``: the store when
    the caller resolved it by a rule of its own (default ``tracking.uri``)."""
    uri = str(uri or resolve_uri(tracking))
    with _opened(tracking, uri, create) as client:
        if create:
            exp_id = ensure_experiment(client, tracking.experiment,
                                       artifact_location_for(uri, getattr(tracking, "artifact_location", None)))
        else:
            exp_id = find_experiment(client, tracking.experiment)
    return client, exp_id


def open_store(tracking: Any, *, uri: str | None = None) -> MlflowClient:
    """A reader's client of an existing store, checked as :func:`connect` checks it, without the experiment
    (the rerun reads a run by its id, in whichever experiment it is)."""
    with _opened(tracking, str(uri or resolve_uri(tracking)), create=False) as client:
        return client


@contextlib.contextmanager
def _opened(tracking: Any, uri: str, create: bool) -> Iterator[MlflowClient]:
    """The checked store's client, for the body's first calls (which open, create or upgrade the store):
    every failure in it comes out as one :class:`TrackingUnavailable` naming the store and the fix."""
    timeout_s = timeout_of(tracking)
    quiet_sqlalchemy_deprecations()
    new_store = check_new_store(uri) if create else None
    if not create:
        check_exists(uri)
    check_reachable(uri, timeout_s)
    check_database_server(uri, timeout_s)
    if uri.startswith(("http://", "https://")):
        # MLflow's REST client retries a dead server for minutes by default (7 retries, backoff 2 s);
        # the writer spools instead, so fail a request within seconds. A user's own settings win.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(10, int(3 * timeout_s))))
        # urllib3 logs each retry of a dead server as a warning: the failure is reported once, by the caller
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    try:
        with prepare_local_store(uri, tracking) if create else check_local_store(uri, timeout_s):
            yield MlflowClient(tracking_uri=uri)
    except TrackingUnavailable:
        raise
    except Exception as e:
        raise TrackingUnavailable(store_error_message(uri, e, "open" if create else "read")) from None
    if new_store is not None and new_store.is_file():
        log.info("created a new MLflow store %s: no store was there (tracking.uri=%s; if you meant an existing "
                 "store, check the path: sqlite:////abs/path.db has four slashes, sqlite:///rel/path.db three)",
                 new_store.absolute(), uri)


def quiet_sqlalchemy_deprecations() -> None:
    """MLflow's SQLAlchemy store sets up its mappings with options SQLAlchemy 2 deprecates (``noload``): the
    warnings are MLflow's to fix, say nothing to the user, and printed before a command's own first line. Only
    SQLAlchemy's deprecation warnings raised in MLflow's modules are dropped."""
    import warnings

    try:
        from sqlalchemy.exc import SADeprecationWarning
    except ImportError:  # no SQLAlchemy: no database store either
        return
    warnings.filterwarnings("ignore", category=SADeprecationWarning, module=r"mlflow(\.|$)")


def check_new_store(uri: str) -> Path | None:
    """The file of a SQLite store a writer is about to create (None when it exists, or for other stores).

    MLflow creates a missing SQLite file, and trainbench its folder, so a mistyped ``tracking.uri`` would
    silently start an empty store somewhere. The rule: a new store's own folder may be created (the
    embedded store's ``mlruns/`` in a fresh checkout, ``sqlite:///<existing folder>/runs/mlflow.db``), and the
    writer says that it created a new store once it did (:func:`_opened`); a store whose folder's parent does
    not exist either is refused with the fix (a path that names no place on this machine is a typo, most
    often three slashes meant as an absolute path: ``sqlite:///home/me/mlflow.db`` is relative)."""
    from trainbench.tracking.store import sqlite_path

    path = sqlite_path(uri)
    if path is None or path.exists():
        return None
    folder = path.absolute().parent
    if not folder.exists() and not folder.parent.exists():
        hint = (f" (sqlite:/// with three slashes is a path relative to the working folder {Path.cwd()}; an "
                f"absolute path has four: sqlite:////{str(path).lstrip('/')})") if not path.is_absolute() else ""
        raise TrackingUnavailable(
            f"tracking.uri={uri} names a new MLflow store in {folder}, and neither that folder nor its parent "
            f"exists{hint}: a mistyped path would start an empty store there. Correct tracking.uri, or create "
            f"the folder first (mkdir -p {folder}) to start a new store in it.")
    return path


def artifact_location_for(uri: str, configured: str | None) -> str | None:
    """The artifact location of a new experiment, decided by the tracking URI (not the config group): a
    tracking server proxies artifacts (`mlflow-artifacts:`), so a local folder configured for the embedded
    store is not used with an http(s) URI; a remote URI (s3://, gs://, ...) is kept."""
    if configured and uri.startswith(("http://", "https://")) and "://" not in str(configured) \
            and not str(configured).startswith("mlflow-artifacts:"):
        log.debug("tracking.uri %s is a server: artifacts go through it, not to %s", uri, configured)
        return None
    return configured


@contextlib.contextmanager
def prepare_local_store(uri: str, tracking: Any) -> Any:
    """Checks before opening a store on this machine, then hold the store's lock while it is opened.

    An embedded SQLite store must be writable (else fail now, not after minutes of retries), not left
    half-migrated, and is created or upgraded by one process at a time (``<store>.lock``). The folders the
    run writes to (store, spool) need ``tracking.min_free_mb`` free."""
    from trainbench.tracking import store, store_template

    store.quiet_disk_full_logs()
    path = store.sqlite_path(uri)
    folders = [Path(p) for p in (getattr(tracking, "spool_dir", None),) if p]
    try:
        if path is not None:
            store.check_sqlite_writable(path)
            folders.insert(0, path.parent)
        store.check_free_space(folders, float(getattr(tracking, "min_free_mb", 0) or 0))
        if path is None:
            yield
            return
        with store.sqlite_lock(path):
            store_template.seed(path)  # a new store: a copy of an empty one, not MLflow's 60 migrations again
            store.check_sqlite_health(path, timeout_of(tracking))
            yield
    except StoreProblem as e:
        raise TrackingUnavailable(str(e)) from None


@contextlib.contextmanager
def check_local_store(uri: str, wait_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """A reader's check of an embedded SQLite store: finished (a store another process is creating is waited
    for, under its lock), healthy (not left half-migrated, not locked by another process for ``wait_s``); no
    writes."""
    from trainbench.tracking import store

    path = store.sqlite_path(uri)
    if path is not None:
        try:
            store.wait_for_creation(path)
            store.check_sqlite_health(path, wait_s)
        except store.StoreProblem as e:
            raise TrackingUnavailable(str(e)) from None
    yield


def store_error_message(uri: str, e: BaseException, action: str = "open") -> str:
    """One line naming what is wrong with the store and the fix (not SQLAlchemy's notes); ``action`` is what
    could not be done (open, read)."""
    from trainbench.tracking.store import is_disk_full, is_locked, locked_message, sqlite_path

    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    if is_disk_full(e):
        return f"the disk holding the MLflow store {uri} is full: free space there, then run again."
    if is_locked(e) and sqlite_path(uri) is not None:
        return locked_message(sqlite_path(uri))  # not damaged: another process writes to it
    low = str(e).lower()
    if "readonly database" in low or "read-only file system" in low:
        return (f"the MLflow store {uri} is read-only: fix its permissions or point tracking.uri at a writable "
                f"store.")
    if "file is not a database" in low or "malformed" in low:
        return (f"the MLflow store {uri} is damaged ({text}): move it aside and point tracking.uri at a new "
                f"file (its runs are lost unless you have a backup).")
    return f"cannot {action} the MLflow store {uri}: {text}. Check tracking.uri (the embedded store is tracking=local)."
