"""One Hydra job: validate the config, open the MLflow run, load data, build the model, measure, record.

The run is opened before the data and the model, so that a job that fails on bad data or a bad model
setting still leaves a FAILED run saying why (the analysis lists it). Known input problems raise
:data:`~trainbench.core.errors.USER_ERRORS`, which ``run.py`` prints as one message with a non-zero exit
(a single run) or records and skips (a sweep, whose summary then exits non-zero).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from trainbench.config.run import validate
from trainbench.core.errors import DISK_FULL_FIX, USER_ERRORS, DiskFull, JobFailed, ModelDataError
from trainbench.core.gitstate import git_state
from trainbench.core.secrets import install_log_redaction
from trainbench.core.vocab import (
    WARMUP_EPOCHS_KEY,
    WORK_COUNTS,
    Artifact,
    BatchSizeSource,
    Kind,
    MemoryKind,
    Outcome,
    ParamKey,
    Summary,
    Tag,
    data_tag,
    model_info,
)
from trainbench.measure import fit as memfit
from trainbench.measure.hardware import environment, probe_device, resolve_device
from trainbench.measure.harness import is_oom, measure_latency, run_epochs
from trainbench.measure.perf import fast_path_warnings
from trainbench.measure.precision import apply_tf32, device_capability, resolve_precision, resolve_tf32
from trainbench.measure.stoprule import StopRule
from trainbench.models.base import BuildContext, flush_denormals, resolve_cuda_graphs, seed_everything
from trainbench.models.registry import REGISTRY
from trainbench.tracking import native
from trainbench.tracking.connection import connect
from trainbench.tracking.native import native_run_tags
from trainbench.tracking.writer import RunWriter, flatten

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
    base = Path(hc.sweep.dir if multirun else hc.run.dir)
    job = str(hc.job.num) if multirun else "0"
    overrides = list(hc.overrides.task)
    if cfg.get("sweep_id"):  # config key
        return str(cfg.sweep_id), job, multirun, overrides
    digest = hashlib.sha1(str(base.resolve()).encode()).hexdigest()[:6]
    from trainbench.core.safe_names import safe_id

    slug = safe_id("_".join(base.parts[-2:]) if not multirun else base.name)  # a folder name may hold anything
    return f"{slug}-{digest}", job, multirun, overrides


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def train_job(cfg: DictConfig, extra_tags: dict[str, str] | None = None,
              extra_artifacts: dict[str, Any] | None = None) -> str:
    """Run one job; return its outcome. Raises USER_ERRORS (bad input) or JobFailed (a recorded failure).

    ``extra_tags`` are set when the run opens; ``extra_artifacts`` ({file name: JSON-able object}) are
    logged with the config, before the data loads (trainbench.rerun passes its diff this way).
    """
    with contextlib.suppress(ValueError):  # ValueError: not the main thread (some launchers)
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        if os.environ.get("SUBMITIT_EXECUTOR"):  # submitit's time-limit/preemption signal: end as interrupted
            signal.signal(signal.SIGUSR2, _sigterm_to_interrupt)
    install_log_redaction()
    obj = validate(cfg)
    if obj.trainer.deterministic:  # before anything touches CUDA: cuBLAS reads it when its handle is made
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    spec = REGISTRY.resolve(obj.model)  # model.name, or model.spec (model=custom)
    device = resolve_device(obj.trainer.device)
    client, exp_id = connect(obj.tracking)
    sweep_id, job, multirun, overrides = hydra_identity(cfg)
    root = obj.paths.root

    devinfo = probe_device(device)
    for w in devinfo.warnings:
        log.warning(w)
    profile = obj.trainer.profile
    if device.type == "cpu":
        log.info("device: cpu (%s). Profile %r: %d measured + %d warmup epochs%s.", devinfo.description.get("name"),
                 profile, obj.trainer.epochs, obj.trainer.warmup_epochs,
                 "" if profile != "cpu" else " (a CPU-sized run: the full profile, trainer=default, is 500 "
                 "epochs on a GPU)")

    # the recipe for this device (trainer.precision=auto, trainer.tf32), recorded as params
    capability = device_capability(device)
    precision, precision_reason = resolve_precision(obj.trainer.precision, device.type, capability)
    tf32, tf32_reason = resolve_tf32(obj.trainer.tf32, device.type, capability)
    if device.type == "cuda":
        apply_tf32(tf32)
    recipe = {ParamKey.PRECISION_RESOLVED: precision, ParamKey.PRECISION_REASON: precision_reason,
              ParamKey.TF32_RESOLVED: tf32, ParamKey.TF32_REASON: tf32_reason}
    log.info("precision %s (%s); tf32 %s (%s)", precision, precision_reason, tf32, tf32_reason)

    # enum_to_str: params read `fp32`, `auto` (what a user types), not `Precision.fp32`
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    tags = {Tag.KIND: Kind.TRAIN, Tag.MODEL: spec.name, Tag.MODEL_ORIGIN: REGISTRY.origin(spec.name),
            Tag.MODEL_SIZE: obj.model.size, Tag.DATA: obj.data.name,
            Tag.SWEEP_ID: sweep_id, Tag.JOB: job, Tag.PRECISION: precision, Tag.DEVICE: devinfo.label,
            Tag.OUTCOME: Outcome.RUNNING,
            Tag.MEMORY_KIND: MemoryKind.VRAM if device.type == "cuda" else MemoryKind.HOST,
            Tag.TRAINER_PROFILE: profile, Tag.HARDWARE: obj.hardware.name, **git_state(root), **(extra_tags or {})}
    tags.update(native_run_tags(client, exp_id, sweep_id, multirun, tags))  # MLflow's source/parent tags
    if devinfo.warnings:
        tags[Tag.DEVICE_WARNINGS] = " | ".join(devinfo.warnings)
    writer = RunWriter(client, exp_id, flush_every=obj.trainer.flush_every,
                       flush_min_interval_s=obj.trainer.flush_min_interval_s, spool_dir=obj.tracking.spool_dir,
                       spool_wait_s=obj.tracking.spool_wait_s, resend_every_s=obj.tracking.resend_every_s)
    bs = obj.model.batch_size
    run_id = writer.start(f"{spec.name}__{obj.model.size}__{obj.data.name}__bs{bs}__seed{obj.trainer.seed}", tags,
                          {**flatten(resolved), **recipe})
    writer.describe = note = native.RunNote(spec.name, obj.model.size, devinfo.label, obj.data.name,
                                            precision=precision)
    log.info("MLflow run %s (experiment %r, sweep %s) at %s", run_id, obj.tracking.experiment, sweep_id,
             obj.tracking.uri)

    outcome, error = Outcome.FAILED, None
    try:
        writer.log_text(OmegaConf.to_yaml(resolved), Artifact.CONFIG)
        writer.log_text(OmegaConf.to_yaml(overrides), Artifact.OVERRIDES)
        writer.log_dict(environment(devinfo), Artifact.ENVIRONMENT)
        for name, obj_ in (extra_artifacts or {}).items():
            writer.log_dict(obj_, name)

        from trainbench.data.loader import load_market_data

        data = load_market_data(obj.data, root=root, data_dir=obj.paths.data_dir, device=device)
        writer.set_tags({data_tag(k): v for k, v in data.info().items()})
        writer.log_dataset(native.dataset_entity(obj.data.name, data.info()), context="training")
        if spec.data_kind != data.kind:
            raise ModelDataError(f"model {spec.name} trains on {spec.data_kind} data but data={obj.data.name} "
                                 f"holds {data.kind} ({data.schema}). Choose a matching data config.")

        seed_everything(obj.trainer.seed, obj.trainer.deterministic)
        graphs, graphs_reason = resolve_cuda_graphs(obj.trainer.cuda_graphs, device, precision,
                                                    spec.cuda_graphs)
        writer.log_params({ParamKey.CUDA_GRAPHS_RESOLVED: graphs, ParamKey.CUDA_GRAPHS_REASON: graphs_reason,
                           ParamKey.CPU_FLUSH_DENORMAL: flush_denormals(device)})
        ctx = BuildContext(device=device, seed=obj.trainer.seed, precision=precision,
                           compile=obj.trainer.compile, deterministic=obj.trainer.deterministic,
                           optimizer_impl=obj.trainer.optimizer_impl.value, cuda_graphs=graphs)
        for w in fast_path_warnings(dataclasses.replace(obj.trainer, precision=precision), device):
            log.warning(w)

        def build_at(batch: int, accum: int) -> Any:  # memory fitting builds with another batch plan
            return spec.build(dataclasses.replace(obj.model, batch_size=batch), data,
                              dataclasses.replace(ctx, grad_accum=accum))

        # budget cap, `auto` batch search, micro-batch plan and peak prediction (measure/fit.py)
        fitting = memfit.resolve(obj.model, obj.trainer, obj.hardware, device, build_at, extra=(data,))
        seed_everything(obj.trainer.seed, obj.trainer.deterministic)  # probes drew from the generators
        trainable = build_at(fitting.plan.optimiser, fitting.plan.accum)
        fitting.predict(trainable, extra=(data,))
        writer.log_params(fitting.params())
        writer.set_tags(fitting.tags())
        writer.log_dict(fitting.as_dict(), Artifact.MEMORY_FIT)
        if fitting.source != BatchSizeSource.CONFIG or fitting.prediction is not None:
            line = fitting.summary_line(spec.name, obj.hardware.name)
            log.info("%s", line)
            print(line, flush=True)
        info = trainable.info() if hasattr(trainable, "info") else {}
        writer.log_params({model_info(k): v for k, v in info.items()})
        writer.log_params({ParamKey.SAMPLES_PER_EPOCH: trainable.samples_per_epoch,
                           **{k: getattr(trainable, k) for k in WORK_COUNTS if getattr(trainable, k, None) is not None}})
        note.params = info.get("num_params")

        result = run_epochs(trainable, device, obj.trainer.epochs, obj.trainer.warmup_epochs, sink=writer,
                            sample_device=devinfo.sample if device.type == "cuda" else None,
                            progress=obj.trainer.progress, desc=spec.name,
                            stop=StopRule.from_config(obj.trainer.stop))
        outcome, error = result.outcome, result.error
        writer.set_tags({Tag.STOP_REASON: result.stop_reason})
        summary = dict(result.summary)
        summary.update(fitting.metrics())
        measured = summary.get(Summary.PEAK_VRAM_MB_MAX)
        if measured and Summary.PREDICTED_PEAK_VRAM_MB in summary:
            predicted = summary[Summary.PREDICTED_PEAK_VRAM_MB]
            summary[Summary.PREDICTED_PEAK_ERROR_PCT] = 100.0 * (predicted - measured) / measured
        if outcome == Outcome.COMPLETED and obj.trainer.latency.enabled:
            summary.update(measure_latency(trainable, device, sorted({1, trainable.batch_size}),
                                           obj.trainer.latency.warmup, obj.trainer.latency.samples))
        summary[Summary.LOSS_START] = result.stability[Summary.LOSS_START]
        summary[Summary.LOSS_END] = result.stability[Summary.LOSS_END]
        writer.log_summary(summary)
        note.summary = summary
        writer.set_tags({Tag.LOSS_TREND: result.stability[Tag.LOSS_TREND],
                         Tag.GRADIENT_HEALTH: result.stability[Tag.GRADIENT_HEALTH]})
        writer.log_text(json.dumps({WARMUP_EPOCHS_KEY: result.warmup_epochs, **result.series}), Artifact.EPOCHS)
        if hasattr(trainable, "write_artifacts") and outcome == Outcome.COMPLETED:
            with tempfile.TemporaryDirectory() as d:
                for p in trainable.write_artifacts(Path(d)):
                    writer.log_artifact(p, Artifact.MODEL_DIR)
        if outcome == Outcome.COMPLETED:
            _workload_profile(trainable, device, obj.trainer, writer, fitting, (data,))
        _report(spec.name, outcome, summary, result.memory_kind)
    except KeyboardInterrupt:
        outcome, error = Outcome.INTERRUPTED, "interrupted by the user or a signal"
    except DiskFull as e:
        _end_disk_full(writer, e)
    except USER_ERRORS as e:
        outcome, error = Outcome.FAILED, str(e)
        note.error = error
        writer.set_tags({Tag.ERROR: str(e)[:5000]})
        writer.end(outcome)
        raise
    except Exception as e:
        outcome, error = (Outcome.OOM if is_oom(e) else Outcome.FAILED), f"{type(e).__name__}: {e}"
        note.error = error
        writer.set_tags({Tag.ERROR: error[:5000]})
        writer.log_text(traceback.format_exc(), Artifact.ERROR)
        writer.end(outcome)
        raise
    delivered = False
    try:
        if error:
            note.error = error
            writer.set_tags({Tag.ERROR: error[:5000]})
        delivered = writer.end(outcome)
    except DiskFull as e:
        _end_disk_full(writer, e)
    if outcome != Outcome.COMPLETED or not delivered:  # a spooled run exits non-zero too, naming `trainbench sync`
        raise JobFailed(outcome, "; ".join(m for m in (error, None if delivered else _spooled_message(writer))
                                           if m), run_id)
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


def _workload_profile(trainable: Any, device: torch.device, trainer: Any, writer: RunWriter, fitting: Any,
                      extra: tuple[Any, ...]) -> None:
    """One more epoch under the workload counters, after everything measured was recorded; and,
    where the run has none, the predicted CUDA peak (so the analysis can say whether a model fits a GPU)."""
    if not trainer.profile_workload or trainer.compile:
        return
    from trainbench.measure.workload import profile_epoch, profile_metrics

    if fitting.prediction is None and trainer.memory.predict and hasattr(trainable, "memory_step"):
        fitting.wants_prediction = True
        fitting.predict(trainable, extra)  # traced on fake tensors; records its own failure
        writer.log_summary(fitting.metrics())
    try:
        prof = profile_epoch(trainable, device)
    except Exception as e:  # noqa: BLE001 - a profile that fails never fails the run
        log.warning("workload profile failed (%s: %s): no projections for this run", type(e).__name__, e)
        writer.set_tags({Tag.WORKLOAD_PROFILE_ERROR: f"{type(e).__name__}: {e}"[:500]})
        return
    writer.log_summary(profile_metrics(prof))
    writer.log_dict(prof, Artifact.WORKLOAD_PROFILE)


def _report(model: str, outcome: str, summary: dict[str, float], memory_kind: str) -> None:
    mean = summary.get(Summary.EPOCH_TIME_MS_MEAN)
    if mean is None:
        log.info("%s: %s, no measured epoch", model, outcome)
        return
    peak = summary.get(Summary.PEAK_VRAM_MB_MAX, summary.get(Summary.PEAK_HOST_MB_MAX, float("nan")))
    log.info("%s: %s; epoch %.1f ms mean (p50 %.1f, p95 %.1f) over %d epochs; peak %s %.0f MB; harness "
             "overhead %.2f%%", model, outcome, mean, summary[Summary.EPOCH_TIME_MS_P50], summary[Summary.EPOCH_TIME_MS_P95],
             int(summary[Summary.EPOCHS_MEASURED]), memory_kind, peak, summary[Summary.HARNESS_OVERHEAD_PCT])
