"""Read a sweep's training runs from MLflow: tags, params, summary metrics and per-epoch series.

One ``search_runs`` query (paged) filtered by ``tags.sweep_id``, then the artifact downloads of each run
(``epochs.json``, ``workload_profile.json``); a run without ``epochs.json`` (e.g. it crashed before writing
it) falls back to its metric history, one without a readable workload profile gets
``RunRecord.workload_profile = None`` and a note (the projection then falls back to the aggregate
``workload.*`` metrics). A run still ``RUNNING`` is a job that was killed without closing its run: it is
reported as ``stale`` and never timed (``in_progress`` while its sweep's parent run is RUNNING:
pipeline.mark_in_progress).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from trainbench.analysis.logged import logged_int
from trainbench.analysis.projection.artifacts import WorkloadProfile
from trainbench.analysis.projection.data_parallel import world_size
from trainbench.analysis.projection.devices import Speed
from trainbench.analysis.report_types import DeviceComparison, DeviceRun
from trainbench.core.errors import AnalysisError, TrackingUnavailable
from trainbench.core.safe_text import term
from trainbench.core.vocab import (
    OPEN_STATUSES,
    STATUS_OUTCOME,
    WARMUP_EPOCHS_KEY,
    WORKLOAD_PROFILE_KEYS,
    WORKLOAD_PROFILE_SCHEMA,
    Artifact,
    Kind,
    MemoryKind,
    Outcome,
    ParamKey,
    Series,
    Status,
    Summary,
    Tag,
    model_info,
    tag_filter,
)

# Per-epoch series the analysis needs when it has to fall back to metric history.
FALLBACK_SERIES = (Series.EPOCH_TIME_MS, Series.EVAL_TIME_MS, Series.LOSS, Series.VAL_LOSS, Series.GRAD_NORM,
                   Series.PEAK_VRAM_MB, Series.PEAK_HOST_MB, Series.COMM_EXPOSED_MS)
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
    outcome: str  # completed | oom | diverged | failed | interrupted | stale | profiled
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
    #: Why the run's logged values cannot be computed with (:func:`check_logged_values`); None when valid.
    invalid_reason: str | None = None


    #: The run's ``workload_profile.json`` (schema 1, docs/projection.md), or None: not recorded (a run from
    #: before it existed, or not profiled) or unreadable, with a note saying which.
    workload_profile: WorkloadProfile | None = None

    @property
    def size(self) -> str:
        """The model size the run measured (param ``model.size``, tag ``model_size``); the analysis never
        pools two sizes of one model."""
        return self.params.get(ParamKey.MODEL_SIZE) or self.tags.get(Tag.MODEL_SIZE) or UNSIZED

    @property
    def sizes(self) -> tuple[str, ...]:
        """The sizes whose workload the run is: its own, and those its tag ``size_same_as`` names (a DQN run at
        ``small`` is the ``reference`` workload too: one config)."""
        same = [s for s in str(self.tags.get(Tag.SIZE_SAME_AS) or "").split(",") if s and s != self.size]
        return (self.size, *same)

    @property
    def profile_only(self) -> bool:
        """A reference-size profile run (tag ``kind=size_profile``): a workload profile and a memory prediction, no
        trained epoch (trainbench/reference_profile.py)."""
        return self.tags.get(Tag.KIND) == Kind.PROFILE

    @property
    def world_size(self) -> int:
        """The ranks that trained the run (param ``world_size``; 1 for runs logged before it existed): part of
        the workload's identity, as the size is: a 2-rank run is never pooled with a 1-rank run."""
        return world_size(self.params)

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


#: What a missing store's error line adds: the fix.
_NO_STORE_FIX = "Train first (`python run.py -m`) or point tracking.uri at an existing store."


def require_store(uri: str) -> None:
    """The store at ``uri`` must be there (nothing is created): :class:`AnalysisError` with the fix otherwise.
    Read without MLflow, so that analyze.py says so before the analysis' modules load."""
    from trainbench.core.errors import StoreNotFound
    from trainbench.tracking.store import check_exists

    try:
        check_exists(uri)
    except StoreNotFound as e:
        raise AnalysisError(f"{e}. {_NO_STORE_FIX}") from None


