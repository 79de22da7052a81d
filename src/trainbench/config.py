"""Typed configuration schemas, registered in Hydra's ConfigStore.

Values live in ``conf/*.yaml``; this module holds their types, ranges and a doc per field. Each YAML
file starts with ``defaults: [base_<name>, _self_]`` so that a typo or a wrong type fails at compose
time, naming the key. Ranges and cross-field rules are checked by :func:`validate` at start-up, which
raises :class:`ConfigError` with the dotted key, the bad value and what to set instead.

Fields are declared with :func:`param`, which keeps the doc and the range in the field's metadata so
that ``python -m trainbench.config`` can print a reference of every key.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


class ConfigError(ValueError):
    """A configuration value is out of range or inconsistent; the message names the key and the fix."""


def param(default: Any = MISSING, doc: str = "", *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, factory: Any = None) -> Any:
    """A dataclass field with a doc string and an optional numeric range, checked by :func:`validate`."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Device(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Precision(str, enum.Enum):
    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class OptimizerImpl(str, enum.Enum):
    auto = "auto"
    fused = "fused"
    foreach = "foreach"
    forloop = "forloop"


# --------------------------------------------------------------------------------------------------
# paths, data
# --------------------------------------------------------------------------------------------------


@dataclass
class PathsConfig:
    root: str = param("${hydra:runtime.cwd}", "Project root: relative paths resolve against it.")
    data_dir: str = param("${paths.root}/data", "Where generated and downloaded DBN files are kept.")
    mlruns: str = param("${paths.root}/mlruns", "The embedded MLflow store (sqlite db and artifacts).")
    reports: str = param("${paths.root}/reports", "Where analyze.py writes reports/<sweep_id>/.")


@dataclass
class InstrumentConfig:
    symbol: str = param("6EH4", "Raw symbol written into the DBN metadata and symbology mappings.")
    instrument_id: int = param(42, "Databento instrument id of the synthetic series.", ge=1)
    tick_size: float = param(0.00005, "Minimum price increment; prices are generated on this grid.", gt=0)
    price: float = param(1.08, "Starting price level.", gt=0)
    daily_vol: float = param(0.005, "Typical daily return volatility (fraction).", gt=0)
    volume: float = param(800.0, "Mean contracts traded per bar.", gt=0)


@dataclass
class FeaturesConfig:
    vol_window: int = param(30, "Bars in the rolling volatility feature.", ge=2)
    volume_window: int = param(60, "Bars in the rolling volume z-score.", ge=2)
    session_gap_minutes: float = param(
        30.0, "A gap between bars longer than this starts a new segment; windows never cross one.", gt=0)


@dataclass
class DownloadConfig:
    symbols: list[str] | None = param(None, "Symbols to request; default: the symbols of data.instruments.")
    stype_in: str = param("raw_symbol", "Databento symbology of the symbols: raw_symbol, continuous (ES.c.0), "
                          "parent (ES.FUT), instrument_id.")
    start: str | None = param(None, "First day (inclusive, UTC, YYYY-MM-DD) of the download.")
    end: str | None = param(None, "Day after the last day (exclusive, UTC, YYYY-MM-DD) of the download.")
    max_cost_usd: float = param(5.0, "Above this quoted cost, the download asks for confirmation (or --yes).",
                                ge=0)


