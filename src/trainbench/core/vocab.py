"""The run contract as code: every name the trainer writes to MLflow and the analysis reads back.

Outcomes and their MLflow run statuses, tag names and their values, per-epoch and summary metric names,
artifact names and the param keys the analysis and the fast paths read. This module imports nothing from
the project (and nothing heavy), so the writer, the harness, the analysis, ``rerun`` and the tests can all
import it; no other module spells these strings. ``docs/run-contract.md`` describes each name and
``tests/core/test_vocab.py`` checks the two agree. Raise :data:`CONTRACT_VERSION` when a name changes
meaning or disappears (adding a name does not break a reader).

The namespaces are plain classes of ``str`` constants (not enums), so a name is the plain string MLflow
stores; :func:`names` lists a namespace's values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Raised when a name below changes meaning or is removed.
CONTRACT_VERSION = 2  # 2: the gradient_health tag writes non_finite (was nonfinite)


def names(namespace: type) -> tuple[str, ...]:
    """The string values of a namespace class, in definition order."""
    return tuple(v for k, v in vars(namespace).items() if k.isupper() and isinstance(v, str))


# --------------------------------------------------------------------------------------------------
# outcomes and MLflow run statuses
# --------------------------------------------------------------------------------------------------


class Outcome:
    """The ``outcome`` tag of a run, and the words the sweep summary and the analysis use for runs."""

    RUNNING = "running"  # while training
    COMPLETED = "completed"
    OOM = "oom"
    DIVERGED = "diverged"  # a non-finite loss or gradient
    FAILED = "failed"  # any other error
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, a scheduler's time limit
    DISK_FULL = "disk_full"
    NOT_RUN = "not_run"  # a sweep's job skipped after a stop signal (job ledger only)
    STALE = "stale"  # the analysis' word for a run left RUNNING by a killed process
    IN_PROGRESS = "in_progress"  # the analysis' word for a run still RUNNING while its sweep's parent run is too
    UNRECORDED = "unrecorded"  # the sweep summary's word for a job that completed but whose run is missing
    INVALID = "invalid"  # the analysis' word for a run whose logged values the command line would refuse
    #: a reference-size profile run (``kind=profile``): its workload profile and memory prediction were recorded,
    #: no epoch was trained (docs/run-contract.md, "The reference size, profiled")
    PROFILED = "profiled"


#: ``models.<m>.source`` in report.json of a size profiled, not trained (the word of its runs' outcome): its hours
#: exist only where the analysis projects it onto a GPU
SOURCE_PROFILED = Outcome.PROFILED

#: What the measured epoch loop can end as (the harness).
HARNESS_OUTCOMES = (Outcome.COMPLETED, Outcome.OOM, Outcome.DIVERGED, Outcome.FAILED, Outcome.INTERRUPTED)
#: The final outcome of a training run (``profiled``: a profile run's).
FINAL_OUTCOMES = (*HARNESS_OUTCOMES, Outcome.DISK_FULL, Outcome.PROFILED)


class Status:
    """MLflow's run statuses (``mlflow.entities.RunStatus`` names)."""

    RUNNING = "RUNNING"
    SCHEDULED = "SCHEDULED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


#: The MLflow status a run ends with, per outcome.
STATUS = {Outcome.COMPLETED: Status.FINISHED, Outcome.OOM: Status.FAILED, Outcome.DIVERGED: Status.FAILED,
          Outcome.FAILED: Status.FAILED, Outcome.INTERRUPTED: Status.KILLED, Outcome.DISK_FULL: Status.FAILED,
          Outcome.PROFILED: Status.FINISHED}
#: The outcome of a closed run without an ``outcome`` tag, from its status.
STATUS_OUTCOME = {Status.FINISHED: Outcome.COMPLETED, Status.FAILED: Outcome.FAILED,
                  Status.KILLED: Outcome.INTERRUPTED}
#: Statuses of a run that was never closed (reported as ``stale``).
OPEN_STATUSES = (Status.RUNNING, Status.SCHEDULED)
#: The outcomes of a sweep's parent run and their statuses.
SWEEP_STATUS = {Outcome.COMPLETED: Status.FINISHED, Outcome.FAILED: Status.FAILED,
                Outcome.INTERRUPTED: Status.KILLED}


