"""Writes one MLflow run per job, in the run contract (``trainbench.core.vocab``, docs/run-contract.md).

Per-epoch metrics are buffered and sent with ``log_batch`` (one request per flush, never one call per
metric per epoch), every ``flush_every`` epochs and at the end, always outside the timed region. Calls
to an embedded SQLite store are retried when another job holds its lock.

When the store cannot be reached mid-run (a tracking server restarted or gone), the writer keeps the
run going: every write from then on goes, in order, to a local spool (``tracking/spool.py``), which is
sent when the store answers again (checked every ``resend_every_s`` at a flush) or at the end; what
cannot be sent by then stays on disk for ``trainbench sync``. Secrets (values of environment variables
named *KEY*, *TOKEN*, *SECRET*, *PASSWORD*) are removed from everything written (``core/secrets.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from trainbench.core.errors import TrackingUnavailable
from trainbench.core.stop_signals import held_during_write
from trainbench.core.vocab import STATUS, Outcome, Tag
from trainbench.tracking.connection import (
    check_reachable,
    is_transient,
    retry,
    store_error_message,
)

log = logging.getLogger(__name__)

_MAX_PARAM_LEN = 6000
_BATCH = 100  # MLflow's log_batch limit for params and tags per request


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
        from trainbench.tracking.conventions import log_inputs

        log_inputs(client, run_id, op["datasets"], op["context"])
    elif kind == "set_terminated":
        client.set_terminated(run_id, status=op["status"], end_time=op.get("end_time"))
    else:
        raise ValueError(f"unknown tracking write {kind!r}")


def _redact_obj(obj: Any, secrets: list[str]) -> Any:
    from trainbench.core.secrets import redact

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
        from trainbench.core.secrets import secret_values

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
        #: (``mlflow.note.content``; trainbench.tracking.run_note.RunNote)
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
        from trainbench.core.secrets import redact, redact_mapping

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
        from trainbench.core.secrets import redact_mapping

        items = [[k, v[:_MAX_PARAM_LEN]] for k, v in redact_mapping(params, self._secrets).items()]
        for i in range(0, len(items), _BATCH):
            self._send({"op": "log_batch", "params": items[i:i + _BATCH]})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from trainbench.core.secrets import redact_mapping

        items = [[k, v] for k, v in redact_mapping(tags, self._secrets).items()]
        for i in range(0, len(items), _BATCH):
            self._send({"op": "log_batch", "tags": items[i:i + _BATCH]})

    def end(self, outcome: str,
            waiting: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> bool:
        """Flush, tag the outcome, set the status; returns False when writes were left in the spool. ``waiting``:
        the context the wait for a store that is away runs in, and only that wait (train.py's lets a stop signal
        noted after the epochs stop it, as Ctrl-C does; the writes before it are not cut)."""
        self.flush()
        tags = {Tag.OUTCOME: outcome}
        if self.describe is not None:
            try:
                tags["mlflow.note.content"] = self.describe(outcome)
            except Exception as e:  # noqa: BLE001 - a description must never cost the run its status
                log.warning("could not write the run's description: %s", e)
        self.set_tags(tags)
        self._send({"op": "set_terminated", "status": STATUS[outcome], "end_time": int(time.time() * 1000)})
        if self._spooled and self.spool_wait_s > 0:
            log.warning("waiting up to %.0f s for the tracking store %s to take %d spooled write(s) of run %s "
                        "(Ctrl-C stops waiting; `trainbench sync %s --yes` sends them later)", self.spool_wait_s,
                        self.tracking_uri, self._spooled, self.run_id, self._spool.folder)
        try:
            with waiting():
                return self.drain(wait_s=self.spool_wait_s)
        finally:
            self._release_disk()

    def log_dataset(self, dataset: Mapping[str, Any], context: str = "training") -> None:
        """Log a dataset input (a dict from trainbench.tracking.conventions.dataset_entity) with its context."""
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
        from trainbench.core.secrets import redact

        self._send({"op": "log_text", "text": redact(text, self._secrets), "artifact_file": artifact_file})

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        from trainbench.core.secrets import redact_file

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

    def _apply_held(self, op: Mapping[str, Any]) -> None:
        with held_during_write():
            self._apply(op)

    def _send(self, op: dict[str, Any]) -> None:
        """Send one write (:meth:`_send_or_spool`), a stop signal held until it is sent or spooled
        (:func:`~trainbench.core.stop_signals.held_during_write`); a full disk (store, artifacts or spool)
        raises DiskFull."""
        from trainbench.core.errors import DiskFull
        from trainbench.tracking.store import disk_full_reason, is_disk_full

        try:
            with held_during_write():
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
        from trainbench.core.errors import DiskFull

        self._release_disk()
        try:
            self.flush()
            self.set_tags({Tag.OUTCOME: Outcome.DISK_FULL, Tag.ERROR: message[:5000]})
            self._send({"op": "set_terminated", "status": STATUS[Outcome.DISK_FULL], "end_time": int(time.time() * 1000)})
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
                      "Upload them with `trainbench sync %s --yes`.", self.tracking_uri, self._spooled, self.run_id,
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
                        sent, left = self._spool.replay(self._apply_held)
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
                      "in %s. Upload them when it is back with `trainbench sync %s --yes`.", self.tracking_uri, wait_s,
                      self._spooled, self.run_id, self._spool.folder, self._spool.folder)
        return not self._spooled


class NullWriter:
    """The writer of a data-parallel job's ranks other than rank 0: the run's calls, each a no-op, so that only
    rank 0 talks to MLflow and no other rank ever creates a run (docs/distributed.md)."""

    run_id = ""
    tracking_uri = ""
    spool_path: Path | None = None

    def __init__(self) -> None:
        self.describe: Callable[[str], str] | None = None

    def start(self, run_name: str, tags: Mapping[str, str], params: Mapping[str, str]) -> str:
        return self.run_id

    def end(self, outcome: str,
            waiting: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> bool:
        return True

    def end_disk_full(self, message: str) -> bool:
        return True

    def log_epoch(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def flush(self) -> None: ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...

    def log_dataset(self, dataset: Mapping[str, Any], context: str = "training") -> None: ...

    def log_summary(self, metrics: Mapping[str, float]) -> None: ...

    def log_dict(self, obj: Any, artifact_file: str) -> None: ...

    def log_text(self, text: str, artifact_file: str) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...