def open_experiment(tracking: Any, uri: str) -> tuple[Any, str]:
    """A client of the store at ``uri`` and the id of ``tracking.experiment``, both existing (nothing is
    created: MLflow would make an empty store); raises :class:`AnalysisError` saying what is missing."""
    from trainbench.core.errors import ExperimentNotFound, StoreNotFound
    from trainbench.tracking.connection import connect

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return connect(tracking, create=False, uri=uri)
    except StoreNotFound as e:
        raise AnalysisError(f"{e}. {_NO_STORE_FIX}") from None
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
    """A training run: ``kind=train`` (or no kind: stores written before the tag) with a model, or a reference-size
    profile run (``kind=size_profile``: profiled, not trained). A sweep's parent run (``kind=sweep``, which carries the
    sweep_id), analysis and compare runs are not."""
    tags = run.data.tags
    return tags.get(Tag.KIND, Kind.TRAIN) in (Kind.TRAIN, Kind.PROFILE) and Tag.MODEL in tags


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
        hint = (f" Known sweeps (newest first): {', '.join(term(o) for o in others[:10])}" + (" ..." if len(others) > 10 else "")
                if others else " The experiment holds no sweeps at all: train first (`python run.py -m`).")
        raise AnalysisError(f"sweep {sweep!r} has no training runs.{hint}")
    return sweep, runs


# --------------------------------------------------------------------------------------------------
# reading one run
# --------------------------------------------------------------------------------------------------


def _outcome(status: str, tags: dict[str, str]) -> str:
    if status in OPEN_STATUSES:
        return Outcome.STALE
    return tags.get(Tag.OUTCOME) or STATUS_OUTCOME.get(status, Outcome.FAILED)


#: The largest artifact the analysis reads (``epochs.json``, ``workload_profile.json``): a million epochs of a
#: dozen series, or a profile of 100000 kernel groups, stay far below it; a larger file is not read.
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
#: The deepest nesting of a JSON artifact the analysis reads (the profile nests 3 levels, epochs.json 2).
MAX_JSON_DEPTH = 16
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[^\[\]{}]+")


def read_json_artifact(path: str) -> Any:
    """The JSON value of a downloaded artifact, read within bounds: at most :data:`MAX_ARTIFACT_BYTES` and
    :data:`MAX_JSON_DEPTH` levels of nesting (a deeper file is refused before the parser recurses); raises
    ValueError naming the bound. Python's json reads NaN / Infinity as written by the trainer."""
    size = os.path.getsize(path)
    if size > MAX_ARTIFACT_BYTES:
        raise ValueError(f"{size} bytes, over the {MAX_ARTIFACT_BYTES} bytes an artifact may hold")
    with open(path, "rb") as f:
        raw = f.read(MAX_ARTIFACT_BYTES + 1)
    return bounded_json_loads(raw.decode("utf-8", errors="replace"))


def bounded_json_loads(text: str) -> Any:
    """``json.loads(text)`` refused (ValueError) beyond :data:`MAX_ARTIFACT_BYTES` characters or
    :data:`MAX_JSON_DEPTH` levels of nesting, checked before the parser recurses."""
    if len(text) > MAX_ARTIFACT_BYTES:
        raise ValueError(f"{len(text)} characters, over the {MAX_ARTIFACT_BYTES} an artifact may hold")
    brackets = _BRACKETS.sub("", _JSON_STRING.sub('""', text)).encode()  # the nesting, strings skipped
    if brackets:
        steps = np.frombuffer(brackets, dtype=np.uint8)
        if int(np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1)).max()) > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:  # never reached within the depth bound; kept as the parser's own limit
        raise ValueError("nested too deep") from None