# --------------------------------------------------------------------------------------------------
# tags
# --------------------------------------------------------------------------------------------------


class Tag:
    """Run tag names."""

    KIND = "kind"
    MODEL = "model"
    DATA = "data"
    MODEL_ORIGIN = "model_origin"
    MODEL_SIZE = "model_size"
    PRECISION = "precision"
    STOP_REASON = "stop_reason"
    SWEEP_ID = "sweep_id"
    SWEEP_HOST = "sweep_host"  # the sweep's parent run: the host and process id of the `run.py -m` process
    SWEEP_PID = "sweep_pid"
    JOB = "job"
    DEVICE = "device"
    #: the GPUs the job's launcher gave it (its CUDA_VISIBLE_DEVICES, ``hydra/launcher=local_gpus``)
    GPU_DEVICES = "gpu_devices"
    OUTCOME = "outcome"
    GIT_COMMIT = "git_commit"
    GIT_DIRTY = "git_dirty"
    GIT_DIFF_SHA256 = "git_diff_sha256"
    MEMORY_KIND = "memory_kind"
    TRAINER_PROFILE = "trainer_profile"
    HARDWARE = "hardware"
    LOSS_TREND = "loss_trend"
    GRADIENT_HEALTH = "gradient_health"
    ERROR = "error"
    DEVICE_WARNINGS = "device_warnings"
    WORKLOAD_PROFILE_ERROR = "workload_profile_error"
    #: how the workload profile was made: steps scaled (which loops, how many of how many steps) or whole
    WORKLOAD_PROFILE_METHOD = "workload_profile_method"
    #: the tensors the workload profile traced: ``fake`` (shapes only) or ``real``, and why
    WORKLOAD_PROFILE_MODE = "workload_profile_mode"
    #: why the gradient noise scale was not measured, or stopped early (budget, signal)
    NOISE_SCALE_NOTE = "noise_scale_note"
    #: a batch size whose inference latency was not measured, and why (its first passes cannot fit the budget)
    LATENCY_NOTE = "latency_note"
    #: the phases after the measured epochs a stop signal skipped (the run stays ``completed``)
    PHASES_SKIPPED = "phases_skipped"
    #: A run under data parallelism, or asked for it: what it did not do and why (the phases that run on one
    #: process only, a model that runs on one rank); docs/distributed.md.
    DIST_NOTE = "dist_note"
    # memory fitting
    BATCH_SIZE_SOURCE = "batch_size_source"
    PREDICTED_BATCH_SIZE = "predicted_batch_size"
    PREDICTED_FITS = "predicted_fits"
    VRAM_BUDGET_MB = "vram_budget_mb"
    VRAM_TOTAL_MB = "vram_total_mb"
    PREDICTION_ERROR = "prediction_error"
    # reruns
    RERUN_OF = "rerun_of"
    RERUN_DIFFERS = "rerun_differs"
    RERUN_DATA_MATCH = "rerun_data_match"
    RERUN_NONCE = "rerun_nonce"
    RERUN_LOSSES_IDENTICAL = "rerun_losses_identical"
    RERUN_LOSS_MAX_ABS_DIFF = "rerun_loss_max_abs_diff"
    RERUN_OF_HYDRA = "rerun_of_hydra"
    # the reference size (docs/run-contract.md, "The reference size, profiled")
    #: on a profile run (``kind=profile``): the run id of the job's trained run whose data and job it shares
    PROFILE_OF = "profile_of"
    #: on a trained run: the other sizes whose workload is the same as the one measured (e.g. ``reference`` on a
    #: DQN run at ``small``: the two sizes are one config), so that the analysis decides on it for either size
    SIZE_SAME_AS = "size_same_as"
    #: on a trained run: why its reference size was not profiled, or how its profile run ended
    REFERENCE_PROFILE_NOTE = "reference_profile_note"


#: The environment variable through which a launcher tells its job which GPUs it gave it (the value of the
#: job's ``CUDA_VISIBLE_DEVICES``); the run logs it as the ``gpu_devices`` tag when it is set.
GPU_DEVICES_ENV = "TRAINBENCH_GPU_DEVICES"


#: Prefix of the tags describing the data a run measured on (``data_`` + a key of :class:`DataInfo`).
DATA_TAG_PREFIX = "data_"


