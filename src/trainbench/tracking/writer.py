"""Writes one MLflow run per job, exactly in the run contract of DESIGN.md.

Per-epoch metrics are buffered and sent with ``log_batch`` (one request per flush, never one call per
metric per epoch), every ``flush_every`` epochs and at the end, always outside the timed region. Calls
to an embedded SQLite store are retried when another job holds its lock.
"""

from __future__ import annotations

import json
import logging
import math
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
          "interrupted": "KILLED"}
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
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)


def retry(fn: Callable[[], T], what: str, attempts: int = 8, base_delay: float = 0.05) -> T:
    """Retry ``fn`` while an embedded SQLite store reports a lock held by a concurrent job."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:
            msg = str(e).lower()
            if ("database is locked" not in msg and "busy" not in msg) or i == attempts - 1:
                raise
            time.sleep(base_delay * 2**i)
            log.debug("retrying %s after lock contention (%s)", what, e)
    raise AssertionError("unreachable")


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The experiment's id, created if needed; safe when several jobs race to create it."""
    exp = retry(lambda: client.get_experiment_by_name(name), "get_experiment")
    if exp is not None:
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


def connect(tracking: Any) -> tuple[MlflowClient, str]:
    """(client, experiment_id) for a tracking config; raises :class:`TrackingUnavailable` with the fix."""
    uri = resolve_uri(tracking)
    check_reachable(uri, float(getattr(tracking, "timeout_s", 10.0)))
    try:
        client = MlflowClient(tracking_uri=uri)
        exp_id = ensure_experiment(client, tracking.experiment, getattr(tracking, "artifact_location", None))
    except TrackingUnavailable:
        raise
    except Exception as e:
        raise TrackingUnavailable(f"cannot open the MLflow store {uri}: {e}. Check tracking.uri "
                                  f"(the embedded store is tracking=local).") from e
    return client, exp_id


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


class RunWriter:
    """One MLflow run: tags, params, buffered per-epoch metrics, summary metrics, artifacts, status."""

    def __init__(self, client: MlflowClient, experiment_id: str, flush_every: int = 10) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.flush_every = flush_every
        self.run_id: str | None = None
        self._buffer: list[Metric] = []
        self._epochs_since_flush = 0
        self.calls = 0  # requests sent to the store (the benchmark reads it)
        self.flush_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, run_name: str, tags: Mapping[str, str], params: Mapping[str, str]) -> str:
        run = retry(lambda: self.client.create_run(self.experiment_id, run_name=run_name,
                                                   tags={k: str(v) for k, v in tags.items()}), "create_run")
        self.run_id = run.info.run_id
        self.log_params(params)
        return self.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH):
            chunk = items[i:i + _BATCH]
            retry(lambda c=chunk: self.client.log_batch(self.run_id, params=c), "log_batch(params)")
            self.calls += 1

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, str(v)) for k, v in tags.items()]
        for i in range(0, len(items), _BATCH):
            chunk = items[i:i + _BATCH]
            retry(lambda c=chunk: self.client.log_batch(self.run_id, tags=c), "log_batch(tags)")
            self.calls += 1

    def end(self, outcome: str) -> None:
        self.flush()
        self.set_tags({"outcome": outcome})
        retry(lambda: self.client.set_terminated(self.run_id, status=STATUS[outcome]), "set_terminated")
        self.calls += 1

    # -- metrics -----------------------------------------------------------------------------------
    def log_epoch(self, step: int, metrics: Mapping[str, float]) -> None:
        """Buffer one epoch's metrics; flush every ``flush_every`` epochs."""
        ts = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), ts, step) for k, v in metrics.items())
        self._epochs_since_flush += 1
        if self._epochs_since_flush >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        if not self._buffer or self.run_id is None:
            return
        t0 = time.perf_counter()
        buf, self._buffer = self._buffer, []
        for i in range(0, len(buf), 1000):  # log_batch accepts up to 1000 metrics per request
            chunk = buf[i:i + 1000]
            retry(lambda c=chunk: self.client.log_batch(self.run_id, metrics=c), "log_batch(metrics)")
            self.calls += 1
        self._epochs_since_flush = 0
        self.flush_seconds += time.perf_counter() - t0

    def log_summary(self, metrics: Mapping[str, float]) -> None:
        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, 0) for k, v in metrics.items() if v is not None and math.isfinite(v)]
        if items:
            retry(lambda: self.client.log_batch(self.run_id, metrics=items), "log_batch(summary)")
            self.calls += 1

    # -- artifacts ---------------------------------------------------------------------------------
    def log_dict(self, obj: Any, artifact_file: str) -> None:
        retry(lambda: self.client.log_dict(self.run_id, obj, artifact_file), "log_dict")
        self.calls += 1

    def log_text(self, text: str, artifact_file: str) -> None:
        retry(lambda: self.client.log_text(self.run_id, text, artifact_file), "log_text")
        self.calls += 1

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        retry(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path), "log_artifact")
        self.calls += 1
