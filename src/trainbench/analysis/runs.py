"""Read a sweep's training runs from MLflow: tags, params, summary metrics and per-epoch series.

One ``search_runs`` query (paged) filtered by ``tags.sweep_id``, then one artifact download per run
(``epochs.json``); a run without that artifact (e.g. it crashed before writing it) falls back to its
metric history. A run still ``RUNNING`` is a job that was killed without closing its run: it is
reported as ``stale`` and never timed (``in_progress`` while its sweep's parent run is RUNNING: pipeline.mark_in_progress).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainbench.core.errors import AnalysisError, TrackingUnavailable
from trainbench.core.vocab import (
    OPEN_STATUSES,
    STATUS_OUTCOME,
    WARMUP_EPOCHS_KEY,
    Artifact,
    Kind,
    MemoryKind,
    Outcome,
    ParamKey,
    Series,
    Status,
    Summary,
    Tag,
    tag_filter,
)

# Per-epoch series the analysis needs when it has to fall back to metric history.
FALLBACK_SERIES = (Series.EPOCH_TIME_MS, Series.EVAL_TIME_MS, Series.LOSS, Series.VAL_LOSS, Series.GRAD_NORM,
                   Series.PEAK_VRAM_MB, Series.PEAK_HOST_MB)
#: The size label of runs recorded before model sizes existed.
UNSIZED = "unsized"


@dataclass
class RunRecord:
    """One training run as the analysis sees it."""

    run_id: str
    run_name: str
    model: str
    device: str
    sweep_id: str
    outcome: str  # completed | oom | diverged | failed | interrupted | stale
    status: str  # MLflow run status
    start_time: int  # ms since the epoch
    warmup_epochs: int
    target_epochs: int | None
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]  # latest value of every metric (the summary metrics among them)
    series: dict[str, np.ndarray] = field(default_factory=dict)  # per epoch, warmup included
    series_source: str = "none"  # epochs.json | metric_history | none
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> str:
        """The model size the run measured (param ``model.size``, tag ``model_size``); the analysis never
        pools two sizes of one model."""
        return self.params.get(ParamKey.MODEL_SIZE) or self.tags.get(Tag.MODEL_SIZE) or UNSIZED

    @property
    def stop_reason(self) -> str | None:
        """Why the measured epochs ended (tag ``stop_reason``: converged, budget, max_epochs, or the outcome)."""
        return self.tags.get(Tag.STOP_REASON)

    @property
    def memory_kind(self) -> str:
        kind = self.tags.get(Tag.MEMORY_KIND)
        if kind in (MemoryKind.VRAM, MemoryKind.HOST):
            return kind
        if Summary.PEAK_VRAM_MB_MAX in self.metrics or Series.PEAK_VRAM_MB in self.series:
            return MemoryKind.VRAM
        return MemoryKind.HOST

    def measured(self, key: str = Series.EPOCH_TIME_MS) -> np.ndarray:
        """The series after the warmup epochs (empty when absent)."""
        s = self.series.get(key)
        if s is None:
            return np.empty(0)
        return s[self.warmup_epochs:]


# --------------------------------------------------------------------------------------------------
# connecting
# --------------------------------------------------------------------------------------------------


def open_experiment(tracking: Any, uri: str) -> tuple[Any, str]:
    """A client of the store at ``uri`` and the id of ``tracking.experiment``, both existing (nothing is
    created: MLflow would make an empty store); raises :class:`AnalysisError` saying what is missing."""
    from trainbench.core.errors import ExperimentNotFound, StoreNotFound
    from trainbench.tracking.connection import connect

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return connect(tracking, create=False, uri=uri)
    except StoreNotFound as e:
        raise AnalysisError(f"{e}. Train first (`python run.py -m`) or point tracking.uri at an existing "
                            "store.") from None
    except ExperimentNotFound as e:
        raise AnalysisError(f"{e}. Train first (`python run.py -m`) or set tracking.experiment.") from None
    except TrackingUnavailable as e:
        raise AnalysisError(str(e)) from None


def _search(client: Any, exp_id: str, filter_string: str, order_by: list[str] | None = None,
            limit: int | None = None) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([exp_id], filter_string=filter_string, max_results=1000 if limit is None
                                  else min(limit, 1000), order_by=order_by, page_token=token)
        runs.extend(page)
        token = page.token
        if not token or (limit is not None and len(runs) >= limit):
            return runs


def _is_training_run(run: Any) -> bool:
    """A training run: ``kind=train`` (or no kind: stores written before the tag) with a model. A sweep's
    parent run (``kind=sweep``, which carries the sweep_id), analysis and compare runs are not."""
    tags = run.data.tags
    return tags.get(Tag.KIND, Kind.TRAIN) == Kind.TRAIN and Tag.MODEL in tags


def known_sweeps(client: Any, exp_id: str, limit: int = 2000) -> list[str]:
    """Sweep ids of the experiment's training runs, newest first."""
    seen: dict[str, None] = {}
    for r in _search(client, exp_id, "", order_by=["attributes.start_time DESC"], limit=limit):
        sid = r.data.tags.get(Tag.SWEEP_ID)
        if sid and _is_training_run(r):
            seen.setdefault(sid, None)
    return list(seen)