class DataInfo:
    """Keys of the data description a loader gives (``MarketData.info()``); tagged as ``data_<key>``."""

    PATH = "path"
    SCHEMA = "schema"
    SYNTHETIC = "synthetic"
    SHA256 = "sha256"
    N_BARS = "n_bars"  # OHLCV bars
    N_EVENTS = "n_events"  # MBP-10 book events
    INSTRUMENTS = "instruments"
    INSTRUMENTS_WITHOUT_WINDOWS = "instruments_without_windows"  # too few bars for one training window
    START = "start"
    END = "end"


def data_tag(key: str) -> str:
    """The tag of one data fact, ``data_<key>``."""
    return f"{DATA_TAG_PREFIX}{key}"


DATA_TAGS = tuple(data_tag(k) for k in names(DataInfo))


class Kind:
    """Values of the ``kind`` tag."""

    TRAIN = "train"
    SWEEP = "sweep"
    #: a reference-size profile run: profiled, not trained (outcome ``profiled``)
    PROFILE = "size_profile"
    ANALYSIS = "analysis"
    COMPARE = "compare"


class StopReason:
    """Values of the ``stop_reason`` tag besides the outcome of a run that did not complete."""

    CONVERGED = "converged"
    BUDGET = "budget"
    MAX_EPOCHS = "max_epochs"


class MemoryKind:
    """Values of the ``memory_kind`` tag."""

    VRAM = "vram"  # CUDA allocator peaks
    HOST = "host"  # peak RSS on CPU


class LossTrend:
    """Values of the ``loss_trend`` tag (defined by ``trainbench.core.trend.classify_loss``)."""

    CONVERGING = "converging"
    FLAT = "flat"
    DIVERGING = "diverging"
    NON_FINITE = "non_finite"
    UNKNOWN = "unknown"


class GradientHealth:
    """Values of the ``gradient_health`` tag and of the report's ``stability.gradient_health`` (one definition:
    ``trainbench.core.grad_health.classify_gradients``; runs recorded before it wrote ``nonfinite`` and
    reports said ``ok``: ``trainbench.core.grad_health.normalise`` reads those)."""

    HEALTHY = "healthy"
    NON_FINITE = "non_finite"
    EXPLODING = "exploding"
    VANISHING = "vanishing"
    UNKNOWN = "unknown"
    NONFINITE = NON_FINITE  # the old attribute name (its stored word was "nonfinite")


class BatchSizeSource:
    """Values of the ``batch_size_source`` tag and param."""

    CONFIG = "config"
    MEASURED = "measured"
    PREDICTED = "predicted"


# --------------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------------


class Series:
    """Per-epoch metrics (``step`` = epoch index from 0, warmup included) and the keys of ``epochs.json``."""

    EPOCH_TIME_MS = "epoch_time_ms"  # the training pass
    EVAL_TIME_MS = "eval_time_ms"  # the validation pass, timed separately
    LOSS = "loss"
    VAL_LOSS = "val_loss"
    GRAD_NORM = "grad_norm"
    SAMPLES_PER_S = "samples_per_s"
    TRAIN_SAMPLES_PER_S = "train_samples_per_s"
    ENV_STEPS_PER_S = "env_steps_per_s"
    PEAK_VRAM_MB = "peak_vram_mb"
    PEAK_VRAM_RESERVED_MB = "peak_vram_reserved_mb"
    PEAK_HOST_MB = "peak_host_mb"
    GPU_TEMP_C = "gpu_temp_c"
    GPU_SM_CLOCK_MHZ = "gpu_sm_clock_mhz"
    GPU_POWER_W = "gpu_power_w"
    CPU_BUSY_PCT = "cpu_busy_pct"
    CPU_OTHER_PCT = "cpu_other_pct"
    CPU_STEAL_PCT = "cpu_steal_pct"
    GPU_OTHER_PROCESSES = "gpu_other_processes"
    #: Gradient all-reduce time the backward pass did not hide, summed over the epoch's steps, slowest rank
    #: (runs with world_size > 1; docs/distributed.md).
    COMM_EXPOSED_MS = "comm_exposed_ms"
    HOST_WAIT_PCT = "host_wait_pct"  # the harness thread's run-queue wait, % of the interval (measure/load.py)
    CONTAMINATED = "contaminated"
    #: Not logged: the analysis' name for the training pass alone once ``epoch_time_ms`` includes validation.
    TRAIN_TIME_MS = "train_time_ms"


