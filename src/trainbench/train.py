"""One Hydra job: validate the config, open the MLflow run, load data, build the model, measure, record.

The run is opened before the data and the model, so that a job that fails on bad data or a bad model
setting still leaves a FAILED run saying why (the analysis lists it). Known input problems raise
:data:`~trainbench.core.errors.USER_ERRORS`, which ``run.py`` prints as one message with a non-zero exit
(a single run) or records and skips (a sweep, whose summary then exits non-zero).

:func:`train_job` runs its stages in this order, each handing the next what it made:
:func:`_validate_and_resolve` (a :class:`_Job`) → :func:`_open_run` (a :class:`_Run`) → :func:`_log_inputs`
→ :func:`_load_data` → :func:`_build_and_fit` → :func:`_measure` → :func:`_after_the_epochs` (:func:`_latency`,
:func:`_noise_scale`) → :func:`_record` (and :func:`_workload_profile`) → :func:`_end`. Its stop signals are
handled by :class:`~trainbench.core.stop_signals.RunStops` (held while the run opens, noted from the end of the
epoch loop, passed on once the run has ended).

Every phase of the run is timed (:class:`_Phases`): a start and an end line in the log
(:func:`trainbench.core.progress.phase`) and a metric ``phase_s.<phase>`` (:data:`~trainbench.core.vocab.RUN_PHASES`);
the run's last line and its MLflow note say how much of its wall time (``run_wall_s``) the measured epochs
were (``measured_share_pct``). The phases after the measured epochs (latency, noise scale, workload
profile) are optional: a stop signal during one of them skips it and the ones after, and the run ends
``completed`` with what it measured, naming what was skipped (tag ``phases_skipped``); a signal while the
run is written is held until the writing is done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# torch.optim imports torch._dynamo on a process's first optimizer (about 1.2 s on a 2-core CPU): imported
# here with torch, so that the first job of a process does not book torch's start-up as its model build,
# and every job's `build` phase times the same thing
import torch
import torch._dynamo  # noqa: F401
from omegaconf import DictConfig, OmegaConf

from trainbench.config.run import validate
from trainbench.core.errors import (
    DISK_FULL_FIX,
    USER_ERRORS,
    DiskFull,
    JobFailed,
    ModelDataError,
    PluginError,
)
from trainbench.core.gitstate import git_state
from trainbench.core.progress import duration, phase
from trainbench.core.safe_text import term
from trainbench.core.secrets import install_log_redaction, redact
from trainbench.core.stop_signals import RunStops
from trainbench.core.trainable import Describes, Evaluates, StepsForMemory, WritesArtifacts, work_counts
from trainbench.core.vocab import (
    GPU_DEVICES_ENV,
    RUN_PHASES,
    WARMUP_EPOCHS_KEY,
    Artifact,
    BatchSizeSource,
    DataInfo,
    Kind,
    MemoryKind,
    Outcome,
    ParamKey,
    Phase,
    Summary,
    Tag,
    data_tag,
    model_info,
    phase_metric,
)
from trainbench.measure import fit as memfit
from trainbench.measure.hardware import environment, probe_device, resolve_device
from trainbench.measure.harness import is_oom, measure_latency, run_epochs
from trainbench.measure.load import LoadSampler
from trainbench.measure.precision import (
    apply_tf32,
    device_capability,
    fast_path_warnings,
    resolve_precision,
    resolve_tf32,
)
from trainbench.measure.stoprule import StopRule
from trainbench.models.base import BuildContext
from trainbench.models.registry import REGISTRY
from trainbench.models.runtime import flush_denormals, resolve_cuda_graphs, seed_everything
from trainbench.tracking.connection import connect
from trainbench.tracking.conventions import dataset_entity, native_run_tags
from trainbench.tracking.run_note import RunNote
from trainbench.tracking.writer import NullWriter, RunWriter, flatten

if TYPE_CHECKING:
    from trainbench.config.run import RunConfig, TrainerConfig
    from trainbench.core.trainable import Trainable
    from trainbench.data.market import MarketData
    from trainbench.measure.distributed import DistContext
    from trainbench.measure.fit import MemoryFit
    from trainbench.measure.hardware import DeviceInfo
    from trainbench.measure.harness import HarnessResult
    from trainbench.models.base import ModelSpec

log = logging.getLogger("trainbench")


def hydra_identity(cfg: DictConfig) -> tuple[str, str, bool, list[str]]:
    """(sweep_id, job, is_multirun, overrides) from Hydra's runtime config, or defaults outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        sid = cfg.get("sweep_id") or f"adhoc-{int(time.time())}"  # config key
        return str(sid), "0", False, []
    multirun = hc.mode == RunMode.MULTIRUN
    job = str(hc.job.num) if multirun else "0"
    from trainbench.core.safe_names import sweep_id

    sid = sweep_id(cfg.get("sweep_id"), hc.sweep.dir if multirun else hc.run.dir, multirun)  # config key
    return sid, job, multirun, list(hc.overrides.task)


@dataclass(frozen=True)
class _Job:
    """What a job resolves before its run opens: the config, the model, the device, the store, the recipe."""

    cfg: DictConfig
    obj: RunConfig
    spec: ModelSpec
    device: torch.device
    devinfo: DeviceInfo
    client: Any
    exp_id: str
    sweep_id: str
    job: str
    multirun: bool
    overrides: list[str]
    precision: str
    #: The precision and TF32 choices for this device with their reasons, recorded as params.
    recipe: dict[str, Any]
    #: This process's rank of a data-parallel job (trainbench.measure.distributed), None in an ordinary run.
    dist: DistContext | None = None
    #: What the run leaves out under data parallelism, and why (tag ``dist_note``); empty otherwise.
    dist_note: str = ""