@dataclass
class DataConfig:
    name: str = param(MISSING, "Dataset label, logged as the `data` tag.")
    schema: str = param("ohlcv-1m", "Expected DBN schema: ohlcv-1s, ohlcv-1m, ohlcv-1h, ohlcv-1d or mbp-10.")
    path: str | None = param(None, "A DBN file (.dbn or .dbn.zst). Relative paths resolve against paths.root.")
    synthetic: bool = param(False, "Generate `path` with trainbench.data.synth when it does not exist.")
    dataset: str = param("GLBX.MDP3", "Databento dataset code written into (or expected in) the metadata.")
    instruments: list[InstrumentConfig] = param(
        doc="Instruments of the synthetic series; for a real file, the tick sizes of matching symbols.",
        factory=lambda: [InstrumentConfig()])
    n_bars: int = param(10_000, "Bars per instrument (events, for mbp-10) when generating.", ge=1)
    start: str = param("2024-01-02", "Trade date of the first generated session (YYYY-MM-DD; it opens at "
                       "17:00 US Central the evening before).")
    seed: int = param(0, "Seed of the generator; the same seed writes the same file.", ge=0)
    train_frac: float = param(0.8, "Fraction of each instrument's bars used for training and normalisation.",
                              gt=0, lt=1)
    features: FeaturesConfig = param(doc="Feature engineering settings.", factory=FeaturesConfig)
    download: DownloadConfig = param(doc="What `python -m trainbench.data download` requests from Databento.",
                                     factory=DownloadConfig)


# --------------------------------------------------------------------------------------------------
# model (each model module subclasses this with its own fields)
# --------------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    name: str = param(MISSING, "Registry key of the model (dqn, ppo, mamba2, tft, tlob).")
    size: str = param("small", "Named size of the model: `small` (CPU-sized) or `reference` (the published "
                      "configuration). Set by the `size` config group (conf/model/<model>/<size>.yaml; "
                      "trainer=default picks reference, trainer=cpu/quick small); `size=...` or `model.size=...` "
                      "on the command line chooses it. A param, a tag and part of the run name.")
    batch_size: Any = param(
        230, "Samples per optimiser step (the original plan used 230); the micro-batch when trainer.grad_accum > 1 "
        "or trainer.effective_batch is set. `auto`: the largest batch that trains within the memory budget "
        "(measured on a GPU, predicted on a CPU; see docs/memory.md).")
    max_batch_size: int = param(8192, "Upper bound of the `auto` batch-size search (it never exceeds the training "
                                      "samples the data holds either).", ge=1)
    target_epochs: int = param(1000, "Epochs the training plan needs; the decision projects time from it.",
                               ge=1)
    lr: float = param(1e-3, "Learning rate of the optimiser.", gt=0)
    weight_decay: float = param(0.0, "AdamW weight decay (never applied to norms, biases, SSM params).", ge=0)
    max_grad_norm: float = param(1.0, "Clip the global gradient norm to this; 0 disables clipping.", ge=0)


# --------------------------------------------------------------------------------------------------
# trainer, hardware, tracking
# --------------------------------------------------------------------------------------------------


@dataclass
class LatencyConfig:
    enabled: bool = param(True, "Measure forward latency after training (batch 1 and training batch).")
    warmup: int = param(5, "Untimed forward passes before sampling.", ge=0)
    samples: int = param(50, "Timed forward passes per batch size.", ge=1)


@dataclass
class MemoryConfig:
    margin: float = param(0.1, "Fraction of the memory budget kept free when fitting a batch (CUDA context, "
                               "fragmentation, epoch-to-epoch variation).", ge=0, lt=1)
    probe_steps: int = param(3, "Real training steps per probe of the `auto` batch-size search on a GPU.", ge=1)
    predict: bool = param(True, "On a GPU, trace one training step with fake tensors and log its predicted peak "
                                "(predicted_peak_vram_mb) beside the measured one.")


@dataclass
class StopConfig:
    rel_ci: float = param(0.01, "Stop once the 95% interval of the mean epoch time (train + validation pass) "
                                "is within this fraction of the mean (0.01 = +-1%), checked between epochs "
                                "after min_epochs measured epochs. 0 turns the rule off.", ge=0, lt=1)
    min_epochs: int = param(100, "Measured epochs (after warmup) before rel_ci may stop the run (the analysis "
                                 "wants decision.min_epochs = 100 for high confidence).", ge=2)
    budget_min: float | None = param(None, "Stop after this many minutes of the epoch loop (warmup included), "
                                           "checked between epochs once one epoch was measured. None: no "
                                           "budget.", gt=0)