def _series_from_json(path: str) -> tuple[dict[str, np.ndarray], Any]:
    """The per-epoch series of ``epochs.json`` and its warmup_epochs as written (checked by the caller)."""
    obj = read_json_artifact(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{Artifact.EPOCHS} is not a JSON object")
    warmup = obj.get(WARMUP_EPOCHS_KEY)
    series = {}
    for k, v in obj.items():
        if isinstance(v, list):
            series[k] = np.array([np.nan if x is None else x for x in v], dtype=float)
    return series, warmup


def _warmup_problem(warmup: Any) -> str | None:
    """Why ``epochs.json``'s warmup_epochs is not one the command line accepts as trainer.warmup_epochs, or None."""
    from trainbench.config.run import logged_param_problems

    if isinstance(warmup, bool) or not isinstance(warmup, int | float) or (
            isinstance(warmup, float) and math.isfinite(warmup) and not warmup.is_integer()):
        return f"{Artifact.EPOCHS} {WARMUP_EPOCHS_KEY}={warmup!r} is not a whole number of epochs"
    value = str(int(warmup)) if isinstance(warmup, int) or (isinstance(warmup, float) and math.isfinite(warmup)
                                                            and abs(warmup) < 1e15) else str(warmup)
    problems = logged_param_problems({ParamKey.WARMUP_EPOCHS: value})
    return f"{Artifact.EPOCHS} {problems[0]}" if problems else None


def _series_from_history(client: Any, run: Any, keys: Sequence[str] = FALLBACK_SERIES) -> dict[str, np.ndarray]:
    series = {}
    for key in keys:
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


def _read_series(client: Any, run: Any, rec: RunRecord) -> list[str]:
    """The run's per-epoch series from ``epochs.json`` (else its metric history, with a note) into ``rec``;
    returns what is wrong with the artifact's own warmup_epochs."""
    artifact_problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tb-epochs-") as tmp:
        try:
            local = client.download_artifacts(run.info.run_id, Artifact.EPOCHS, tmp)
            rec.series, warmup = _series_from_json(local)
            rec.series_source = Artifact.EPOCHS
            if warmup is not None:
                bad = _warmup_problem(warmup)
                if bad:
                    artifact_problems.append(bad)
                else:
                    rec.warmup_epochs = int(warmup)
        except Exception as e:  # noqa: BLE001 - missing or unreadable artifact: use metric history
            rec.series = _series_from_history(client, run)
            rec.series_source = "metric_history" if rec.series else "none"
            why = f"{type(e).__name__}: {term(e)[:200]}" if isinstance(e, ValueError) else type(e).__name__
            rec.notes.append(f"no readable {Artifact.EPOCHS} ({why}); per-epoch series read from "
                             + ("metric history" if rec.series else "nowhere: the run has no per-epoch metrics"))
    return artifact_problems


def load_run(client: Any, run: Any) -> RunRecord:
    tags, params = dict(run.data.tags), dict(run.data.params)
    rec = RunRecord(
        run_id=run.info.run_id, run_name=run.info.run_name or run.info.run_id[:8],
        model=tags.get(Tag.MODEL, "?"), device=tags.get(Tag.DEVICE, "unknown"), sweep_id=tags.get(Tag.SWEEP_ID, ""),
        outcome=_outcome(run.info.status, tags), status=run.info.status, start_time=run.info.start_time or 0,
        warmup_epochs=logged_int(params.get(ParamKey.WARMUP_EPOCHS)) or 0,
        target_epochs=logged_int(params.get(ParamKey.TARGET_EPOCHS)), params=params, tags=tags,
        metrics=dict(run.data.metrics))
    artifact_problems: list[str] = []
    if not rec.profile_only:  # a profile run trains no epoch: nothing to read
        artifact_problems = _read_series(client, run, rec)
    if Series.COMM_EXPOSED_MS not in rec.series and Series.COMM_EXPOSED_MS in run.data.metrics:
        # a DDP run's exposed all-reduce per epoch (a metric; not every writer puts it in epochs.json)
        rec.series.update(_series_from_history(client, run, (Series.COMM_EXPOSED_MS,)))
    check_logged_values(rec, artifact_problems)
    _epoch_includes_eval(rec)
    rec.workload_profile = _load_workload_profile(client, rec)
    _check_aggregate_workload(rec)
    return rec


#: The longest epoch a run can have measured (30 days, in ms): a logged time beyond it is not a measurement
#: (1e308 ms overflows every sum and plot).
MAX_EPOCH_MS = 30 * 24 * 3600 * 1000.0
_TIMED_SERIES = (Series.EPOCH_TIME_MS, Series.EVAL_TIME_MS)


#: The counts a run logs that the analysis computes with (the data-parallel projection's ranks, gradient bytes
#: and steps, the plan's windows), each a whole number from 1 (0 for validation windows) up to a bound no real
#: run reaches: 65,536 ranks; 1e11 parameters (400 GB of fp32 weights, more than any one GPU holds, and a DDP
#: rank holds the whole model); a trillion windows; ten trillion samples per epoch (a positive int, the model
#: contract says); a batch of 2^31. A logged value outside (``-1``, ``0``, ``abc``, ``1e9`` ranks, ``1e15``
#: parameters) is not a measurement.
LOGGED_COUNTS = {ParamKey.WORLD_SIZE: (1, 65_536), model_info("num_params"): (1, 10**11),
                 model_info("train_windows"): (1, 10**12), model_info("val_windows"): (0, 10**12),
                 ParamKey.SAMPLES_PER_EPOCH: (1, 10**13), ParamKey.BATCH_SIZE_PER_RANK: (1, 2**31),
                 ParamKey.GLOBAL_BATCH_SIZE: (1, 2**31)}


def logged_count_problems(params: dict[str, str]) -> list[str]:
    """Why the logged counts of :data:`LOGGED_COUNTS` are not counts (a param absent or ``None`` passes)."""
    problems = []
    for key, (least, most) in LOGGED_COUNTS.items():
        raw = params.get(key)
        if raw in (None, "None", ""):
            continue
        text = str(raw).strip()
        if not (re.fullmatch(r"[0-9]{1,18}", text) and least <= int(text) <= most):
            problems.append(f"{key}={term(text)[:40]} is not a count from {least} to {most:,}")
    return problems


def _comm_problem(rec: RunRecord) -> str | None:
    """Why the logged exposed all-reduce (``comm_exposed_ms``) is not a part of the epochs' times: each value
    must be finite, at least 0 and at most its epoch's time."""
    comm = rec.series.get(Series.COMM_EXPOSED_MS)
    if comm is None or comm.size == 0:
        return None
    epochs = rec.series.get(Series.EPOCH_TIME_MS)
    n = min(comm.size, epochs.size) if epochs is not None else 0
    over = np.zeros(comm.size, dtype=bool)
    if n:
        with np.errstate(invalid="ignore"):
            over[:n] = comm[:n] > np.where(np.isfinite(epochs[:n]), epochs[:n], np.inf)
    with np.errstate(invalid="ignore"):
        bad = int((np.isinf(comm) | (comm < 0) | over | (comm > MAX_EPOCH_MS)).sum())
    if not bad:
        return None
    return (f"{Series.COMM_EXPOSED_MS} holds {bad} impossible value(s) (< 0 ms, infinite, or longer than its epoch; "
            f"min {np.nanmin(comm):.4g}, max {np.nanmax(comm):.4g}): not a part of the epochs' times")


def check_logged_values(rec: RunRecord, artifact_problems: Sequence[str] = ()) -> None:
    """Logged values are input: validated as the command line is (this version's schemas and ranges,
    :func:`trainbench.config.run.logged_param_problems`), and the per-epoch times as durations. A run with an
    impossible value gets ``outcome`` :data:`Outcome.INVALID` and ``invalid_reason`` (the runs table's
    ``excluded_reason``), its offending params are dropped from the record, its series are kept for the
    record but never timed. NaN epoch times (an epoch whose timing failed) are dropped with a note."""
    from trainbench.config.run import logged_param_problems

    problems = logged_param_problems(rec.params) + logged_count_problems(rec.params)
    for p in problems:
        rec.params.pop(p.split("=", 1)[0], None)  # never computed with (the local power, target epochs)
    if not any(p.startswith(ParamKey.WARMUP_EPOCHS + "=") for p in problems):
        # epochs.json's own warmup_epochs (the param, when it was the bad one, is already named)
        problems += artifact_problems
    if ParamKey.TARGET_EPOCHS not in rec.params:
        rec.target_epochs = None
    for key in _TIMED_SERIES:
        s = rec.series.get(key)
        if s is None or s.size == 0:
            continue
        finite = s[np.isfinite(s)]
        # an epoch takes time; a validation pass may round to 0 ms, never below
        low = (finite <= 0) if key == Series.EPOCH_TIME_MS else (finite < 0)
        bad = int((np.isinf(s)).sum() + low.sum() + (finite > MAX_EPOCH_MS).sum())
        if bad:
            problems.append(f"{key} holds {bad} impossible value(s) ({'<=' if key == Series.EPOCH_TIME_MS else '<'} 0 "
                            f"ms, infinite or over {MAX_EPOCH_MS:.3g} "
                            f"ms; min {np.nanmin(s):.4g}, max {np.nanmax(s):.4g}): not durations")
        n_nan = int(np.isnan(s[max(rec.warmup_epochs, 0):]).sum())
        if n_nan and not bad:
            rec.notes.append(f"{n_nan} measured epoch(s) without a {key} (NaN) dropped")
    comm = _comm_problem(rec)
    if comm:
        problems.append(comm)
    power = rec.metrics.get(Summary.GPU_POWER_W_MEAN)
    if power is not None and (not math.isfinite(power) or power < 0):
        problems.append(f"{Summary.GPU_POWER_W_MEAN}={power:g} is not a board power (W)")
        rec.metrics.pop(Summary.GPU_POWER_W_MEAN)
    if problems:
        rec.invalid_reason = "; ".join(problems)
        if rec.outcome != Outcome.INVALID:
            rec.notes.append(f"recorded outcome: {rec.outcome}")
        rec.outcome = Outcome.INVALID
        rec.warmup_epochs = max(rec.warmup_epochs, 0)


#: The keys of a kernel group and of a chain in ``workload_profile.json``.
_KERNEL_KEYS = ("cls", "dtype", "autocast", "count", "flops", "bytes")
_CHAIN_KEYS = ("what", "cls", "dtype", "autocast", "count", "steps", "flops_per_step", "bytes_per_step")


def workload_profile_from_json(text: str) -> WorkloadProfile:
    """The workload profile in ``text`` (``workload_profile.json``), checked against schema 1; raises
    ValueError naming what is wrong."""
    obj = bounded_json_loads(text)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("schema") != WORKLOAD_PROFILE_SCHEMA:
        raise ValueError(f"schema {obj.get('schema')!r}, this reader knows schema {WORKLOAD_PROFILE_SCHEMA}")
    missing = [k for k in WORKLOAD_PROFILE_KEYS if k not in obj]
    if missing:
        raise ValueError(f"missing keys {missing}")
    if not isinstance(obj["complete"], bool) or not isinstance(obj["incomplete_reasons"], list):
        raise ValueError("complete must be a boolean and incomplete_reasons a list")
    if not obj["complete"] and not obj["incomplete_reasons"]:
        raise ValueError("an incomplete profile names no reason")
    if not all(isinstance(r, str) and len(r) <= _MAX_LABEL * 8 for r in obj["incomplete_reasons"]):
        raise ValueError(f"incomplete_reasons must be strings of at most {_MAX_LABEL * 8} characters")
    for what, keys in (("kernels", _KERNEL_KEYS), ("chains", _CHAIN_KEYS)):
        rows = obj[what]
        if not isinstance(rows, list):
            raise ValueError(f"{what} is not a list")
        if len(rows) > _MAX_ROWS:
            raise ValueError(f"{what} holds {len(rows)} rows, over the {_MAX_ROWS} a profile may hold")
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or any(k not in row for k in keys):
                raise ValueError(f"{what}[{i}] lacks one of {list(keys)}")
            for k in keys[:3] if what == "kernels" else keys[:4]:
                if not isinstance(row[k], str) or len(row[k]) > _MAX_LABEL:
                    raise ValueError(f"{what}[{i}].{k} is not a name (a string of at most {_MAX_LABEL} characters)")
            for k in keys[3:] if what == "kernels" else keys[4:]:
                _check_amount(f"{what}[{i}].{k}", row[k])
    host, opt = obj["host"], obj["optimizer"]
    if not isinstance(host, dict) or not all(k in host for k in ("ops", "syncs")):
        raise ValueError("host must hold numbers ops and syncs")
    for k in ("ops", "syncs"):
        _check_amount(f"host.{k}", host[k])
    if not isinstance(opt, dict) or "measured_impl" not in opt or "booked_as" not in opt:
        raise ValueError("optimizer must hold measured_impl and booked_as")
    if not all(v is None or (isinstance(v, str) and len(v) <= _MAX_LABEL) for v in (opt["measured_impl"],
                                                                                  opt["booked_as"])):
        raise ValueError("optimizer.measured_impl and booked_as must be names or null")
    return cast(WorkloadProfile, obj)


#: Bounds of a workload profile's shape: rows per list, characters per name.
_MAX_ROWS, _MAX_LABEL = 100_000, 64


def _check_amount(where: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{where} = {v!r} is not a finite non-negative number")


#: What one measured epoch can hold at most per second of its measured time, on any device the runs can use
#: (a generous margin over the fastest: ~2e15 dense FLOP/s and ~5e12 B/s of an H200, a kernel launch or an
#: eager op taking at least a microsecond). A workload profile (or the aggregate ``workload.*`` metrics) beyond
#: them describes work the measured epoch cannot have done, and is refused.
MAX_FLOPS_PER_S = 1e17
MAX_BYTES_PER_S = 1e15
MAX_OPS_PER_S = 1e8


def profile_totals(prof: WorkloadProfile) -> dict[str, float]:
    """The epoch's total FLOPs, bytes and kernel launches (eager host ops included) a profile describes."""
    tot = {"flops": 0.0, "bytes": 0.0, "ops": float(prof["host"]["ops"])}
    for k in prof["kernels"]:
        tot["flops"] += float(k["flops"])
        tot["bytes"] += float(k["bytes"])
        tot["ops"] += float(k["count"])
    for c in prof["chains"]:
        n = float(c["count"]) * float(c["steps"])
        tot["flops"] += n * float(c["flops_per_step"])
        tot["bytes"] += n * float(c["bytes_per_step"])
        tot["ops"] += n
    return tot


def workload_rate_problem(totals: dict[str, float], epoch_ms: float | None) -> str | None:
    """Why a workload of an epoch (``totals``: flops, bytes, ops) cannot have run in the measured ``epoch_ms`` (the
    longest measured epoch; :data:`MAX_EPOCH_MS` where none was measured), or None."""
    seconds = (epoch_ms if epoch_ms and math.isfinite(epoch_ms) and epoch_ms > 0 else MAX_EPOCH_MS) / 1000
    for what, bound, unit in (("flops", MAX_FLOPS_PER_S, "FLOP/s"), ("bytes", MAX_BYTES_PER_S, "B/s"),
                              ("ops", MAX_OPS_PER_S, "kernels/s")):
        v = totals.get(what, 0.0)
        if not math.isfinite(v) or v / seconds > bound:
            return (f"{v:.3g} {what} an epoch in the measured {seconds * 1000:.4g} ms would be {v / seconds:.3g} "
                    f"{unit}, beyond any device ({bound:.0e} {unit}): not this run's workload")
    return None


def _longest_epoch_ms(rec: RunRecord) -> float | None:
    s = rec.series.get(Series.EPOCH_TIME_MS)
    finite = s[np.isfinite(s) & (s > 0)] if s is not None else np.empty(0)
    return float(finite.max()) if finite.size else None


def _check_aggregate_workload(rec: RunRecord) -> None:
    """The aggregate ``workload.<class>.<dtype>.<flops|bytes|ops>`` metrics held to the same bounds: beyond them
    they are dropped with a note (the run is still timed; it is not projected from them)."""
    keys = [k for k in rec.metrics if k.startswith("workload.")]
    if not keys:
        return
    totals = {what: sum(rec.metrics[k] for k in keys if k.endswith("." + what)) for what in ("flops", "bytes", "ops")}
    negative = any(not (rec.metrics[k] >= 0) for k in keys)
    problem = ("a workload metric is negative or not a number" if negative
               else workload_rate_problem(totals, _longest_epoch_ms(rec)))
    if problem:
        for k in keys:
            rec.metrics.pop(k)
        rec.notes.append(f"aggregate workload.* metrics refused as invalid ({problem}); they are not used to project")


def _load_workload_profile(client: Any, rec: RunRecord) -> WorkloadProfile | None:
    """The run's workload profile, or None with a note (never raises: a bad artifact costs only the
    kernel-level projection of this run)."""
    with tempfile.TemporaryDirectory(prefix="tb-workload-") as tmp:
        try:
            local = client.download_artifacts(rec.run_id, Artifact.WORKLOAD_PROFILE, tmp)
        except Exception as e:  # noqa: BLE001 - not recorded (an older run, not profiled, failed early)
            if any(k.startswith("workload.") for k in rec.metrics):
                rec.notes.append(f"no {Artifact.WORKLOAD_PROFILE} ({type(e).__name__}): the run predates the "
                                 "kernel-level profile; only its aggregate workload metrics (the old coarse "
                                 "profile) can be projected")
            else:
                rec.notes.append(f"no {Artifact.WORKLOAD_PROFILE} ({type(e).__name__}): its workload was "
                                 "not profiled")
            return None
        try:
            if os.path.getsize(local) > MAX_ARTIFACT_BYTES:
                raise ValueError(f"over the {MAX_ARTIFACT_BYTES} bytes an artifact may hold")
            with open(local, encoding="utf-8", errors="replace") as f:
                prof = workload_profile_from_json(f.read())
        except (OSError, ValueError) as e:
            rec.notes.append(f"{Artifact.WORKLOAD_PROFILE} unreadable ({e}); it is not used to project")
            return None
    problem = workload_rate_problem(profile_totals(prof), _longest_epoch_ms(rec))
    if problem:
        rec.notes.append(f"{Artifact.WORKLOAD_PROFILE} refused as invalid: {problem}; it is not used to project")
        return None
    if not prof["complete"]:
        rec.notes.append(f"{Artifact.WORKLOAD_PROFILE} incomplete: {'; '.join(map(str, prof['incomplete_reasons']))}; "
                         "it is not used to project")
    return prof


def projectable_workload_profile(rec: RunRecord) -> tuple[WorkloadProfile | None, str | None]:
    """(the run's workload profile, None) when it may be projected from, else (None, why not): no profile
    recorded or readable, or an incomplete one (kernels bypassed the dispatcher: its reasons)."""
    prof = rec.workload_profile
    if prof is None:
        return None, f"no readable {Artifact.WORKLOAD_PROFILE}"
    if not prof.get("complete"):
        return None, "incomplete workload profile: " + "; ".join(map(str, prof.get("incomplete_reasons") or []))
    return prof, None


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


def experiment_speeds(client: Any, exp_id: str) -> list[Speed]:
    """Median epoch time of every completed training run in the experiment, from its summary metrics.

    Used to compare devices (no artifact downloads): [{model, device, epoch_ms, run_id}].
    """
    out: list[Speed] = []
    for r in _search(client, exp_id, f"attributes.status = '{Status.FINISHED}'"):
        if not _is_training_run(r) or _outcome(r.info.status, r.data.tags) != Outcome.COMPLETED:
            continue
        m = r.data.metrics
        v = m.get(Summary.EPOCH_TOTAL_MS_P50, m.get(Summary.EPOCH_TIME_MS_P50, m.get(Summary.EPOCH_TIME_MS_MEAN)))
        if v is not None and math.isfinite(v) and 0 < v <= MAX_EPOCH_MS and not _logged_params_invalid(r):
            size = r.data.params.get(ParamKey.MODEL_SIZE) or r.data.tags.get(Tag.MODEL_SIZE)
            model = r.data.tags[Tag.MODEL] + workload_suffix(size, world_size(r.data.params))  # never compare two
            # sizes, nor a run on N ranks with one on 1
            out.append(Speed(model=model, device=r.data.tags.get(Tag.DEVICE, "unknown"), epoch_ms=float(v),
                             run_id=r.info.run_id, sweep_id=r.data.tags.get(Tag.SWEEP_ID)))
    return out


def workload_suffix(size: str | None, ranks: int) -> str:
    """What a row name adds to the model's for another workload than the decision's: ``[small]``,
    ``[world_size=2]``, ``[small, world_size=2]``; empty for none."""
    parts = ([size] if size else []) + ([f"{ParamKey.WORLD_SIZE}={ranks}"] if ranks != 1 else [])
    return f"[{', '.join(parts)}]" if parts else ""


def _logged_params_invalid(run: Any) -> bool:
    """Whether a run's logged params hold a value the command line would refuse (it is not compared)."""
    from trainbench.config.run import logged_param_problems

    params = dict(run.data.params)
    return bool(logged_param_problems(params) or logged_count_problems(params))


def comparison_runs(speeds: list[Speed], comparisons: list[DeviceComparison]) -> list[DeviceRun]:
    """The runs (of any sweep) whose speeds the device comparisons used: report.json's ``devices.runs``, so
    that the report names every run it read ({run_id, sweep_id, model, device, epoch_ms})."""
    used = {(c.model, d) for c in comparisons for d in (c.device, c.reference_device)}
    return [DeviceRun(run_id=s["run_id"], sweep_id=s.get(Tag.SWEEP_ID), model=s["model"], device=s["device"],
                      epoch_ms=s["epoch_ms"]) for s in speeds if (s["model"], s["device"]) in used]