@dataclass
class _Phases:
    """The seconds each phase of the run took (``phase_s.<phase>``), from the job's start; and, once a stop
    signal arrived after the measured epochs, the signal and the optional phases it skipped."""

    t0: float = field(default_factory=time.perf_counter)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    #: The job's stop signals (core/stop_signals.py): which one arrived after the measured epochs.
    stops: RunStops = field(default_factory=RunStops)

    @property
    def signal(self) -> str | None:
        return self.stops.signal

    @contextlib.contextmanager
    def timed(self, key: str, detail: str = "") -> Iterator[None]:
        """The phase ``key``: its start and end lines, its seconds added to ``phase_s.<key>``."""
        t = time.perf_counter()
        try:
            with phase(key.replace("_", " "), detail):
                yield
        finally:
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t

    def optional(self, key: str, fn: Callable[[], Any], detail: str = "") -> Any:
        """Run an optional phase after the measured epochs; None when a stop signal skipped it (during it or
        before it: the phases after a signal are skipped too, the run keeping what it measured)."""
        if self.signal is not None:
            self.skipped.append(key)
            log.info("phase %s: skipped (stop signal)", key.replace("_", " "))
            return None
        try:
            with self.stops.interruptible(), self.timed(key, detail):
                return fn()
        except KeyboardInterrupt as e:
            self.stops.signal = str(e) or "a stop signal"
            self.skipped.append(key)
            log.warning("%s during the %s phase: the run ends completed with what it measured, skipping the "
                        "phases still to come", self.signal, key.replace("_", " "))
            return None

    def _ordered(self) -> list[tuple[str, float]]:
        return sorted(self.seconds.items(), key=lambda kv: RUN_PHASES.index(kv[0]) if kv[0] in RUN_PHASES else 99)

    def wall_s(self) -> float:
        return time.perf_counter() - self.t0

    def metrics(self) -> dict[str, float]:
        """``phase_s.<phase>``, ``run_wall_s`` and (with measured epochs) ``measured_share_pct``."""
        wall = self.wall_s()
        out = {phase_metric(k): float(v) for k, v in self._ordered()}
        out[Summary.RUN_WALL_S] = wall
        if Phase.MEASURED_EPOCHS in self.seconds and wall > 0:
            out[Summary.MEASURED_SHARE_PCT] = 100.0 * self.seconds[Phase.MEASURED_EPOCHS] / wall
        return out

    def line(self, model: str, outcome: str) -> str:
        """The run's last line: its wall time, the measured epochs' share of it, every phase's seconds."""
        m = self.metrics()
        share = m.get(Summary.MEASURED_SHARE_PCT)
        measured = (f"measured epochs {duration(self.seconds[Phase.MEASURED_EPOCHS])} ({share:.0f}% of the run's "
                    "wall time)" if share is not None else "no measured epochs")
        parts = ", ".join(f"{k.replace('_', ' ')} {duration(v)}" for k, v in self._ordered())
        skipped = (f"; skipped after {self.signal}: {', '.join(k.replace('_', ' ') for k in self.skipped)}"
                   if self.signal and self.skipped else "")
        return (f"{model}: {outcome} in {duration(m[Summary.RUN_WALL_S])}; {measured}; phases: {parts}{skipped}")


@dataclass(frozen=True)
class _Run:
    """The job's open MLflow run: its writer, its id, the config it records and the note it ends with."""

    writer: RunWriter
    run_id: str
    #: The resolved config (enum values as the user types them), the run's params and config artifact.
    config: Any
    note: RunNote
    phases: _Phases = field(default_factory=_Phases)
    #: the machine's load, sampled from the run's opening (measure/load.py): the first epoch's figures then cover
    #: a long enough interval, however short that epoch
    load: LoadSampler = field(default_factory=LoadSampler)


def train_job(cfg: DictConfig, extra_tags: dict[str, str] | None = None,
              extra_artifacts: dict[str, Any] | None = None, dist: DistContext | None = None,
              on_run_open: Callable[[str], None] | None = None) -> str:
    """Run one job; return its outcome. Raises USER_ERRORS (bad input) or JobFailed (a recorded failure).

    ``extra_tags`` are set when the run opens; ``extra_artifacts`` ({file name: JSON-able object}) are
    logged with the config, before the data loads (trainbench.rerun passes its diff this way). ``dist``:
    this process is one rank of a data-parallel job (trainbench.ranks starts them): rank 0 alone writes the
    run, the others train beside it and record nothing (docs/distributed.md). ``on_run_open`` is called with
    the run id once the run is open.
    """
    phases = _Phases()
    phases.stops.start()
    install_log_redaction()
    with phases.timed(Phase.SETUP, "config, device, tracking store"), phases.stops.opening():
        job = _validate_and_resolve(cfg, dist)  # a signal meanwhile is held: once open, the run ends interrupted
        run = _open_run(job, extra_tags, phases)
    outcome, error = Outcome.FAILED, None
    try:
        try:  # the run is open: from here on every failure is recorded in it
            phases.stops.opened()
            if on_run_open is not None:
                on_run_open(run.run_id)
            with phases.timed(Phase.LOGGING, "the run's inputs"):
                _log_inputs(job, run, extra_artifacts)
            data = _load_data(job, run)
            trainable, fitting = _build_and_fit(job, run, data)
            result, summary = _measure(job, run, trainable, fitting)
            outcome, error = result.outcome, result.error
            if result.outcome == Outcome.COMPLETED:  # the optional phases: a stop signal skips them, not the run
                summary.update(_after_the_epochs(job, run, trainable, result))
            _record(job, run, trainable, fitting, data, result, summary)
        except KeyboardInterrupt:
            outcome, error = Outcome.INTERRUPTED, "interrupted by the user or a signal"
        except DiskFull as e:
            _end_disk_full(run.writer, e)
        except USER_ERRORS as e:
            _end_failed(run, Outcome.FAILED, str(e))
            raise
        except Exception as e:
            _end_failed(run, Outcome.OOM if is_oom(e) else Outcome.FAILED, f"{type(e).__name__}: {e}",
                        traceback.format_exc())
            raise
        return _end(run, outcome, error)
    finally:  # a stop signal noted after the epoch loop reaches its own handler once the run has ended
        phases.stops.pass_on()


def _after_the_epochs(job: _Job, run: _Run, trainable: Trainable, result: HarnessResult) -> dict[str, float]:
    """The optional phases of a completed run (a stop signal skips them, not the run): the inference latency
    and the gradient noise scale; hands on their summary metrics."""
    out: dict[str, float] = {}
    if job.obj.trainer.latency.enabled:
        measured_s = run.phases.seconds.get(Phase.MEASURED_EPOCHS, 0.0)
        out.update(run.phases.optional(Phase.LATENCY, lambda: _latency(job, run, trainable, result, measured_s)) or {})
    out.update(_noise_scale(job, run, trainable, result))
    return out


