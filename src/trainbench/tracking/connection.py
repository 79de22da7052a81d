"""Connecting to the MLflow tracking store: reachability, lock contention, the experiment, clear errors.

A tracking server is checked with ``GET /health`` before anything is written (failing fast, with the fix,
when it does not answer); an embedded SQLite store is checked to be writable, healthy and on a disk with
room, and is created or upgraded by one process at a time. Calls that meet another job's lock are retried
(:func:`retry`); :func:`is_transient` tells an outage (the writer spools) from a bad request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlflow.tracking import MlflowClient

from trainbench.core.errors import StoreProblem, TrackingUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


def resolve_uri(tracking: Any) -> str:
    uri = tracking.uri
    if not uri:
        raise TrackingUnavailable("tracking.uri is empty: use tracking=local (sqlite under mlruns/) or set "
                                  "tracking.uri=http://host:port for a tracking server.")
    return str(uri)


def check_reachable(uri: str, timeout_s: float = 10.0) -> None:
    """Fail fast, with the fix, when a tracking server does not answer; create a local store's folder."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 (user-given server)
                if r.status != 200:
                    raise TrackingUnavailable(f"tracking server {uri} answered /health with HTTP {r.status}.")
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise TrackingUnavailable(
                f"cannot reach the MLflow tracking server at {uri} ({reason}). Start it with `make server`, "
                f"check tracking.uri, or record locally with tracking=local.") from None
    elif uri.startswith("sqlite:///"):
        try:
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackingUnavailable(f"cannot create the folder of the MLflow store {uri} ({e.strerror or e}), "
                                      f"so it is not writable: point tracking.uri at a writable folder.") from None


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
    """The experiment's id, created if needed; safe when several jobs race to create it."""
    exp = retry(lambda: client.get_experiment_by_name(name), "get_experiment")
    if exp is not None:
        check_active(exp, str(client.tracking_uri))
        return exp.experiment_id
    try:
        loc = None
        if artifact_location:
            Path(artifact_location).mkdir(parents=True, exist_ok=True)
            loc = Path(artifact_location).resolve().as_uri()
        return client.create_experiment(name, artifact_location=loc)
    except Exception:
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def check_active(exp: Any, uri: str) -> None:
    """A deleted experiment (in MLflow's trash) takes no runs: say so and how to restore it."""
    if getattr(exp, "lifecycle_stage", "active") == "deleted":
        raise TrackingUnavailable(
            f"experiment {exp.name!r} (id {exp.experiment_id}) in {uri} was deleted. Restore it with "
            f"`mlflow experiments restore --experiment-id {exp.experiment_id}` (MLFLOW_TRACKING_URI={uri}), or "
            f"use another name with tracking.experiment=<name> (`mlflow gc` removes a deleted one for good).")


def connect(tracking: Any) -> tuple[MlflowClient, str]:
    """(client, experiment_id) for a tracking config; raises :class:`TrackingUnavailable` with the fix."""
    uri = resolve_uri(tracking)
    check_reachable(uri, float(getattr(tracking, "timeout_s", 10.0)))
    if uri.startswith(("http://", "https://")):
        # MLflow's REST client retries a dead server for minutes by default (7 retries, backoff 2 s);
        # the writer spools instead, so fail a request within seconds. A user's own settings win.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(10, int(3 * float(
            getattr(tracking, "timeout_s", 10.0))))))
    try:
        with prepare_local_store(uri, tracking):
            client = MlflowClient(tracking_uri=uri)
            exp_id = ensure_experiment(client, tracking.experiment,
                                       artifact_location_for(uri, getattr(tracking, "artifact_location", None)))
            _mark_experiment(client, exp_id)
    except TrackingUnavailable:
        raise
    except Exception as e:
        raise TrackingUnavailable(store_error_message(uri, e)) from None
    return client, exp_id


def _mark_experiment(client: MlflowClient, exp_id: str) -> None:
    """Tag the experiment as model training (MLflow's UI then opens on its runs; tracking/native.py)."""
    from trainbench.tracking.native import mark_training_experiment

    try:
        retry(lambda: mark_training_experiment(client, exp_id), "set_experiment_tag")
    except Exception as e:  # noqa: BLE001 - a missing UI hint must not stop a run
        log.warning("could not tag experiment %s as model training for the MLflow UI: %s", exp_id, e)


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
    from trainbench.tracking import store

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
            store.check_sqlite_health(path)
            yield
    except StoreProblem as e:
        raise TrackingUnavailable(str(e)) from None


def store_error_message(uri: str, e: BaseException) -> str:
    """One line naming what is wrong with the store and the fix (not SQLAlchemy's notes)."""
    from trainbench.tracking.store import is_disk_full

    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    if is_disk_full(e):
        return f"the disk holding the MLflow store {uri} is full: free space there, then run again."
    low = str(e).lower()
    if "readonly database" in low or "read-only file system" in low:
        return (f"the MLflow store {uri} is read-only: fix its permissions or point tracking.uri at a writable "
                f"store.")
    if "file is not a database" in low or "malformed" in low:
        return (f"the MLflow store {uri} is damaged ({text}): move it aside and point tracking.uri at a new "
                f"file (its runs are lost unless you have a backup).")
    return f"cannot open the MLflow store {uri}: {text}. Check tracking.uri (the embedded store is tracking=local)."