#: The ``epochs.json`` key holding the number of warmup epochs (the other keys are :class:`Series` names).
WARMUP_EPOCHS_KEY = "warmup_epochs"
#: The per-epoch memory metric of each memory kind.
PEAK_MEMORY = {MemoryKind.VRAM: Series.PEAK_VRAM_MB, MemoryKind.HOST: Series.PEAK_HOST_MB}


def per_s(count: str) -> str:
    """The per-epoch rate of a per-epoch count (``train_samples`` -> ``train_samples_per_s``)."""
    return f"{count}_per_s"


def mean(series: str) -> str:
    """``<series>_mean``: the mean over the measured epochs."""
    return f"{series}_mean"


def std(series: str) -> str:
    return f"{series}_std"


def p50(series: str) -> str:
    return f"{series}_p50"


def p95(series: str) -> str:
    return f"{series}_p95"


def p99(series: str) -> str:
    return f"{series}_p99"


def max_of(series: str) -> str:
    """``<series>_max``: the largest value over the run (memory peaks) or the measured epochs (load)."""
    return f"{series}_max"


def at_failure(series: str) -> str:
    """``<series>_at_failure``: the memory peak when an ``oom`` run failed."""
    return f"{series}_at_failure"


def at_batch(key: str, batch: int) -> str:
    """An inference metric at batch ``batch``: the key itself at batch 1, else suffixed ``_b<batch>``."""
    return key if batch == 1 else f"{key}_b{batch}"


def runs_with(outcome: str) -> str:
    """A sweep parent's count of nested runs with one outcome, ``runs_<outcome>``."""
    return f"runs_{outcome}"


def workload_metric(op_class: str, dtype: str, quantity: str) -> str:
    """``workload.<class>.<dtype>.<flops|bytes|ops>``: one cell of a run's workload profile."""
    return f"{WORKLOAD_PREFIX}{op_class}.{dtype}.{quantity}"


def phase_metric(phase: str) -> str:
    """``phase_s.<phase>``: the seconds one phase of a run took (:data:`RUN_PHASES`)."""
    return f"{PHASE_PREFIX}{phase}"


#: Prefix of the per-phase durations.
PHASE_PREFIX = "phase_s."
#: A run's phases in order, as ``phase_s.<phase>`` names them: setup (config, device, tracking store, the run
#: opened, its inputs logged), data, memory fit, build, memory prediction, warmup, measured epochs, latency,
#: noise scale, workload profile, logging (the summary, series and artifacts written, the run ended).
class Phase:
    """The phases of a run, as ``phase_s.<phase>`` names them."""

    SETUP = "setup"
    DATA = "data"
    MEMORY_FIT = "memory_fit"
    BUILD = "build"
    MEMORY_PREDICTION = "memory_prediction"
    WARMUP = "warmup"
    MEASURED_EPOCHS = "measured_epochs"
    LATENCY = "latency"
    NOISE_SCALE = "noise_scale"
    WORKLOAD_PROFILE = "workload_profile"
    LOGGING = "logging"


RUN_PHASES = (Phase.SETUP, Phase.DATA, Phase.MEMORY_FIT, Phase.BUILD, Phase.MEMORY_PREDICTION, Phase.WARMUP,
              Phase.MEASURED_EPOCHS, Phase.LATENCY, Phase.NOISE_SCALE, Phase.WORKLOAD_PROFILE, Phase.LOGGING)


#: Prefix of the per op class and dtype workload metrics.
WORKLOAD_PREFIX = "workload."