def _validate_and_resolve(cfg: DictConfig, dist: DistContext | None = None, plan_line: bool = True) -> _Job:
    """Validate the config and resolve, before anything is recorded, the model, the device, the tracking
    store, the job's place in its sweep and the device's precision recipe; hands on the :class:`_Job`.
    A rank of a data-parallel job (``dist``) trains on its own device; only rank 0 connects to the store."""
    obj = validate(cfg)
    if obj.trainer.deterministic:  # before anything touches CUDA: cuBLAS reads it when its handle is made
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    spec = REGISTRY.resolve(obj.model)  # model.name, or model.spec (model=custom)
    device = resolve_device(obj.trainer.device) if dist is None else dist.device
    main = dist is None or dist.is_main
    client, exp_id = connect(obj.tracking) if main else (None, "")
    sweep_id, job, multirun, overrides = hydra_identity(cfg)

    devinfo = probe_device(device)
    for w in devinfo.warnings:
        log.warning(w)
    note = _single_process_phases_off(obj.trainer, dist) if dist is not None else ""
    if plan_line:
        plan = redact(run_plan_line(spec.name, obj, device.type, devinfo.description.get("name")))
        log.info("%s", plan)
        if main:
            print(term(plan, keep_newlines=True), flush=True)  # a rerun's names come from a logged config
    precision, recipe = _precision_recipe(obj.trainer, device)
    return _Job(cfg, obj, spec, device, devinfo, client, exp_id, sweep_id, job, multirun, overrides, precision,
                recipe, dist, note)


def _single_process_phases_off(trainer: TrainerConfig, dist: DistContext) -> str:
    """Under data parallelism the run measures its epochs: the phases that step one process's model on its own
    (latency, noise scale, workload profile, memory prediction) would leave the other ranks waiting in an
    all-reduce, so they are turned off; hands on the note the run records (tag ``dist_note``)."""
    off = [name for name, on in (("latency", trainer.latency.enabled), ("noise scale", trainer.noise_scale.enabled),
                                 ("workload profile", trainer.profile_workload),
                                 ("memory prediction", trainer.memory.predict)) if on]
    trainer.latency.enabled = trainer.noise_scale.enabled = False
    trainer.profile_workload = trainer.memory.predict = False
    note = (f"data parallel, {dist.world_size} ranks ({dist.backend}): measured epochs only; not measured "
            f"(they step one process's model): {', '.join(off) or 'nothing'}")
    if dist.is_main:
        log.info("%s", note)
    return note


def run_plan_line(model: str, obj: Any, device_type: str, device_name: Any = None) -> str:
    """What the run will do and roughly how long it may take: the profile and why, the epochs, the budget."""
    t = obj.trainer
    why = f" ({t.profile_reason})" if t.profile_reason else ""
    stop = t.stop
    rule = (f"stopping earlier once the mean epoch time is known to +-{stop.rel_ci:.0%} after {stop.min_epochs} "
            "epochs" if stop.rel_ci and stop.min_epochs < t.epochs else "")
    budget = (f"at most {stop.budget_min:g} min of epochs (warmup included)" if stop.budget_min
              else "no time budget (trainer.stop.budget_min): the time is the epochs' time")
    extra = (" A CPU-sized run: the full profile, trainer=default, measures the reference sizes on a GPU."
             if t.profile == "cpu" else "")
    if obj.model.size != "reference" and t.reference_profile.enabled and t.profile_workload:
        extra += (f" Its reference size is profiled after it, without training (at most "
                  f"{t.reference_profile.budget_s:g} s; trainer.reference_profile).")
    world = t.distributed.nproc * t.distributed.nnodes
    ranks = f" as {world} data-parallel ranks" if world > 1 else ""
    phases = [name for name, on in (("latency", t.latency.enabled),
                                    (f"the gradient noise scale (at most {t.noise_scale.budget_frac:.0%} of the "
                                     "epochs' time)", t.noise_scale.enabled),
                                    ("the workload profile", t.profile_workload)) if on]
    if world > 1 and phases:  # one process's phases (_single_process_phases_off)
        after = "nothing after them (one process's phases are not measured across ranks)"
    else:
        after = f"then {', '.join(phases[:-1])}{' and ' if len(phases) > 1 else ''}{phases[-1]}" if phases \
            else "nothing after them"
    return (f"plan: {model} (size {obj.model.size}) on {device_type}"
            f"{f' ({device_name})' if device_name else ''}{ranks}, trainer profile {t.profile!r}{why}: "
            f"{t.warmup_epochs} warmup + up to {t.epochs} measured epochs{', ' + rule if rule else ''}; "
            f"{budget}; {after}.{extra}")


def _precision_recipe(trainer: TrainerConfig, device: torch.device) -> tuple[str, dict[str, Any]]:
    """The recipe for this device (trainer.precision=auto, trainer.tf32), TF32 applied on CUDA; hands on the
    precision and the recipe's params."""
    capability = device_capability(device)
    precision, precision_reason = resolve_precision(trainer.precision, device.type, capability)
    tf32, tf32_reason = resolve_tf32(trainer.tf32, device.type, capability)
    if device.type == "cuda":
        apply_tf32(tf32)
    recipe = {ParamKey.PRECISION_RESOLVED: precision, ParamKey.PRECISION_REASON: precision_reason,
              ParamKey.TF32_RESOLVED: tf32, ParamKey.TF32_REASON: tf32_reason}
    log.info("precision %s (%s); tf32 %s (%s)", precision, precision_reason, tf32, tf32_reason)
    return precision, recipe