def find_runs(client: Any, exp_id: str, sweep: str) -> tuple[str, list[Any]]:
    """(sweep_id, training runs) for ``latest``, ``all`` or a sweep id."""
    if sweep == "all":
        runs = [r for r in _search(client, exp_id, "") if _is_training_run(r)]
        if not runs:
            raise AnalysisError("the experiment holds no training runs. Train first (`python run.py -m`).")
        return "all", runs
    if sweep == "latest":
        sweeps = known_sweeps(client, exp_id, limit=200)
        if not sweeps:
            raise AnalysisError("the experiment holds no training runs with a sweep_id tag. "
                                "Train first (`python run.py -m`).")
        sweep = sweeps[0]
    if "'" in sweep or "\\" in sweep:
        raise AnalysisError(f"sweep={sweep!r} is not a valid sweep id (it contains a quote or backslash).")
    runs = [r for r in _search(client, exp_id, tag_filter({Tag.SWEEP_ID: sweep})) if _is_training_run(r)]
    if not runs:
        others = known_sweeps(client, exp_id)
        hint = (f" Known sweeps (newest first): {', '.join(others[:10])}" + (" ..." if len(others) > 10 else "")
                if others else " The experiment holds no sweeps at all: train first (`python run.py -m`).")
        raise AnalysisError(f"sweep {sweep!r} has no training runs.{hint}")
    return sweep, runs


# --------------------------------------------------------------------------------------------------
# reading one run
# --------------------------------------------------------------------------------------------------


def _int_param(params: dict[str, str], key: str) -> int | None:
    try:
        v = float(params[key])
    except (KeyError, TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) else None


def _outcome(status: str, tags: dict[str, str]) -> str:
    if status in OPEN_STATUSES:
        return Outcome.STALE
    return tags.get(Tag.OUTCOME) or STATUS_OUTCOME.get(status, Outcome.FAILED)


def _series_from_json(path: str) -> tuple[dict[str, np.ndarray], int | None]:
    with open(path) as f:
        obj = json.load(f)  # Python's json reads NaN / Infinity as written by the trainer
    if not isinstance(obj, dict):
        raise ValueError(f"{Artifact.EPOCHS} is not a JSON object")
    warmup = obj.get(WARMUP_EPOCHS_KEY)
    series = {}
    for k, v in obj.items():
        if isinstance(v, list):
            series[k] = np.array([np.nan if x is None else x for x in v], dtype=float)
    return series, (int(warmup) if isinstance(warmup, int | float) else None)


def _series_from_history(client: Any, run: Any) -> dict[str, np.ndarray]:
    series = {}
    for key in FALLBACK_SERIES:
        if key not in run.data.metrics:
            continue
        hist = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))
        by_step: dict[int, float] = {}
        for m in hist:
            by_step[m.step] = m.value  # a re-logged step keeps its last value
        if by_step:
            n = max(by_step) + 1
            arr = np.full(n, np.nan)
            for step, v in by_step.items():
                if step >= 0:
                    arr[step] = v
            series[key] = arr
    return series