class Summary:
    """Summary metrics, logged once at the end of a run (measured epochs only)."""

    EPOCH_TIME_MS_MEAN = mean(Series.EPOCH_TIME_MS)
    EPOCH_TIME_MS_STD = std(Series.EPOCH_TIME_MS)
    EPOCH_TIME_MS_P50 = p50(Series.EPOCH_TIME_MS)
    EPOCH_TIME_MS_P95 = p95(Series.EPOCH_TIME_MS)
    EPOCH_TIME_MS_P99 = p99(Series.EPOCH_TIME_MS)
    EVAL_TIME_MS_MEAN = mean(Series.EVAL_TIME_MS)
    EPOCH_TOTAL_MS_MEAN = "epoch_total_ms_mean"  # training + validation pass
    EPOCH_TOTAL_MS_P50 = "epoch_total_ms_p50"
    PEAK_VRAM_MB_MAX = max_of(Series.PEAK_VRAM_MB)
    PEAK_HOST_MB_MAX = max_of(Series.PEAK_HOST_MB)
    PEAK_VRAM_MB_AT_FAILURE = at_failure(Series.PEAK_VRAM_MB)
    PEAK_HOST_MB_AT_FAILURE = at_failure(Series.PEAK_HOST_MB)
    HARNESS_OVERHEAD_PCT = "harness_overhead_pct"
    EPOCHS_MEASURED = "epochs_measured"
    LOSS_START = "loss_start"
    LOSS_END = "loss_end"
    STOP_REL_CI95 = "stop_rel_ci95"
    STOP_EPOCHS = "stop_epochs"
    STOP_TRUNCATED_EPOCHS = "stop_truncated_epochs"  # initial transient the stop rule dropped (MSER-5)
    STOP_BATCHES = "stop_batches"  # batches of the stop rule's batch-means half-width
    GPU_POWER_W_MEAN = mean(Series.GPU_POWER_W)
    CONTAMINATED_EPOCHS = "contaminated_epochs"
    CONTAMINATED_PCT = "contaminated_pct"
    CPU_OTHER_PCT_MEAN = mean(Series.CPU_OTHER_PCT)
    CPU_OTHER_PCT_MAX = max_of(Series.CPU_OTHER_PCT)
    CPU_STEAL_PCT_MEAN = mean(Series.CPU_STEAL_PCT)
    CPU_STEAL_PCT_MAX = max_of(Series.CPU_STEAL_PCT)
    HOST_WAIT_PCT_MEAN = mean(Series.HOST_WAIT_PCT)
    HOST_WAIT_PCT_MAX = max_of(Series.HOST_WAIT_PCT)
    #: the mean over every finite measured epoch, contaminated ones included (``epoch_time_ms_mean`` is
    #: over the epochs the analysis uses: trainbench.core.contamination_policy)
    EPOCH_TIME_MS_MEAN_RAW = "epoch_time_ms_mean_raw"
    CONTAMINATED_USED = "contaminated_used"  # 1 when the summary's epoch times include contaminated epochs
    # inference latency at batch 1 (:func:`at_batch` for the training batch)
    INFER_LATENCY_MS_P50 = "infer_latency_ms_p50"
    INFER_LATENCY_MS_P99 = "infer_latency_ms_p99"
    INFER_THROUGHPUT_PER_S = "infer_throughput_per_s"
    # memory fitting
    PREDICTED_PEAK_VRAM_MB = "predicted_peak_vram_mb"
    PREDICTED_PEAK_VRAM_RESERVED_MB = "predicted_peak_vram_reserved_mb"
    #: the part of the predicted peak that grows with the micro-batch (activations and the step's temporaries)
    PREDICTED_ACTIVATIONS_MB = "predicted_activations_mb"
    PREDICTED_PEAK_ERROR_PCT = "predicted_peak_error_pct"
    # workload profile totals (:func:`workload_metric` for the breakdown)
    WORKLOAD_FLOPS_PER_EPOCH = "workload_flops_per_epoch"
    WORKLOAD_BYTES_PER_EPOCH = "workload_bytes_per_epoch"
    WORKLOAD_OPS_PER_EPOCH = "workload_ops_per_epoch"
    HOST_DISPATCH_US_PER_OP = "host_dispatch_us_per_op"  # one eager op of a tiny CPU step, µs (measure/dispatch.py)
    # the gradient noise scale (measure/noise_scale.py), after the measured epochs
    NOISE_SCALE = "noise_scale"  # B_simple = tr(Sigma) / |G|^2
    NOISE_SCALE_G2 = "noise_scale_g2"
    NOISE_SCALE_TRACE = "noise_scale_trace_sigma"
    NOISE_SCALE_B_SMALL = "noise_scale_b_small"
    NOISE_SCALE_B_BIG = "noise_scale_b_big"
    NOISE_SCALE_PAIRS = "noise_scale_pairs"  # pairs of steps taken within the budget
    NOISE_SCALE_REL_SE = "noise_scale_rel_se"  # relative standard error of B_simple over the pairs
    # the run's phases (:func:`phase_metric` per phase)
    RUN_WALL_S = "run_wall_s"  # the job's wall time, from its start to the run's end
    MEASURED_SHARE_PCT = "measured_share_pct"  # the measured epochs' share of run_wall_s
    # a sweep's parent run (:func:`runs_with` per outcome)
    RUNS = "runs"
    RUNS_COMPLETED = "runs_completed"
    RUNS_NOT_COMPLETED = "runs_not_completed"
    # the analysis run
    TOTAL_HOURS = "total_hours"
    TOTAL_HOURS_CONSERVATIVE = "total_hours_conservative"
    CONFIDENCE_LEVEL = "confidence_level"  # 0 low, 1 medium, 2 high
    LOCAL_USD = "local_usd"
    MODELS_MEASURED = "models_measured"
    MODELS_MISSING = "models_missing"