def _open_run(job: _Job, extra_tags: dict[str, str] | None, phases: _Phases | None = None) -> _Run:
    """Open the MLflow run (status RUNNING) with its tags, the resolved config and the recipe as params;
    hands on the :class:`_Run`."""
    obj, spec, device, devinfo = job.obj, job.spec, job.device, job.devinfo
    # enum_to_str: params read `fp32`, `auto` (what a user types), not `Precision.fp32`
    resolved = OmegaConf.to_container(job.cfg, resolve=True, enum_to_str=True)
    tags = {Tag.KIND: Kind.TRAIN, Tag.MODEL: spec.name, Tag.MODEL_ORIGIN: REGISTRY.origin(spec.name),
            Tag.MODEL_SIZE: obj.model.size, Tag.DATA: obj.data.name,
            Tag.SWEEP_ID: job.sweep_id, Tag.JOB: job.job, Tag.PRECISION: job.precision, Tag.DEVICE: devinfo.label,
            Tag.OUTCOME: Outcome.RUNNING,
            Tag.MEMORY_KIND: MemoryKind.VRAM if device.type == "cuda" else MemoryKind.HOST,
            Tag.TRAINER_PROFILE: obj.trainer.profile, Tag.HARDWARE: obj.hardware.name, **git_state(obj.paths.root),
            **(extra_tags or {})}
    if job.dist is not None and not job.dist.is_main:  # only rank 0 writes the run
        return _Run(NullWriter(), "", resolved, RunNote(spec.name, obj.model.size, devinfo.label, obj.data.name,
                                                         precision=job.precision), phases or _Phases())
    # MLflow's source and parent-run tags
    tags.update(native_run_tags(job.client, job.exp_id, job.sweep_id, job.multirun, tags))
    if os.environ.get(GPU_DEVICES_ENV):  # the GPUs hydra/launcher=local_gpus gave this job
        tags[Tag.GPU_DEVICES] = os.environ[GPU_DEVICES_ENV]
    if devinfo.warnings:
        tags[Tag.DEVICE_WARNINGS] = " | ".join(devinfo.warnings)
    if job.dist_note:
        tags[Tag.DIST_NOTE] = job.dist_note
    writer = RunWriter(job.client, job.exp_id, flush_every=obj.trainer.flush_every,
                       flush_min_interval_s=obj.trainer.flush_min_interval_s, spool_dir=obj.tracking.spool_dir,
                       spool_wait_s=obj.tracking.spool_wait_s, resend_every_s=obj.tracking.resend_every_s)
    bs = obj.model.batch_size
    run_id = writer.start(f"{spec.name}__{obj.model.size}__{obj.data.name}__bs{bs}__seed{obj.trainer.seed}", tags,
                          {**flatten(resolved), **job.recipe})
    writer.describe = note = RunNote(spec.name, obj.model.size, devinfo.label, obj.data.name,
                                     precision=job.precision)
    log.info("MLflow run %s (experiment %r, sweep %s) at %s", run_id, obj.tracking.experiment, job.sweep_id,
             obj.tracking.uri)
    return _Run(writer, run_id, resolved, note, phases or _Phases())


def _log_inputs(job: _Job, run: _Run, extra_artifacts: dict[str, Any] | None) -> None:
    """Log what the job was asked to do and where: the resolved config, the overrides, the environment and
    the caller's extra artifacts."""
    writer = run.writer
    writer.log_text(OmegaConf.to_yaml(run.config), Artifact.CONFIG)
    writer.log_text(OmegaConf.to_yaml(job.overrides), Artifact.OVERRIDES)
    writer.log_dict(environment(job.devinfo), Artifact.ENVIRONMENT)
    for name, obj_ in (extra_artifacts or {}).items():
        writer.log_dict(obj_, name)


def _load_data(job: _Job, run: _Run) -> MarketData:
    """Load the data onto the device and record what it is; raises ModelDataError when the model trains on
    another kind. Hands on the data."""
    from trainbench.data.loader import load_market_data

    obj, spec = job.obj, job.spec
    with run.phases.timed(Phase.DATA, f"data={obj.data.name}"):  # the loader logs the generation phase when it generates
        data = load_market_data(obj.data, root=obj.paths.root, data_dir=obj.paths.data_dir, device=job.device)
    run.writer.set_tags({data_tag(k): v for k, v in data.info().items()})
    run.writer.log_dataset(dataset_entity(obj.data.name, data.info()), context="training")
    if spec.data_kind != data.kind:
        raise ModelDataError(f"model {spec.name} trains on {spec.data_kind} data but data={obj.data.name} "
                             f"holds {data.kind} ({data.schema}). Choose a matching data config.")
    return data


def _build_and_fit(job: _Job, run: _Run, data: MarketData) -> tuple[Trainable, MemoryFit]:
    """Seed, choose the fast paths, fit the batch plan to the memory budget and build the model with it,
    recording each choice; hands on the trainable model and the memory fit."""
    obj, spec, device, writer = job.obj, job.spec, job.device, run.writer
    seed_everything(obj.trainer.seed, obj.trainer.deterministic)
    graphs, graphs_reason = resolve_cuda_graphs(obj.trainer.cuda_graphs, device, job.precision, spec.cuda_graphs)
    if graphs and job.dist is not None:
        graphs, graphs_reason = False, "not with trainer.distributed: the all-reduce is not captured"
    writer.log_params({ParamKey.CUDA_GRAPHS_RESOLVED: graphs, ParamKey.CUDA_GRAPHS_REASON: graphs_reason,
                       ParamKey.CPU_FLUSH_DENORMAL: flush_denormals(device)})
    ctx = BuildContext(device=device, seed=obj.trainer.seed, precision=job.precision,
                       compile=obj.trainer.compile, deterministic=obj.trainer.deterministic,
                       optimizer_impl=obj.trainer.optimizer_impl.value, cuda_graphs=graphs, dist=job.dist)
    for w in fast_path_warnings(dataclasses.replace(obj.trainer, precision=job.precision), device):
        log.warning(w)

    def build_at(batch: int, accum: int) -> Trainable:  # memory fitting builds with another batch plan
        return spec.build(dataclasses.replace(obj.model, batch_size=batch), data,
                          dataclasses.replace(ctx, grad_accum=accum))

    # budget cap, `auto` batch search, micro-batch plan and peak prediction (measure/fit.py)
    with run.phases.timed(Phase.MEMORY_FIT, "batch search" if str(obj.model.batch_size) == "auto"
                          else "budget and prediction"):
        fitting = memfit.resolve(obj.model, obj.trainer, obj.hardware, device, build_at, extra=(data,))
    seed_everything(obj.trainer.seed, obj.trainer.deterministic)  # probes drew from the generators
    with run.phases.timed(Phase.BUILD, f"model {spec.name}"):
        trainable = build_at(fitting.plan.optimiser, fitting.plan.accum)
    if job.dist is not None and not job.dist.wrapped:
        raise PluginError(f"model {spec.name} declares data_parallel=True but its training forward passes do not "
                          "go through ctx.maybe_compile (no module was wrapped in DDP): see "
                          "trainbench.core.trainable.DATA_PARALLEL, or declare data_parallel=False.")
    world = 1 if job.dist is None else job.dist.world_size
    writer.log_params({ParamKey.WORLD_SIZE: world, ParamKey.DIST_BACKEND: "none" if job.dist is None else
                       job.dist.backend, ParamKey.GLOBAL_BATCH_SIZE: fitting.plan.optimiser,
                       ParamKey.BATCH_SIZE_PER_RANK: fitting.plan.optimiser // world,
                       ParamKey.DATA_PARALLEL_SUPPORTED: str(bool(spec.data_parallel)).lower(),
                       ParamKey.VALIDATION_SHARDED: str(bool(spec.data_parallel)
                                                        and isinstance(trainable, Evaluates)).lower()})
    with run.phases.timed(Phase.MEMORY_PREDICTION):
        fitting.predict(trainable, extra=(data,))
    writer.log_params(fitting.params())
    writer.set_tags(fitting.tags())
    writer.log_dict(fitting.as_dict(), Artifact.MEMORY_FIT)
    if fitting.source != BatchSizeSource.CONFIG or fitting.prediction is not None:
        line = fitting.summary_line(spec.name, obj.hardware.name)
        log.info("%s", line)
        print(term(line, keep_newlines=True), flush=True)
    info = trainable.info() if isinstance(trainable, Describes) else {}
    writer.log_params({model_info(k): v for k, v in info.items()})
    writer.log_params({ParamKey.SAMPLES_PER_EPOCH: trainable.samples_per_epoch, **work_counts(trainable)})
    run.note.params = info.get("num_params")
    _tag_instruments_without_windows(run, data)
    return trainable, fitting


