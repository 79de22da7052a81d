"""Writes one MLflow run per job, exactly in the run contract of DESIGN.md.

Per-epoch metrics are buffered and sent with ``log_batch`` (one request per flush, never one call per
metric per epoch), every ``flush_every`` epochs and at the end, always outside the timed region. Calls
to an embedded SQLite store are retried when another job holds its lock.

When the store cannot be reached mid-run (a tracking server restarted or gone), the writer keeps the
run going: every write from then on goes, in order, to a local spool (``tracking/spool.py``), which is
sent when the store answers again (checked every ``resend_every_s`` at a flush) or at the end; what
cannot be sent by then stays on disk for ``trainbench sync``. Secrets (values of environment variables
named *KEY*, *TOKEN*, *SECRET*, *PASSWORD*) are removed from everything written (``tracking/secrets.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Run status per outcome (DESIGN.md rule 5).
STATUS = {"completed": "FINISHED", "oom": "FAILED", "diverged": "FAILED", "failed": "FAILED",
          "interrupted": "KILLED", "disk_full": "FAILED"}
_MAX_PARAM_LEN = 6000
_BATCH = 100  # MLflow's log_batch limit for params and tags per request


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written; the message names the URI and the fix."""


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
    except store.StoreProblem as e:
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


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> dotted keys with string values (lists as JSON), as MLflow params."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            s = json.dumps(v) if isinstance(v, list | tuple) else str(v)
            out[key] = s[:_MAX_PARAM_LEN]
    return out


def apply_op(client: MlflowClient, run_id: str, op: Mapping[str, Any]) -> None:
    """Perform one write (the unit the spool stores) against the store."""
    kind = op["op"]
    if kind == "log_batch":
        client.log_batch(run_id, metrics=[Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in
                                          op.get("metrics", [])],
                         params=[Param(k, v) for k, v in op.get("params", [])],
                         tags=[RunTag(k, v) for k, v in op.get("tags", [])])
    elif kind == "log_text":
        client.log_text(run_id, op["text"], op["artifact_file"])
    elif kind == "log_dict":
        client.log_dict(run_id, op["obj"], op["artifact_file"])
    elif kind == "log_artifact":
        client.log_artifact(run_id, op["path"], op.get("artifact_path"))
    elif kind == "log_inputs":
        from trainbench.tracking.native import log_inputs

        log_inputs(client, run_id, op["datasets"], op["context"])
    elif kind == "set_terminated":
        client.set_terminated(run_id, status=op["status"], end_time=op.get("end_time"))
    else:
        raise ValueError(f"unknown tracking write {kind!r}")


def _redact_obj(obj: Any, secrets: list[str]) -> Any:
    from trainbench.tracking.secrets import redact

    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, Mapping):
        return {_redact_obj(k, secrets): _redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_redact_obj(v, secrets) for v in obj]
    return obj