@dataclass
class TrainerConfig:
    profile: str = param("default", "Label of this trainer profile (default, cpu, quick, ...), logged.")
    size: str = param("small", "The model size this profile measures, as its defaults list selects it (`override "
                               "/size@_global_.size: ...`); recorded so that the analysis' decision uses this size.")
    epochs: int = param(500, "Most measured epochs (after warmup); trainer.stop may end the run earlier.", ge=1)
    warmup_epochs: int = param(5, "Extra epochs run first and flagged as warmup; the analysis drops them.",
                               ge=0)
    seed: int = param(0, "Seed for torch, numpy and python's random.", ge=0)
    device: Device = param(Device.auto, "auto (cuda when available), cpu or cuda.")
    deterministic: bool = param(False, "Use deterministic algorithms (slower; exact reruns on CPU).")
    precision: Precision = param(Precision.auto, "Autocast precision of forward passes: auto, fp32, bf16 or "
                                 "fp16 (fp16 adds a GradScaler). auto: bf16 on GPUs of capability >= 8.0, fp16 on "
                                 "7.x (V100, T4), fp32 on a CPU (trainbench.measure.precision); the run records "
                                 "trainer.precision_resolved and trainer.precision_reason. Weights and optimiser "
                                 "state stay fp32.")
    tf32: bool = param(True, "Allow TF32 tensor cores in fp32 matmuls/convolutions on GPUs that have them "
                             "(capability >= 8.0); recorded as trainer.tf32_resolved. No effect on a CPU.")
    compile: bool = param(False, "torch.compile the module each model's training forward passes call. "
                          "Compilation happens in the first epochs: keep warmup_epochs >= 1.")
    cuda_graphs: bool = param(False, "Capture DQN's and PPO's optimiser update as a CUDA graph and replay it "
                              "(static batch shapes; launch-bound small models). Ignored, with the reason "
                              "recorded (cuda_graphs_resolved, cuda_graphs_reason), on a CPU, for other models "
                              "and with fp16.")
    optimizer_impl: OptimizerImpl = param(OptimizerImpl.auto, "AdamW implementation: auto (fused on CUDA, "
                                          "foreach elsewhere), fused, foreach or forloop (per parameter).")
    flush_every: int = param(10, "Send buffered per-epoch metrics to MLflow every this many epochs.", ge=1)
    flush_min_interval_s: float = param(
        2.0, "...but at most once per this many seconds (short epochs: keeps tracking under 1% of the run; "
        "a killed job loses at most max(flush_every epochs, this many seconds)).", ge=0)
    progress: bool = param(True, "Show a progress bar (only when stdout is a terminal).")
    latency: LatencyConfig = param(doc="Inference latency measurement.", factory=LatencyConfig)
    grad_accum: int = param(1, "Micro-batches of model.batch_size accumulated per optimiser step (the optimiser "
                               "batch is their sum; an epoch does the same work).", ge=1)
    effective_batch: int | None = param(
        None, "Samples per optimiser step; micro-batches of at most model.batch_size (or the `auto` size) and "
        "the accumulation steps are derived. Do not combine with trainer.grad_accum.", ge=1)
    memory: MemoryConfig = param(doc="Memory budget fitting: `auto` batch search and peak prediction.",
                                 factory=MemoryConfig)
    profile_workload: bool = param(True, "After the measured epochs, run one more epoch under FLOP/byte/op "
                                         "counters (measure/profile.py): the workload profile the analysis "
                                         "projects other GPUs from. Never timed. Skipped with compile=true.")
    stop: StopConfig = param(doc="The measurement budget: when to stop before trainer.epochs (a maximum).",
                             factory=lambda: StopConfig())