#: The summary metric of each memory kind's peak.
PEAK_MEMORY_MAX = {kind: max_of(name) for kind, name in PEAK_MEMORY.items()}


class ReportKey:
    """Tags and params of the runs the analysis logs back (``kind=analysis``, ``kind=compare``), beside
    ``kind``, ``sweep_id`` and ``device``."""

    RECOMMENDATION = "recommendation"
    CONFIDENCE = "confidence"
    PARTIAL = "partial"
    MODELS_IN_TOTAL = "models_in_total"
    SWEEP_A = "sweep_a"  # a comparison's baseline sweep
    SWEEP_B = "sweep_b"  # and the sweep compared with it


def verdict_tag(label: str) -> str:
    """A comparison run's verdict on one model, ``verdict.<model>``."""
    return f"verdict.{label}"


def change_pct(label: str) -> str:
    """A comparison run's change of one model's epoch time, in percent: ``change_pct.<model>``."""
    return f"change_pct.{label}"


def p_value(label: str) -> str:
    """A comparison run's Mann-Whitney p-value for one model: ``p_value.<model>``."""
    return f"p_value.{label}"


# --------------------------------------------------------------------------------------------------
# params
# --------------------------------------------------------------------------------------------------


class ParamKey:
    """Param keys written beside the flattened config, and the config keys the analysis reads."""

    TRAINER_PRECISION = "trainer.precision"
    TRAINER_COMPILE = "trainer.compile"
    TRAINER_OPTIMIZER_IMPL = "trainer.optimizer_impl"

    # config keys the analysis reads (the flattened config)
    MODEL_SIZE = "model.size"
    WARMUP_EPOCHS = "trainer.warmup_epochs"
    TARGET_EPOCHS = "model.target_epochs"
    BATCH_SIZE = "model.batch_size"
    # the recipe, resolved for the device
    PRECISION_RESOLVED = "trainer.precision_resolved"
    PRECISION_REASON = "trainer.precision_reason"
    TF32_RESOLVED = "trainer.tf32_resolved"
    TF32_REASON = "trainer.tf32_reason"
    CUDA_GRAPHS_RESOLVED = "cuda_graphs_resolved"
    CUDA_GRAPHS_REASON = "cuda_graphs_reason"
    CPU_FLUSH_DENORMAL = "cpu_flush_denormal"
    # the work of an epoch
    SAMPLES_PER_EPOCH = "samples_per_epoch"
    TRAIN_SAMPLES = "train_samples"
    ENV_STEPS = "env_steps"
    # memory fitting
    BATCH_SIZE_RESOLVED = "batch_size_resolved"
    MICRO_BATCH_SIZE = "micro_batch_size"
    GRAD_ACCUM_RESOLVED = "grad_accum_resolved"
    BATCH_SIZE_SOURCE = "batch_size_source"
    MEMORY_BUDGET_MB = "memory_budget_mb"
    MEMORY_BUDGET_SOURCE = "memory_budget_source"
    VRAM_TOTAL_MB = "vram_total_mb"
    VRAM_BUDGET_MB = "vram_budget_mb"
    VRAM_FRACTION = "vram_fraction"
    # a sweep's parent run
    SWEEP_OVERRIDES = "sweep.overrides"
    # data parallelism (docs/distributed.md): every run has them; runs logged before them read as world_size 1
    WORLD_SIZE = "world_size"
    DIST_BACKEND = "dist_backend"  # nccl | gloo, or "none" when world_size is 1
    BATCH_SIZE_PER_RANK = "batch_size_per_rank"
    GLOBAL_BATCH_SIZE = "global_batch_size"  # batch_size_per_rank x world_size
    DATA_PARALLEL_SUPPORTED = "data_parallel_supported"  # true/false: the model can be trained across GPUs
    #: true/false: under data parallelism each rank validates its share of the held-out windows (false: no
    #: validation pass, or a run logged before sharded validation, whose ranks each validated all of them)
    VALIDATION_SHARDED = "validation_sharded"