class RunWriter:
    """One MLflow run: tags, params, buffered per-epoch metrics, summary metrics, artifacts, status.

    ``spool_dir`` enables the fallback for an unreachable store (None: a failed write raises).
    ``spool_wait_s`` is how long :meth:`end` waits for the store to come back before leaving the spool
    on disk; ``resend_every_s`` how often, at most, a flush checks whether it is back.
    """

    def __init__(self, client: MlflowClient, experiment_id: str, flush_every: int = 10,
                 spool_dir: str | Path | None = None, spool_wait_s: float = 60.0,
                 resend_every_s: float = 5.0, flush_min_interval_s: float = 0.0) -> None:
        from trainbench.tracking.secrets import secret_values

        self.client = client
        self.experiment_id = experiment_id
        self.flush_every = flush_every
        self.flush_min_interval_s = flush_min_interval_s
        self._last_flush = time.monotonic()
        self.spool_dir = Path(spool_dir) if spool_dir else None
        self.spool_wait_s = spool_wait_s
        self.resend_every_s = resend_every_s
        self.run_id: str | None = None
        self._buffer: list[Metric] = []
        self._epochs_since_flush = 0
        self._secrets = secret_values()
        self._spool: Any = None  # a Spool while writes are pending on disk
        self._spooled = 0  # writes in the spool not yet acknowledged by the store
        self._last_try = 0.0
        self.calls = 0  # requests sent to the store (the benchmark reads it)
        #: called with the outcome when the run ends: its return value becomes the run's description
        #: (``mlflow.note.content``; trainbench.tracking.native.RunNote)
        self.describe: Callable[[str], str] | None = None
        self.flush_seconds = 0.0

    @property
    def tracking_uri(self) -> str:
        return str(self.client.tracking_uri)

    @property
    def spool_path(self) -> Path | None:
        """The run's spool folder while it holds unsent writes (None when everything was delivered)."""
        return self._spool.folder if self._spool is not None and self._spooled else None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, run_name: str, tags: Mapping[str, str], params: Mapping[str, str]) -> str:
        from trainbench.tracking.secrets import redact, redact_mapping

        tags = redact_mapping(tags, self._secrets)
        try:
            run = retry(lambda: self.client.create_run(self.experiment_id,
                                                       run_name=redact(run_name, self._secrets), tags=tags),
                        "create_run")
        except Exception as e:
            raise TrackingUnavailable(store_error_message(self.tracking_uri, e)) from None
        self.run_id = run.info.run_id
        self._reserve_disk()
        self.log_params(params)
        return self.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from trainbench.tracking.secrets import redact_mapping

        items = [[k, v[:_MAX_PARAM_LEN]] for k, v in redact_mapping(params, self._secrets).items()]
        for i in range(0, len(items), _BATCH):
            self._send({"op": "log_batch", "params": items[i:i + _BATCH]})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from trainbench.tracking.secrets import redact_mapping

        items = [[k, v] for k, v in redact_mapping(tags, self._secrets).items()]
        for i in range(0, len(items), _BATCH):
            self._send({"op": "log_batch", "tags": items[i:i + _BATCH]})

    def end(self, outcome: str) -> bool:
        """Flush, tag the outcome, set the status; returns False when writes were left in the spool."""
        self.flush()
        tags = {"outcome": outcome}
        if self.describe is not None:
            try:
                tags["mlflow.note.content"] = self.describe(outcome)
            except Exception as e:  # noqa: BLE001 - a description must never cost the run its status
                log.warning("could not write the run's description: %s", e)
        self.set_tags(tags)
        self._send({"op": "set_terminated", "status": STATUS[outcome], "end_time": int(time.time() * 1000)})
        if self._spooled and self.spool_wait_s > 0:
            log.warning("waiting up to %.0f s for the tracking store %s to take %d spooled write(s) of run %s "
                        "(Ctrl-C stops waiting; `trainbench sync %s` sends them later)", self.spool_wait_s,
                        self.tracking_uri, self._spooled, self.run_id, self._spool.folder)
        try:
            return self.drain(wait_s=self.spool_wait_s)
        finally:
            self._release_disk()

    def log_dataset(self, dataset: Mapping[str, Any], context: str = "training") -> None:
        """Log a dataset input (a dict from trainbench.tracking.native.dataset_entity) with its context."""
        try:
            self._send({"op": "log_inputs", "datasets": [_redact_obj(dict(dataset), self._secrets)],
                        "context": context})
        except Exception as e:  # noqa: BLE001 - e.g. a server too old for dataset inputs: the run goes on
            log.warning("the tracking store did not take the run's dataset input (%s); the data is still "
                        "described by the data_* tags", str(e).splitlines()[0][:200])

    # -- metrics -----------------------------------------------------------------------------------
    def log_epoch(self, step: int, metrics: Mapping[str, float]) -> None:
        """Buffer one epoch's metrics; flush every ``flush_every`` epochs, but not more often than every
        ``flush_min_interval_s`` seconds (a flush costs milliseconds: on short GPU epochs a flush every few
        epochs would cost more than the 1% overhead budget)."""
        ts = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), ts, step) for k, v in metrics.items())
        self._epochs_since_flush += 1
        if self._epochs_since_flush >= self.flush_every and \
                time.monotonic() - self._last_flush >= self.flush_min_interval_s:
            self.flush()

    def flush(self) -> None:
        """Send the buffered metrics. A chunk leaves the buffer only once it was sent or spooled, so an
        interrupt (SIGTERM) in the middle of a flush loses nothing: the final flush sends it again."""
        if not self._buffer or self.run_id is None:
            return
        t0 = time.perf_counter()
        try:
            while self._buffer:
                chunk = self._buffer[:1000]  # log_batch accepts up to 1000 metrics per request
                self._send({"op": "log_batch", "metrics": [[m.key, m.value, m.timestamp, m.step] for m in chunk]})
                del self._buffer[:len(chunk)]
            self._epochs_since_flush = 0
            self._last_flush = time.monotonic()
        finally:
            self.flush_seconds += time.perf_counter() - t0

    def log_summary(self, metrics: Mapping[str, float]) -> None:
        ts = int(time.time() * 1000)
        items = [[k, float(v), ts, 0] for k, v in metrics.items() if v is not None and math.isfinite(v)]
        if items:
            self._send({"op": "log_batch", "metrics": items})

    # -- artifacts ---------------------------------------------------------------------------------
    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self._send({"op": "log_dict", "obj": _redact_obj(obj, self._secrets), "artifact_file": artifact_file})

    def log_text(self, text: str, artifact_file: str) -> None:
        from trainbench.tracking.secrets import redact

        self._send({"op": "log_text", "text": redact(text, self._secrets), "artifact_file": artifact_file})

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        from trainbench.tracking.secrets import redact_file

        path = Path(path)
        if self._secrets and path.is_file() and any(s.encode() in path.read_bytes() for s in self._secrets):
            with tempfile.TemporaryDirectory(prefix="tb-redact-") as d:
                copy = Path(d) / path.name
                shutil.copy2(path, copy)
                redact_file(copy, self._secrets)
                log.warning("artifact %s held the value of a secret environment variable: uploaded redacted",
                            path.name)
                self._send({"op": "log_artifact", "path": str(copy), "artifact_path": artifact_path})
            return
        self._send({"op": "log_artifact", "path": str(path), "artifact_path": artifact_path})

    # -- sending and spooling ----------------------------------------------------------------------
    def _apply(self, op: Mapping[str, Any]) -> None:
        retry(lambda: apply_op(self.client, self.run_id, op), op["op"])  # type: ignore[arg-type]
        self.calls += 1

    def _send(self, op: dict[str, Any]) -> None:
        """Send one write (:meth:`_send_or_spool`); a full disk (store, artifacts or spool) raises DiskFull."""
        from trainbench.tracking.store import DiskFull, disk_full_reason, is_disk_full

        try:
            self._send_or_spool(op)
        except Exception as e:
            if not is_disk_full(e):
                raise
            where = self._spool.folder if self._spooled and self._spool is not None else self.tracking_uri
            raise DiskFull(f"the disk is full: a write to {where} failed ({disk_full_reason(e)})", str(where)) from e

    # -- a full disk -------------------------------------------------------------------------------
    def _disk_folders(self) -> list[Path]:
        from trainbench.tracking.store import sqlite_path

        db = sqlite_path(self.tracking_uri)
        return [p for p in (db.parent if db else None, self.spool_dir) if p is not None]

    def _reserve_disk(self) -> None:
        from trainbench.tracking.store import DiskReserve

        self._reserve = DiskReserve(self._disk_folders(), str(self.run_id))

    def _release_disk(self) -> None:
        reserve = getattr(self, "_reserve", None)
        if reserve is not None:
            reserve.release()

    def end_disk_full(self, message: str) -> bool:
        """End a run whose disk filled up: free the space kept aside, then write the buffered epochs, the
        outcome ``disk_full`` with the error and the status FAILED. True when the store took all of it (a
        spooled remainder stays on disk for ``trainbench sync``); False when even that failed."""
        from trainbench.tracking.store import DiskFull

        self._release_disk()
        try:
            self.flush()
            self.set_tags({"outcome": "disk_full", "error": message[:5000]})
            self._send({"op": "set_terminated", "status": STATUS["disk_full"], "end_time": int(time.time() * 1000)})
        except (DiskFull, Exception) as e:  # noqa: BLE001 - report; what was written stays written
            log.error("could not record the end of run %s (%s): it stays RUNNING in %s; its epochs written "
                      "before the disk filled up are kept.", self.run_id, str(e).splitlines()[0][:200],
                      self.tracking_uri)
            return False
        return not self._spooled

    def _send_or_spool(self, op: dict[str, Any]) -> None:
        """Send one write; when the store is unreachable, spool it (and every write after it, in order)."""
        if self._spooled:
            self._spool_append(op)
            self.drain()
            return
        try:
            self._apply(op)
        except Exception as e:
            if self.spool_dir is None or not is_transient(e):
                raise
            self._spool_append(op)
            self._last_try = time.monotonic()
            log.warning("the tracking store %s did not take a write (%s). Training goes on; writes are "
                        "spooled to %s and sent when it answers again.", self.tracking_uri,
                        str(e).splitlines()[0][:200], self._spool.folder)

    def _spool_append(self, op: dict[str, Any]) -> None:
        from trainbench.tracking.spool import Spool

        if self._spool is None:
            assert self.spool_dir is not None and self.run_id is not None
            self._spool = Spool.create(self.spool_dir, self.run_id, self.tracking_uri, self.experiment_id)
        self._spool.append(op)
        self._spooled += 1

    def _store_answers(self) -> bool:
        uri = self.tracking_uri
        if not uri.startswith(("http://", "https://")):
            return True
        try:
            check_reachable(uri, timeout_s=2.0)
            return True
        except TrackingUnavailable:
            return False

    def drain(self, wait_s: float = 0.0) -> bool:
        """Send what the spool holds, if the store answers; True when nothing is left unsent.

        Without ``wait_s`` it tries at most every ``resend_every_s``; with it, it keeps trying (every
        2 s) until everything is sent or ``wait_s`` has passed, then leaves the spool on disk.
        """
        if not self._spooled:
            return True
        try:
            return self._drain(wait_s)
        except KeyboardInterrupt:
            if self._spool is None:
                return True
            self._spooled = self._spool.pending()
            log.error("interrupted while waiting for the tracking store %s: %d write(s) of run %s stay in %s. "
                      "Upload them with `trainbench sync %s`.", self.tracking_uri, self._spooled, self.run_id,
                      self._spool.folder, self._spool.folder)
            return not self._spooled

    def _drain(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        force = wait_s > 0
        while True:
            if force or time.monotonic() - self._last_try >= self.resend_every_s:
                self._last_try = time.monotonic()
                if self._store_answers():
                    try:
                        sent, left = self._spool.replay(lambda op: self._apply(op))
                        self._spooled = left
                    except Exception as e:  # noqa: BLE001 - the spool stays; training must go on
                        left = self._spool.pending()
                        self._spooled = left
                        if not is_transient(e):
                            log.error("the tracking store refused a spooled write (%s); %d write(s) stay in "
                                      "%s", e, left, self._spool.folder)
                            break
                    else:
                        log.warning("the tracking store %s answers again: sent %d spooled write(s)",
                                    self.tracking_uri, sent)
                        if not left:
                            self._spool = None
                            return True
            if time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        if wait_s > 0 and self._spooled:
            log.error("the tracking store %s did not come back within %.0f s: %d write(s) of run %s are kept "
                      "in %s. Upload them when it is back with `trainbench sync %s`.", self.tracking_uri, wait_s,
                      self._spooled, self.run_id, self._spool.folder, self._spool.folder)
        return not self._spooled