@dataclass
class HardwareConfig:
    name: str = param("auto", "Profile label; `auto` describes whatever device the run finds.")
    gpu: str | None = param(None, "Expected GPU name (informational; the run records the real one).")
    vram_mb: int | None = param(None, "Memory of the card this profile describes, in MB.", ge=1)
    vram_budget_mb: int | None = param(
        None, "Cap this process's GPU memory to this many MB (torch.cuda.set_per_process_memory_fraction), so a "
        "large GPU stands in for a small one; the `auto` batch search fits within it. None: vram_mb, else the "
        "device's total.", ge=1)
    power_w: float | None = param(None, "Board power for local cost; None: from NVML, else 0 with a warning.",
                                  ge=0)
    price_per_kwh: float = param(0.15, "Electricity price in USD per kWh.", ge=0)
    peak_tflops: dict[str, float] = param(
        doc="Dense peak TFLOP/s per dtype: fp32 (CUDA cores), tf32, bf16, fp16 (tensor cores, fp32 accumulate); "
            "a dtype the card lacks is left out. MFU and projections use the peak of the run's precision.",
        factory=dict)
    memory_gbps: float | None = param(None, "Memory bandwidth in GB/s (datasheet).", gt=0)
    compute_capability: str | None = param(None, "CUDA compute capability, e.g. `8.6`.")
    source: str | None = param(None, "Where the figures come from (datasheet name).")
    uncertain: str | None = param(None, "What is uncertain about the figures, if anything.")


@dataclass
class TrackingConfig:
    kind: str = param("local", "local (sqlite under mlruns/) or server (a running mlflow server).")
    uri: str | None = param(None, "Tracking URI; overrides the default of `kind`.")
    experiment: str = param("trainbench", "MLflow experiment name.")
    artifact_location: str | None = param(None, "Artifact root for a new experiment (local: mlruns/artifacts).")
    timeout_s: float = param(10.0, "How long to wait for a tracking server before failing.", gt=0)
    spool_dir: str = param("${paths.mlruns}/spool", "Where a run spools its writes while the tracking store "
                           "is unreachable (one folder per run; upload leftovers with `trainbench sync`).")
    spool_wait_s: float = param(60.0, "At the end of a run with spooled writes, wait this long for the "
                                "store to come back before leaving the spool on disk.", ge=0)
    resend_every_s: float = param(5.0, "While spooling, try the store again at a flush at most this often.",
                                  gt=0)
    min_free_mb: float = param(100.0, "Refuse to start a run when the disk of the SQLite store or of spool_dir "
                               "has less free space than this (MB); 0 turns the check off.", ge=0)


@dataclass
class RunConfig:
    """The whole config of `run.py`."""

    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    sweep_id: str | None = param(None, "Groups runs; default: derived from the Hydra sweep directory.")
    rerun: str | None = param(None, "Rerun this MLflow run id from its logged config (trainbench.rerun; "
                                    "`python run.py rerun=<run_id>`); other overrides replace its values.")


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------

_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d", "mbp-10")


def _check_ranges(obj: Any, prefix: str) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            _check_ranges(value, key + ".")
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    _check_ranges(item, f"{key}[{i}].")
            continue
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        m = f.metadata
        for bound, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                                ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
            b = m.get(bound)
            if b is not None and not ok(value, b):
                raise ConfigError(f"{key}={value} is out of range: it must be {word} {b}. "
                                  f"({m.get('doc', '')}) Set e.g. {key}=<value {word} {b}>.")


PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def check_peaks(hw: Any) -> None:
    """``hardware.peak_tflops`` maps known dtypes to positive numbers."""
    peaks = getattr(hw, "peak_tflops", None) or {}
    if not isinstance(peaks, dict):
        raise ConfigError(f"hardware.peak_tflops={peaks!r} is invalid: it is a map of dtype to dense TFLOP/s, "
                          "e.g. hardware.peak_tflops={fp32:19.5,bf16:312}.")
    for k, v in peaks.items():
        if k not in PEAK_DTYPES or isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ConfigError(f"hardware.peak_tflops.{k}={v!r} is invalid: keys are {', '.join(PEAK_DTYPES)}, "
                              "values positive TFLOP/s (leave out a dtype the card lacks).")