#: Prefix of the model's own facts (``model_info.num_params``, ...).
MODEL_INFO_PREFIX = "model_info."
#: Prefix of the `auto` batch search's params.
AUTO_BATCH_PREFIX = "auto_batch."
#: The config keys of the fast paths: each run records them in its params (the flattened config).
FAST_PATH_KEYS = (ParamKey.TRAINER_PRECISION, ParamKey.TRAINER_COMPILE, ParamKey.TRAINER_OPTIMIZER_IMPL)
#: The counts of an epoch's work a trainable may declare, and whose rates the harness logs.
WORK_COUNTS = (ParamKey.TRAIN_SAMPLES, ParamKey.ENV_STEPS)


def model_info(key: str) -> str:
    return f"{MODEL_INFO_PREFIX}{key}"


def auto_batch(key: str) -> str:
    return f"{AUTO_BATCH_PREFIX}{key}"


# --------------------------------------------------------------------------------------------------
# artifacts
# --------------------------------------------------------------------------------------------------


class Artifact:
    """Artifact paths inside a run."""

    EPOCHS = "epochs.json"
    ENVIRONMENT = "environment.json"
    ERROR = "error.txt"
    CONFIG = "config/config.yaml"
    OVERRIDES = "config/overrides.yaml"
    MEMORY_FIT = "memory_fit.json"
    WORKLOAD_PROFILE = "workload_profile.json"
    RERUN_DIFF = "rerun_diff.json"
    RERUN_LOSSES = "rerun_losses.json"
    SWEEP_SUMMARY = "sweep_summary.md"
    MODEL_DIR = "model"  # the model's own artifacts (TFT's variable importance and attention)
    #: Each rank's epoch times of a run with world_size > 1: {"world_size": N, "ranks": [[ms, ...] per rank]}.
    RANK_EPOCH_MS = "rank_epoch_ms.json"


#: The schema of ``workload_profile.json`` (trainbench.measure.workload writes it, trainbench.analysis.runs
#: reads it; docs/projection.md describes it).
WORKLOAD_PROFILE_SCHEMA = 1
#: Its keys, every one required.
WORKLOAD_PROFILE_KEYS = ("schema", "profiled_on", "precision", "complete", "incomplete_reasons", "optimizer",
                         "kernels", "chains", "host")

#: The file in a sweep's folder that hands the sweep's parent run to its jobs.
SWEEP_RUN_FILE = "mlflow_sweep_run.json"


# --------------------------------------------------------------------------------------------------
# filters
# --------------------------------------------------------------------------------------------------


def tag_filter(tags: Mapping[str, str]) -> str:
    """An MLflow search filter requiring each tag to equal its value (``tag_filter({Tag.KIND: Kind.TRAIN})``);
    the values must be safe (no quote: check them with ``trainbench.core.safe_names``)."""
    return " and ".join(f"tags.{k} = '{v}'" for k, v in tags.items())


def all_names() -> dict[str, tuple[str, ...]]:
    """Every contract name by group (what the documentation must describe)."""
    groups: dict[str, Iterable[str]] = {
        "outcome": names(Outcome), "tag": (*names(Tag), *DATA_TAGS), "kind": names(Kind),
        "stop_reason": names(StopReason), "memory_kind": names(MemoryKind), "loss_trend": names(LossTrend),
        "gradient_health": names(GradientHealth), "batch_size_source": names(BatchSizeSource),
        "series": names(Series), "summary": names(Summary), "report": names(ReportKey), "param": (*names(ParamKey), *FAST_PATH_KEYS),
        "artifact": (*names(Artifact), SWEEP_RUN_FILE)}
    return {k: tuple(dict.fromkeys(v)) for k, v in groups.items()}