def _tag_instruments_without_windows(run: _Run, data: MarketData) -> None:
    """Instruments that gave the model no training window (data/features.py warned about each): named in
    ``data_instruments_without_windows`` and left out of ``data_instruments``."""
    fs = data.features
    if fs is None or not fs.without_windows or data.bars is None:
        return
    idle = set(fs.without_windows.values())
    run.writer.set_tags({data_tag(DataInfo.INSTRUMENTS): ",".join(s for s in data.bars.symbols if s not in idle),
                         data_tag(DataInfo.INSTRUMENTS_WITHOUT_WINDOWS): ",".join(sorted(idle))})


def _measure(job: _Job, run: _Run, trainable: Trainable, fitting: MemoryFit) -> tuple[HarnessResult, dict[str, float]]:
    """Train the warmup and measured epochs (each epoch streamed to the run); hands on the harness's result
    and the run's summary metrics."""
    obj, device = job.obj, job.device
    result = run_epochs(trainable, device, obj.trainer.epochs, obj.trainer.warmup_epochs, sink=run.writer,
                        sample_device=job.devinfo.sample if device.type == "cuda" else None,
                        progress=obj.trainer.progress, desc=job.spec.name,
                        stop=StopRule.from_config(obj.trainer.stop),
                        progress_every_epochs=obj.trainer.progress_every_epochs,
                        progress_every_s=obj.trainer.progress_every_s, dist=job.dist, load=run.load,
                        on_loop_end=run.phases.stops.note_after_loop)
    run.writer.set_tags({Tag.STOP_REASON: result.stop_reason})
    run.phases.seconds.update(result.phase_s)
    summary = dict(result.summary)
    summary.update(fitting.metrics())
    measured = summary.get(Summary.PEAK_VRAM_MB_MAX)
    if measured and Summary.PREDICTED_PEAK_VRAM_MB in summary:
        predicted = summary[Summary.PREDICTED_PEAK_VRAM_MB]
        summary[Summary.PREDICTED_PEAK_ERROR_PCT] = 100.0 * (predicted - measured) / measured
    summary[Summary.LOSS_START] = result.stability[Summary.LOSS_START]
    summary[Summary.LOSS_END] = result.stability[Summary.LOSS_END]
    return result, summary


#: A forward pass at the training batch, estimated as a third of a training step (the backward pass costs about
#: twice the forward), may be off by this factor either way: the batch is left out of the latency only when
#: even its estimate divided by this cannot fit.
LATENCY_ESTIMATE_SLACK = 2.0