def validate(cfg: DictConfig | Any) -> Any:
    """Check types, ranges and cross-field rules; return the config as dataclass objects.

    Raises :class:`ConfigError` naming the key. Call it once at the start of a job.
    """
    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    for section in ("model", "data", "trainer", "hardware", "tracking"):
        part = getattr(obj, section, None)
        if dataclasses.is_dataclass(part):
            _check_ranges(part, section + ".")
    check_peaks(getattr(obj, "hardware", None))
    model = getattr(obj, "model", None)
    if model is not None:
        bs = model.batch_size
        if not (bs == "auto" or (isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1)):
            raise ConfigError(f"model.batch_size={bs!r} is invalid: use a positive integer or `auto`.")
    trainer = getattr(obj, "trainer", None)
    if trainer is not None and trainer.effective_batch is not None and trainer.grad_accum != 1:
        raise ConfigError(f"trainer.grad_accum={trainer.grad_accum} and trainer.effective_batch="
                          f"{trainer.effective_batch} are both set: set one (effective_batch derives grad_accum).")
    data = getattr(obj, "data", None)
    if data is not None and data.schema not in _SCHEMAS:
        raise ConfigError(f"data.schema={data.schema!r} is not supported: use one of {', '.join(_SCHEMAS)}.")
    tracking = getattr(obj, "tracking", None)
    if tracking is not None and tracking.kind not in ("local", "server"):
        raise ConfigError(f"tracking.kind={tracking.kind!r} is invalid: use tracking=local or tracking=server.")
    _check_names(tracking, {"sweep_id": getattr(obj, "sweep_id", None)})
    return obj


def _check_names(tracking: Any, sweep_ids: dict[str, Any]) -> None:
    """Sweep ids and the experiment name in a safe character set (trainbench.tracking.names)."""
    from trainbench.tracking.names import UnsafeName, check_experiment, check_sweep_id

    try:
        if tracking is not None:
            check_experiment(str(tracking.experiment))
        for key, value in sweep_ids.items():
            if value is not None:
                check_sweep_id(str(value), key)
    except UnsafeName as e:
        raise ConfigError(str(e)) from None


# --------------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------------