def load_run(client: Any, run: Any) -> RunRecord:
    tags, params = dict(run.data.tags), dict(run.data.params)
    rec = RunRecord(
        run_id=run.info.run_id, run_name=run.info.run_name or run.info.run_id[:8],
        model=tags.get(Tag.MODEL, "?"), device=tags.get(Tag.DEVICE, "unknown"), sweep_id=tags.get(Tag.SWEEP_ID, ""),
        outcome=_outcome(run.info.status, tags), status=run.info.status, start_time=run.info.start_time or 0,
        warmup_epochs=_int_param(params, ParamKey.WARMUP_EPOCHS) or 0,
        target_epochs=_int_param(params, ParamKey.TARGET_EPOCHS), params=params, tags=tags,
        metrics=dict(run.data.metrics))
    with tempfile.TemporaryDirectory(prefix="tb-epochs-") as tmp:
        try:
            local = client.download_artifacts(run.info.run_id, Artifact.EPOCHS, tmp)
            rec.series, warmup = _series_from_json(local)
            rec.series_source = Artifact.EPOCHS
            if warmup is not None:
                rec.warmup_epochs = warmup
        except Exception as e:  # noqa: BLE001 - missing or unreadable artifact: use metric history
            rec.series = _series_from_history(client, run)
            rec.series_source = "metric_history" if rec.series else "none"
            rec.notes.append(f"no readable {Artifact.EPOCHS} ({type(e).__name__}); per-epoch series read from "
                             + ("metric history" if rec.series else "nowhere: the run has no per-epoch metrics"))
    _epoch_includes_eval(rec)
    return rec


def _epoch_includes_eval(rec: RunRecord) -> None:
    """An epoch of the training plan is the training pass plus the validation pass: where the run timed a
    validation pass (``eval_time_ms``), ``epoch_time_ms`` becomes their sum (what the statistics and the
    projections use) and the training pass alone is kept as ``train_time_ms``."""
    train, val = rec.series.get(Series.EPOCH_TIME_MS), rec.series.get(Series.EVAL_TIME_MS)
    if train is None or val is None or Series.TRAIN_TIME_MS in rec.series:
        return
    n = min(train.size, val.size)
    rec.series[Series.TRAIN_TIME_MS] = train
    rec.series[Series.EPOCH_TIME_MS] = train[:n] + np.nan_to_num(val[:n], nan=0.0)


def load_runs(client: Any, runs: Sequence[Any], workers: int = 8) -> list[RunRecord]:
    """Read every run (artifact downloads in parallel), oldest first."""
    if workers <= 1 or len(runs) <= 1:
        recs = [load_run(client, r) for r in runs]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            recs = list(pool.map(lambda r: load_run(client, r), runs))
    return sorted(recs, key=lambda r: (r.start_time, r.run_id))


def experiment_speeds(client: Any, exp_id: str) -> list[dict[str, Any]]:
    """Median epoch time of every completed training run in the experiment, from its summary metrics.

    Used to compare devices (no artifact downloads): [{model, device, epoch_ms, run_id}].
    """
    out = []
    for r in _search(client, exp_id, f"attributes.status = '{Status.FINISHED}'"):
        if not _is_training_run(r) or _outcome(r.info.status, r.data.tags) != Outcome.COMPLETED:
            continue
        m = r.data.metrics
        v = m.get(Summary.EPOCH_TOTAL_MS_P50, m.get(Summary.EPOCH_TIME_MS_P50, m.get(Summary.EPOCH_TIME_MS_MEAN)))
        if v is not None and math.isfinite(v) and v > 0:
            size = r.data.params.get(ParamKey.MODEL_SIZE) or r.data.tags.get(Tag.MODEL_SIZE)
            model = r.data.tags[Tag.MODEL] + (f"[{size}]" if size else "")  # never compare two sizes
            out.append({"model": model, "device": r.data.tags.get(Tag.DEVICE, "unknown"),
                        "epoch_ms": float(v), "run_id": r.info.run_id})
    return out