def _step_s(trainable: Trainable, result: HarnessResult) -> float | None:
    """One training step's mean seconds: the measured epochs' mean over the steps of an epoch."""
    epoch_s = result.summary.get(Summary.EPOCH_TIME_MS_MEAN, math.nan) / 1e3
    steps = max(1, int(trainable.samples_per_epoch) // max(1, int(trainable.batch_size)))
    return epoch_s / steps if math.isfinite(epoch_s) else None


def latency_batches(batch: int, step_s: float | None, share_s: float, warmup: int) -> tuple[list[int], list[str]]:
    """The batch sizes whose latency is measured (batch 1, the trading case, always; the training ``batch``
    unless the passes it needs at least, one warmup and one sample, estimated from the training step
    ``step_s``, cannot fit its share of the budget, ``share_s``) and, for each left out, why."""
    sizes = sorted({1, batch})
    if batch == 1 or step_s is None:
        return sizes, []
    passes = (1 if warmup > 0 else 0) + 1
    pass_s = step_s / 3
    if pass_s * passes / LATENCY_ESTIMATE_SLACK <= share_s:
        return sizes, []
    return [1], [f"not measured at batch {batch}: {passes} pass(es) there (~{duration(pass_s)} each, estimated "
                 f"from the training step) cannot fit its share of the budget, {duration(share_s)} "
                 f"(trainer.latency.budget_frac of the measured epochs, shared by the batch sizes); raise "
                 f"trainer.latency.budget_frac to measure it"]


def _latency(job: _Job, run: _Run, trainable: Trainable, result: HarnessResult, measured_s: float) -> dict[str, float]:
    """The inference latency of a completed run at batch 1 and its training batch (measure/harness.py), within
    ``trainer.latency.budget_frac`` of the measured epochs' time ``measured_s``; the training batch is left out,
    the tag ``latency_note`` saying so, where even its first passes cannot fit (:func:`latency_batches`)."""
    lat = job.obj.trainer.latency
    batch = int(trainable.batch_size)
    share = lat.budget_frac * measured_s / len({1, batch})  # each batch size's share of the budget
    sizes, notes = latency_batches(batch, _step_s(trainable, result), share, lat.warmup)
    if notes:
        log.info("latency %s", "; ".join(notes))
        run.writer.set_tags({Tag.LATENCY_NOTE: "; ".join(notes)[:500]})
    return measure_latency(trainable, job.device, sizes, lat.warmup, lat.samples, budget_s=share * len(sizes))


def _noise_scale(job: _Job, run: _Run, trainable: Trainable, result: HarnessResult) -> dict[str, float]:
    """The gradient noise scale of a completed run (measure/noise_scale.py), from the model's own step at two
    batch sizes, after the measured epochs and outside the timed region, within its budget
    (``trainer.noise_scale``: a share of the measured epochs' time, as many pairs as fit); hands on its
    summary metrics: the estimate with its pairs and relative standard error, or none where it does not
    apply (turned off, no ``memory_step``, ``trainer.compile``, a batch too small to split, no pair within
    the budget, or an estimate that is not positive), the reason in the tag ``noise_scale_note``. A failure
    here never fails the run."""
    cfg = job.obj.trainer.noise_scale
    why = ("turned off (trainer.noise_scale.enabled=false)" if not cfg.enabled
           else "not with trainer.compile" if job.obj.trainer.compile
           else "the model has no memory_step" if not isinstance(trainable, StepsForMemory) else None)
    if why:
        log.info("gradient noise scale not measured: %s", why)
        run.writer.set_tags({Tag.NOISE_SCALE_NOTE: why})
        return {}
    from trainbench.measure.noise_scale import measure_noise_scale

    measured_s = run.phases.seconds.get(Phase.MEASURED_EPOCHS, 0.0)
    budget = cfg.budget_frac * measured_s
    step_s = _step_s(trainable, result)
    pair_estimate = None if step_s is None else step_s * 1.125  # a big step and an eighth
    detail = f"at most {cfg.max_pairs} pairs within {duration(budget)} ({cfg.budget_frac:.0%} of the measured epochs)"

    def measure() -> dict[str, Any] | None:
        return measure_noise_scale(trainable.memory_step, int(trainable.batch_size),
                                   trainable.batch_limit, pairs=cfg.max_pairs, budget_s=budget,
                                   pair_estimate_s=pair_estimate)

    try:
        est = run.phases.optional(Phase.NOISE_SCALE, measure, detail)
    except Exception as e:  # noqa: BLE001 - an estimate that fails never fails the run
        log.warning("gradient noise scale not measured (%s: %s)", type(e).__name__, e)
        run.writer.set_tags({Tag.NOISE_SCALE_NOTE: f"failed: {type(e).__name__}: {e}"[:500]})
        return {}
    if est is None:
        note = ("stopped by a stop signal" if run.phases.signal else "the batch is too small to split")
        log.info("gradient noise scale not measured: %s", note)
        run.writer.set_tags({Tag.NOISE_SCALE_NOTE: note})
        return {}
    out = {Summary.NOISE_SCALE_PAIRS: float(est["pairs"])}
    notes = []
    if est["stopped"] == "budget":
        notes.append(f"the budget ({duration(budget)}) allowed {est['pairs']} of {est['pairs_max']} pairs")
    if est["b_simple"] is None:
        notes.append(f"not resolved: {est.get('why')}")
        log.info("gradient noise scale not measured: %s", "; ".join(notes))
        run.writer.set_tags({Tag.NOISE_SCALE_NOTE: "; ".join(notes)[:500]})
        return out
    rse = est["rel_se"]
    log.info("gradient noise scale B_simple %.3g (from batches %d and %d, %d pair(s), relative standard error "
             "%s)%s", est["b_simple"], est["b_small"], est["b_big"], est["pairs"],
             "n/a" if rse is None else f"{rse:.0%}", f"; {notes[0]}" if notes else "")
    if notes:
        run.writer.set_tags({Tag.NOISE_SCALE_NOTE: "; ".join(notes)[:500]})
    out.update({Summary.NOISE_SCALE: float(est["b_simple"]), Summary.NOISE_SCALE_G2: float(est["g2"]),
                Summary.NOISE_SCALE_TRACE: float(est["trace_sigma"]),
                Summary.NOISE_SCALE_B_SMALL: float(est["b_small"]), Summary.NOISE_SCALE_B_BIG: float(est["b_big"])})
    if rse is not None:
        out[Summary.NOISE_SCALE_REL_SE] = float(rse)
    return out


def _record(job: _Job, run: _Run, trainable: Trainable, fitting: MemoryFit, data: MarketData, result: HarnessResult,
            summary: dict[str, float]) -> None:
    """Record what was measured: the summary, the stability tags, the per-epoch series, a completed model's
    artifacts and its workload profile; then report it in the log."""
    writer, outcome = run.writer, result.outcome
    with run.phases.timed(Phase.LOGGING, "summary, series and artifacts"):  # stop signals are noted (stops.note_after_loop)
        writer.log_summary(summary)
        run.note.summary = summary
        writer.set_tags({Tag.LOSS_TREND: result.stability[Tag.LOSS_TREND],
                         Tag.GRADIENT_HEALTH: result.stability[Tag.GRADIENT_HEALTH]})
        writer.log_text(json.dumps({WARMUP_EPOCHS_KEY: result.warmup_epochs, **result.series}), Artifact.EPOCHS)
        if job.dist is not None:
            writer.log_dict({ParamKey.WORLD_SIZE: job.dist.world_size, "ranks": result.rank_epoch_ms},
                            Artifact.RANK_EPOCH_MS)
        if isinstance(trainable, WritesArtifacts) and outcome == Outcome.COMPLETED:
            with tempfile.TemporaryDirectory() as d:
                for p in trainable.write_artifacts(Path(d)):
                    writer.log_artifact(p, Artifact.MODEL_DIR)
    trainer = job.obj.trainer
    if outcome == Outcome.COMPLETED and trainer.profile_workload and not trainer.compile:
        if _wants_prediction(trainable, trainer, fitting):  # its own phase: a fake-tensor trace of two steps
            run.phases.optional(Phase.MEMORY_PREDICTION, lambda: _predict_for_projection(
                trainable, writer, fitting, (data,)))
        fake, why = _trace_on_fakes(trainable, summary, run.phases.seconds.get(Phase.MEMORY_PREDICTION))
        run.phases.optional(Phase.WORKLOAD_PROFILE, lambda: _workload_profile(
            trainable, job.device, trainer, writer, fitting, (data,), job.precision, predict=False,
            fake=fake, why=why, epoch_ms=summary.get(Summary.EPOCH_TIME_MS_MEAN)))
    elif outcome == Outcome.COMPLETED:  # records why nothing was profiled
        _workload_profile(trainable, job.device, job.obj.trainer, writer, fitting, (data,), job.precision)
    _report(job.spec.name, outcome, summary, result.memory_kind)


def _end_failed(run: _Run, outcome: str, error: str, trace: str | None = None) -> None:
    """End the run as ``outcome`` with its error (and, for an unexpected one, its traceback as an artifact);
    the caller raises the error on."""
    run.note.error = error
    run.writer.set_tags({Tag.ERROR: error[:5000]})
    if trace is not None:
        run.writer.log_text(trace, Artifact.ERROR)
    _log_phases(run, outcome)
    run.writer.end(outcome, run.phases.stops.interruptible)  # its wait for a store that is away stops at Ctrl-C


def _log_phases(run: _Run, outcome: str) -> None:
    """The phases' metrics, the skipped phases' tag, the note's figures and the run's last line."""
    phases = run.phases
    metrics = phases.metrics()
    run.writer.log_summary(metrics)
    run.note.phases = metrics
    if phases.signal:
        run.writer.set_tags({Tag.PHASES_SKIPPED: ",".join(phases.skipped) or "none"})
        run.note.skipped = f"{phases.signal}: skipped {', '.join(phases.skipped) or 'nothing'}"
    line = redact(phases.line(run.note.model, outcome))
    log.info("%s", line)
    if not isinstance(run.writer, NullWriter):  # a data-parallel job's other ranks: rank 0 says it
        print(line, flush=True)


def _end(run: _Run, outcome: str, error: str | None) -> str:
    """End the run with its outcome; hands on the outcome of a completed run whose every write the store took,
    else raises JobFailed (a spooled run names ``trainbench sync``)."""
    writer = run.writer
    delivered = False
    try:
        if error:
            run.note.error = error
            writer.set_tags({Tag.ERROR: error[:5000]})
        _log_phases(run, outcome)
        delivered = writer.end(outcome, run.phases.stops.interruptible)  # its wait for a store that is away stops at Ctrl-C
    except DiskFull as e:
        _end_disk_full(writer, e)
    if outcome != Outcome.COMPLETED or not delivered:  # a spooled run exits non-zero too, naming `trainbench sync`
        raise JobFailed(outcome, "; ".join(m for m in (error, None if delivered else _spooled_message(writer))
                                           if m), run.run_id)
    return outcome


def _spooled_message(writer: RunWriter) -> str:
    folder = writer.spool_path
    return (f"the tracking store {writer.tracking_uri} did not take all of its writes: they are kept in "
            f"{folder}, and `trainbench sync {folder}` will finish the run when the store is back.")


def _end_disk_full(writer: RunWriter, e: DiskFull) -> None:
    """A full disk: stop, end the run as ``disk_full`` where the store still takes it, exit non-zero."""
    recorded = writer.end_disk_full(str(e))
    folder = writer.spool_path
    if recorded:
        where = "the run is recorded as disk_full with every epoch written before"
    elif folder is not None:
        where = f"the writes not yet stored are kept in {folder}; free space, then `trainbench sync {folder}`"
    else:
        where = "the run stays RUNNING in the store, with the epochs written before the disk filled up"
    raise JobFailed(Outcome.DISK_FULL, f"{e}. Training stopped; {where}. {DISK_FULL_FIX}", writer.run_id) from None


def _wants_prediction(trainable: Trainable, trainer: Any, fitting: Any) -> bool:
    """A run without a memory prediction gets one for the analysis (does the model fit a GPU?)."""
    return fitting.prediction is None and trainer.memory.predict and isinstance(trainable, StepsForMemory)


def _predict_for_projection(trainable: Trainable, writer: RunWriter, fitting: Any, extra: tuple[Any, ...]) -> None:
    """The predicted CUDA peak of a run that has none, traced on fake tensors (records its own failure)."""
    fitting.wants_prediction = True
    fitting.predict(trainable, extra)
    writer.log_summary(fitting.metrics())


def _trace_on_fakes(trainable: Trainable, summary: dict[str, float], predict_s: float | None) -> tuple[bool, str]:
    """Whether the workload profile traces fake tensors, and why: where a step on fakes costs less than a
    real one. A fake step costs the instruments' time per op whatever the tensors' sizes (measured here by the
    memory prediction, two steps on fakes); a real step costs its kernels (the measured epoch's mean over its
    ``samples_per_epoch / batch_size`` steps). On a CPU at the small sizes a real step is the cheaper (an op
    on fakes costs ~0.2 ms, 15x a small real op); at the reference sizes a real step costs seconds."""
    from trainbench.measure.predict import TRACE_STEPS

    epoch_ms = summary.get(Summary.EPOCH_TIME_MS_MEAN)
    samples, batch = trainable.samples_per_epoch, trainable.batch_size
    if not predict_s or not epoch_ms or not isinstance(samples, int) or not isinstance(batch, int) or batch < 1:
        return False, "no fake step measured to compare with a real one"
    fake_s, real_s = predict_s / TRACE_STEPS, epoch_ms / 1000.0 / max(1, samples // batch)

    def s(x: float) -> str:
        return f"{x * 1000:.0f} ms" if x < 1 else duration(x)

    if fake_s < real_s:
        return True, f"a step on fake tensors ~{s(fake_s)} < a real step ~{s(real_s)}"
    return False, f"a real step ~{s(real_s)} <= a step on fake tensors ~{s(fake_s)}"


def _workload_profile(trainable: Trainable, device: torch.device, trainer: Any, writer: RunWriter, fitting: Any,
                      extra: tuple[Any, ...], precision: str = "fp32", predict: bool = True, fake: bool = False,
                      why: str = "", epoch_ms: float | None = None) -> bool:
    """The workload profile of one epoch (a few steps per loop, scaled: measure/workload.py), after everything
    measured was recorded; and,
    where the run has none, the predicted CUDA peak (so the analysis can say whether a model fits a GPU).
    Logs ``workload_profile.json`` (incomplete, with its reasons, where kernels bypass the dispatcher) and
    the aggregate ``workload.*`` metrics of a profiled epoch. ``predict=False``: the caller made the
    prediction (as its own phase). ``fake``: trace fake tensors (real ones where the model's ops need values),
    ``why`` the choice; the tags ``workload_profile_mode`` and ``workload_profile_method`` say what was done,
    and the log line what the trace cost beside a measured epoch (``epoch_ms``, their mean). Returns whether a
    profile was logged."""
    if not trainer.profile_workload:
        return False
    from trainbench.measure.workload import (
        bypass_reasons,
        incomplete_artifact,
        profile_artifact,
        profile_epoch,
        profile_metrics,
    )

    reasons = bypass_reasons(trainable, compile=trainer.compile)
    if trainer.compile:  # compiled code under the dispatch modes would recompile: record why, measure nothing
        writer.log_dict(incomplete_artifact(reasons, device, precision), Artifact.WORKLOAD_PROFILE)
        return False
    if predict and _wants_prediction(trainable, trainer, fitting):
        _predict_for_projection(trainable, writer, fitting, extra)
    try:
        t0 = time.perf_counter()
        prof = profile_epoch(trainable, device, precision, reasons, fake=fake)
        traced_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - a profile that fails never fails the run
        log.warning("workload profile failed (%s: %s): no projections for this run", type(e).__name__, e)
        writer.set_tags({Tag.WORKLOAD_PROFILE_ERROR: f"{type(e).__name__}: {e}"[:500]})
        return False
    mode = f"{prof['mode']}{f' ({why})' if why and prof['mode'] in ('fake tensors', 'real tensors') else ''}"
    cost = f" ({100 * traced_s / (epoch_ms / 1e3):.0f}% of a measured epoch)" if epoch_ms else ""
    log.info("workload profile: %s; %s; traced in %.2f s%s", mode, prof["method"].removeprefix(prof["mode"] + "; "),
             traced_s, cost)
    writer.set_tags({Tag.WORKLOAD_PROFILE_MODE: mode[:500], Tag.WORKLOAD_PROFILE_METHOD: prof["method"][:500]})
    _host_dispatch(prof)
    writer.log_summary(profile_metrics(prof))
    writer.log_dict(profile_artifact(prof), Artifact.WORKLOAD_PROFILE)
    return True


def _host_dispatch(prof: dict[str, Any]) -> None:
    """Add what one eager op costs this host (measure/dispatch.py) to the profile's ``host`` entry: the analysis
    floors a launch-bound step on a GPU of this machine with it. Never fails the run."""
    from trainbench.measure.dispatch import dispatch_us_per_op

    try:
        prof["host"]["dispatch_us_per_op"] = round(dispatch_us_per_op()["us_per_op"], 3)
    except Exception as e:  # noqa: BLE001 - a figure the analysis can do without
        log.warning("host dispatch not measured (%s: %s)", type(e).__name__, e)


# --------------------------------------------------------------------------------------------------
# a reference-size profile run (trainbench/reference_profile.py): the same stages, no epoch trained
# --------------------------------------------------------------------------------------------------


def resolve_profile_job(cfg: DictConfig) -> _Job:
    """:func:`_validate_and_resolve` for a profile run: no training plan line (the caller prints its own)."""
    return _validate_and_resolve(cfg, plan_line=False)


def open_profile_run(job: _Job, tags: dict[str, str]) -> _Run:
    """Open a profile run (``tags`` name its kind and the trained run it belongs to)."""
    return _open_run(job, tags)


def profile_stages(job: _Job, run: _Run) -> None:
    """Log the config, load the data, build the model at its batch plan, predict its CUDA peak and profile one
    epoch on fake tensors; raises RuntimeError where no profile could be made (its reason tagged)."""
    with run.phases.timed(Phase.LOGGING, "the run's inputs"):
        _log_inputs(job, run, None)
    data = _load_data(job, run)
    trainable, fitting = _build_and_fit(job, run, data)
    trainer = job.obj.trainer
    if _wants_prediction(trainable, trainer, fitting):
        with run.phases.timed(Phase.MEMORY_PREDICTION, "fake tensors"):
            _predict_for_projection(trainable, run.writer, fitting, (data,))
    with run.phases.timed(Phase.WORKLOAD_PROFILE, "fake tensors"):
        done = _workload_profile(trainable, job.device, trainer, run.writer, fitting, (data,), job.precision,
                                 predict=False, fake=True, why="the reference size, profiled without training")
    if not done:
        raise RuntimeError("no workload profile could be made (tag workload_profile_error says why)")


def end_profile_run(run: _Run, outcome: str, error: str | None) -> None:
    """End a profile run with its outcome (``profiled``, ``failed`` or ``interrupted``) and error."""
    if error:
        run.note.error = error
        run.writer.set_tags({Tag.ERROR: error[:5000]})
    _log_phases(run, outcome)
    run.writer.end(outcome)


def _report(model: str, outcome: str, summary: dict[str, float], memory_kind: str) -> None:
    mean = summary.get(Summary.EPOCH_TIME_MS_MEAN)
    if mean is None:
        log.info("%s: %s, no measured epoch", model, outcome)
        return
    peak = summary.get(Summary.PEAK_VRAM_MB_MAX, summary.get(Summary.PEAK_HOST_MB_MAX, float("nan")))
    log.info("%s: %s; epoch %.1f ms mean (p50 %.1f, p95 %.1f) over %d epochs; peak %s %.0f MB; harness "
             "overhead %.2f%%", model, outcome, mean, summary[Summary.EPOCH_TIME_MS_P50], summary[Summary.EPOCH_TIME_MS_P95],
             int(summary[Summary.EPOCHS_MEASURED]), memory_kind, peak, summary[Summary.HARNESS_OVERHEAD_PCT])