def register_configs(include_models: bool = True) -> None:
    """Register the schemas under `base_*` names (YAML files extend them via their defaults list).

    ``include_models`` imports the model registry (and torch); analyze.py passes False.
    """
    cs = ConfigStore.instance()
    cs.store(name="base_run", node=RunConfig)
    cs.store(group="data", name="base_data", node=DataConfig)
    cs.store(group="trainer", name="base_trainer", node=TrainerConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
    cs.store(group="tracking", name="base_tracking", node=TrackingConfig)
    register_analysis_configs()
    if include_models:
        from trainbench.models.registry import REGISTRY

        for spec in REGISTRY.specs():
            cs.store(group="model", name=f"base_{spec.name}", node=spec.config_cls)
        from trainbench.models.registry import register_model_configs

        register_model_configs(cs)  # plugins without conf/model files, and model=custom


def describe(schema: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, doc) rows for every field of a schema, nested ones included."""
    rows = []
    for f in dataclasses.fields(schema):
        key = prefix + f.name
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            rows.extend(describe(type(default), key + "."))
            continue
        if isinstance(default, enum.Enum):
            default = default.value
        rows.append((key, repr(default), f.metadata.get("doc", "")))
    return rows


def size_alias(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``model.size=X`` on the command line means the ``size`` group choice ``size=X``.

    The size is a config group (it swaps the model's size-dependent keys); overriding only the key would
    leave the dimensions of the other size under its name. Other overrides pass through unchanged.
    """
    return ["size=" + o[len("model.size="):] if o.startswith("model.size=") else o for o in overrides]


def compose_run(overrides: list[str] | tuple[str, ...] = (), root: str | None = None,
                config_name: str = "config") -> DictConfig:
    """Compose run.py's config outside a Hydra app (benchmarks, the GPU check, tests).

    ``root`` is the project root holding ``conf/`` (default: this checkout); ``paths.root`` is set to
    it, since ``${hydra:runtime.cwd}`` only resolves inside a Hydra run.
    """
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainbench import REPO_ROOT

    root_path = Path(root) if root else REPO_ROOT
    register_configs(include_models=config_name == "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(root_path / "conf"), version_base="1.3"):
        return compose(config_name, overrides=[f"paths.root={root_path}", *size_alias(overrides)])


# ==================================================================================================
# analyze.py: decision, analysis, top-level (reads only MLflow; never imports models/ or measure/)
# ==================================================================================================


class OutlierRule(str, enum.Enum):
    iqr = "iqr"
    mad = "mad"
    none = "none"


@dataclass
class CloudInstanceConfig:
    name: str = param(MISSING, "Instance type, e.g. g4dn.xlarge.")
    gpu: str = param(MISSING, "Its GPU: a conf/hardware entry (t4, a100_40gb, ...), whose peaks, bandwidth and "
                              "memory the projection uses.")
    gpus: int = param(1, "GPUs in the instance: the planned models train in parallel, one per GPU.", ge=1)
    usd_per_hour: float = param(MISSING, "On-demand price in USD per hour (override: "
                                         "`decision.catalogue.0.usd_per_hour=0.5`).", ge=0)
    price_date: str | None = param(None, "When that price was taken (prices change: check current pricing).")
    relative_speed: float | None = param(None, "Training speed relative to the measured device (2.0 = twice as "
                                               "fast), to override the projection; None: measured, else "
                                               "projected from the workload profile.", gt=0)


@dataclass
class ModelEstimateConfig:
    epoch_ms: float = param(MISSING, "User-supplied epoch time (ms) for a planned model that was not measured.",
                            gt=0)
    target_epochs: int | None = param(None, "Epochs to project; default decision.target_epochs.<model>.", ge=1)


def _registered_models() -> list[str]:
    from trainbench.plugins import model_names  # the entry points' names: no torch, no model imported

    return model_names()


@dataclass
class DecisionConfig:
    plan: list[str] = param(doc="Models the training plan needs; each is reported as measured or missing. "
                                "Default: every registered model (python -m trainbench.config lists them).",
                            factory=_registered_models)
    buffer: float = param(0.5, "Safety margin added to the upper interval bound (0.5 = +50%).", ge=0, le=10)
    local_max_hours: float = param(24.0, "Conservative total below this: train locally (local_gpu).", gt=0)
    cloud_min_hours: float = param(48.0, "Conservative total above this: rent a cloud GPU (cloud).", gt=0)
    min_epochs: int = param(100, "Measured epochs (after warmup and outliers) a model needs for high confidence.",
                            ge=1)
    # Typed Any (not ModelEstimateConfig) because OmegaConf cannot add a new key to a dict of dataclasses from
    # the command line; validate_analyze() checks each entry against ModelEstimateConfig.
    estimates: dict[str, Any] = param(
        doc="Estimates for planned models that were not measured: `+decision.estimates.tft.epoch_ms=40` "
            "(fields of ModelEstimateConfig: epoch_ms, target_epochs).",
        factory=dict)
    target_epochs: dict[str, int] = param(
        doc="Override each model's `model.target_epochs` run param: `+decision.target_epochs.dqn=2000`.",
        factory=dict)
    catalogue: list[CloudInstanceConfig] = param(doc="Cloud instances to price the plan on.", factory=list)
    size: str | None = param(None, "The model size the decision uses (small, reference). None: the size the runs' "
                                   "trainer profile names (trainer.size). Other sizes are reported as rows of "
                                   "their own (`<model>[<size>]`), never pooled and never in the total.")


@dataclass
class AnalysisConfig:
    outliers: OutlierRule = param(OutlierRule.iqr, "Outlier rule: iqr (Tukey fences), mad (robust z) or none.")
    iqr_k: float = param(1.5, "Tukey fence width: outside [Q1 - k*IQR, Q3 + k*IQR] is an outlier.", gt=0)
    mad_z: float = param(3.5, "Robust z-score |x - median| / (1.4826 MAD) above this is an outlier.", gt=0)
    bootstrap_resamples: int = param(2000, "Resamples of the block-bootstrap intervals of the median and p95.",
                                     ge=100)
    bootstrap_max_samples: int = param(
        5000, "Block-bootstrap at most this many epochs per model (whole runs in a seeded random order; this "
              "can only widen the median and p95 intervals).", ge=50)
    seed: int = param(0, "Seed of the bootstrap and the subsampling: the same runs give the same report.", ge=0)
    noise_iqr_ratio: float = param(0.10, "Warn (noisy machine) when IQR/median of epoch time is at least this.",
                                   gt=0)
    drift_pvalue: float = param(0.01, "Spearman p-value below which an epoch-time trend counts as drift ...",
                                gt=0, lt=1)
    drift_min_change: float = param(0.05, "... and only when the last third's median differs from the first "
                                          "third's by at least this fraction.", ge=0)
    grad_norm_max: float = param(1e3, "A gradient norm above this counts as exploding.", gt=0)
    grad_norm_min: float = param(1e-8, "A median gradient norm below this (last third) counts as vanishing.",
                                 ge=0)
    # intervals under autocorrelation (docs/report-schema.md, Methods)
    batches: int = param(10, "Batch-means interval of one run's mean: consecutive batches (t on batches - 1 df).",
                         ge=2)
    autocorr_max_tau: float = param(5.0, "Warn (and recommend more seeds) when a run's integrated "
                                         "autocorrelation time of epoch times exceeds this many epochs.", gt=0)
    disagree_min_change: float = param(0.05, "Warn that runs disagree when their 95% intervals of the mean do "
                                             "not overlap and their means differ by at least this fraction.", ge=0)
    device: str | None = param(None, "Use runs with this `device` tag for the statistics; default: the device "
                                     "with the most completed runs.")
    plots: bool = param(True, "Write the PNG plots.")
    log_to_mlflow: bool = param(True, "Log the report back to MLflow as a run tagged kind=analysis.")
    workers: int = param(8, "Parallel artifact downloads (one epochs.json per run).", ge=1)


@dataclass
class CompareConfig:
    sweeps: list[str] = param(doc="Two sweeps to compare, baseline first: `compare=<sweep_a>,<sweep_b>` (ids, "
                                  "`latest` or `previous`). Empty: the normal analysis of `sweep`.",
                              factory=list)
    match: list[str] = param(
        doc="Run params that must be equal for runs of the two sweeps to be compared (besides the model).",
        factory=lambda: ["model.size", "model.batch_size", "data.name", "data.n_bars", "trainer.precision",
                         "trainer.compile"])
    threshold: float = param(0.05, "Smallest relative change of the median epoch time that counts (0.05 = 5%): "
                                   "faster/slower needs a significant test, an interval excluding 1, and a "
                                   "change at least this large.", ge=0, lt=1)
    alpha: float = param(0.05, "Significance level of the Mann-Whitney U test; the interval is (1 - alpha).",
                         gt=0, lt=0.5)
    resamples: int = param(2000, "Bootstrap resamples of the ratio-of-medians interval.", ge=100)
    max_samples: int = param(2000, "Bootstrap at most this many values per side (a seeded subsample; BCa's "
                                   "jackknife is O(n^2)).", ge=20)
    unit: str = param("auto", "What one sample is: `run` (each run's median: independent samples), `epoch` "
                              "(pooled epochs: autocorrelated, so p-values are optimistic and the threshold "
                              "matters), or `auto` (runs when both sides have `min_runs`, else epochs).")
    min_runs: int = param(5, "unit=auto uses runs as samples when both sides have at least this many.", ge=2)


@dataclass
class AnalyzeConfig:
    """The whole config of `analyze.py`."""

    sweep: str = param("latest", "latest (newest sweep), all, or a sweep_id.")
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    decision: DecisionConfig = field(default_factory=DecisionConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    project: list[str] = param(doc="Also project these conf/hardware GPU entries and print the per-model "
                                   "projections side by side: `project=t4,a100_40gb`.", factory=list)
    paths: PathsConfig = field(default_factory=PathsConfig)
    out_dir: str | None = param(None, "Report folder; default ${paths.reports}/<sweep_id>.")


def validate_analyze(cfg: DictConfig | Any) -> AnalyzeConfig:
    """Ranges and cross-field rules of analyze.py's config; raises :class:`ConfigError` naming the key."""
    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    for section in ("tracking", "hardware", "decision", "analysis"):
        _check_ranges(getattr(obj, section), section + ".")
    check_peaks(obj.hardware)
    d = obj.decision
    estimates = {}
    for name, est in d.estimates.items():
        key = f"decision.estimates.{name}"
        if isinstance(est, int | float) and not isinstance(est, bool):
            est = {"epoch_ms": est}
        if not isinstance(est, dict) or "epoch_ms" not in est:
            raise ConfigError(f"{key}={est!r} is invalid: set {key}.epoch_ms=<ms per epoch> "
                              f"(and optionally {key}.target_epochs).")
        unknown = set(est) - {f.name for f in dataclasses.fields(ModelEstimateConfig)}
        if unknown:
            raise ConfigError(f"{key} has unknown keys {sorted(unknown)}: use epoch_ms and target_epochs.")
        try:
            est = ModelEstimateConfig(epoch_ms=float(est["epoch_ms"]),
                                      target_epochs=None if est.get("target_epochs") is None
                                      else int(est["target_epochs"]))
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={est!r} is invalid: epoch_ms must be a number, target_epochs an integer.") \
                from None
        _check_ranges(est, key + ".")
        estimates[name] = est
    d.estimates = estimates
    for name, n in d.target_epochs.items():
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"decision.target_epochs.{name}={n!r} is invalid: use a positive integer.")
    if not d.plan:
        raise ConfigError("decision.plan is empty: list the models the training plan needs, e.g. [dqn, ppo].")
    if d.local_max_hours > d.cloud_min_hours:
        raise ConfigError(f"decision.local_max_hours={d.local_max_hours} is above decision.cloud_min_hours="
                          f"{d.cloud_min_hours}: the local threshold must not exceed the cloud one.")
    if obj.tracking.kind not in ("local", "server"):
        raise ConfigError(f"tracking.kind={obj.tracking.kind!r} is invalid: use tracking=local or tracking=server.")
    if not obj.sweep:
        raise ConfigError("sweep is empty: use sweep=latest, sweep=all or sweep=<sweep_id>.")
    c = obj.compare
    _check_names(obj.tracking, {"sweep": obj.sweep, **{f"compare[{i}]": v for i, v in enumerate(c.sweeps or [])}})
    if c.sweeps and (len(c.sweeps) != 2 or c.sweeps[0] == c.sweeps[1]):
        raise ConfigError(f"compare={','.join(map(str, c.sweeps))} is invalid: name two different sweeps, baseline "
                          "first: compare=<sweep_a>,<sweep_b> (sweep ids, latest or previous).")
    if c.unit not in ("auto", "run", "epoch"):
        raise ConfigError(f"compare.unit={c.unit!r} is invalid: use auto, run or epoch.")
    _check_ranges(c, "compare.")
    return obj


def register_analysis_configs() -> None:
    """Register analyze.py's schemas (no model registry, no torch)."""
    cs = ConfigStore.instance()
    cs.store(name="base_analyze", node=AnalyzeConfig)
    cs.store(group="decision", name="base_decision", node=DecisionConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
    cs.store(group="tracking", name="base_tracking", node=TrackingConfig)


if __name__ == "__main__":  # python -m trainbench.config: print every key with its doc
    for section, schema in (("data", DataConfig), ("trainer", TrainerConfig), ("hardware", HardwareConfig),
                            ("tracking", TrackingConfig), ("model", ModelConfig), ("decision", DecisionConfig),
                            ("analysis", AnalysisConfig), ("compare", CompareConfig)):
        for key, default, doc in describe(schema, section + "."):
            print(f"{key:40s} {default:14s} {doc}")
    from trainbench.models.registry import describe_models

    print("\n" + describe_models())
