"""Typed configuration schemas of run.py: types, ranges and a doc per field, and :func:`validate`.

Values live in ``conf/*.yaml``; this module holds their types, ranges and a doc per field. Each YAML
file starts with ``defaults: [base_<name>, _self_]`` so that a typo or a wrong type fails at compose
time, naming the key. Ranges and cross-field rules are checked by :func:`validate` at start-up, which
raises :class:`ConfigError` with the dotted key, the bad value and what to set instead.

Fields are declared with :func:`~trainbench.config.shared.param`, which keeps the doc and the range in the
field's metadata so that ``python -m trainbench.config`` can print a reference of every key. The sections
run.py shares with analyze.py (paths, hardware, tracking) are in :mod:`trainbench.config.shared`. Model
modules build their configs on :class:`ModelConfig`; registering the schemas in Hydra's ConfigStore, which
needs the model registry, is :mod:`trainbench.compose`'s job. analyze.py's schemas are in
:mod:`trainbench.config.analyze`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from trainbench.config.shared import (
    MAX_TARGET_EPOCHS,
    HardwareConfig,
    PathsConfig,
    TrackingConfig,
    check_names,
    check_paths,
    check_peaks,
    check_ranges,
    check_uri_credentials,
    param,
    range_problem,
)
from trainbench.core.enums import ValueEnum
from trainbench.core.errors import ConfigError
from trainbench.core.precision import Precision


class Device(ValueEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class OptimizerImpl(ValueEnum):
    """``trainer.optimizer_impl``: AdamW's implementation (trainbench.models.base.optimizer_kwargs)."""

    auto = "auto"
    fused = "fused"
    foreach = "foreach"
    forloop = "forloop"


# --------------------------------------------------------------------------------------------------
# paths, data
# --------------------------------------------------------------------------------------------------


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
    vol_window: int = param(30, "Bars in the rolling volatility feature.", ge=2, le=100_000)
    volume_window: int = param(60, "Bars in the rolling volume z-score.", ge=2, le=100_000)
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
    n_bars: int = param(10_000, "Bars per instrument (events, for mbp-10) when generating; at most 10 million "
                        "(19 years of 1-minute bars; the generator holds about 300 bytes a bar, 1.6 KB an event, "
                        "in memory): for more, use a real file (data.path).", ge=1, le=10_000_000)
    start: str = param("2024-01-02", "Trade date of the first generated session (YYYY-MM-DD; it opens at "
                       "17:00 US Central the evening before).")
    seed: int = param(0, "Seed of the generator; the same seed writes the same file.", ge=0)
    cache_files: int = param(8, "Generated files kept per folder of the managed data folder (one per set of "
                                "generator parameters, named by their digest); the least recently used beyond "
                                "this are deleted.", ge=1)
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
    size: str = param("small", "Named size of the model: `small` (CPU-sized), `reference` (the published "
                      "configuration) or `tiny` (for tests and smoke runs). Set by the `size` config group "
                      "(conf/model/<model>/<size>.yaml; trainer=default picks reference, trainer=cpu/quick small); "
                      "`size=...` or `model.size=...` on the command line chooses it. A param, a tag and part of "
                      "the run name.")
    batch_size: Any = param(
        230, "Samples per optimiser step; the micro-batch when trainer.grad_accum > 1 "
        "or trainer.effective_batch is set. `auto`: the largest batch that trains within the memory budget "
        "(measured on a GPU, predicted on a CPU; see docs/memory.md).")
    max_batch_size: int = param(8192, "Upper bound of the `auto` batch-size search (it never exceeds the training "
                                      "samples the data holds either).", ge=1)
    target_epochs: int = param(1000, "Epochs the team plans to train this model for on the planned data "
                               "(decision.plan_data), whatever data this run measures: the decision projects "
                               "time from it, never converts it, and lets a run's curve replace it only when the "
                               "curve is long enough to show where it levels off (at most 1 million: beyond, the "
                               "plan is not a plan but a typo).", ge=1, le=MAX_TARGET_EPOCHS)
    lr: float = param(1e-3, "Learning rate of the optimiser.", gt=0)
    weight_decay: float = param(0.0, "AdamW weight decay (never applied to norms, biases, SSM params).", ge=0)
    max_grad_norm: float = param(1.0, "Clip the global gradient norm to this; 0 disables clipping.", ge=0)

    def check(self) -> None:
        """Rules across this model's own fields that ranges cannot say (heads dividing the hidden size, ...).

        A model's config class overrides it and raises :class:`ConfigError` naming the key and the fix;
        :func:`validate` calls it at start-up, before any run opens, so that a bad setting is bad input
        (exit 2), not a failed run. ``batch_size`` may still be ``auto`` here.
        """

    def check_world(self, world: int) -> None:
        """Rules of this model across ``world`` ranks of a data-parallel job (``trainer.distributed``), checked
        with :meth:`check` before any rank starts; a model's config class overrides it (PPO: its environments
        split across the ranks, no ``target_kl``) and raises :class:`ConfigError` naming the key and the fix."""


# --------------------------------------------------------------------------------------------------
# trainer, hardware, tracking
# --------------------------------------------------------------------------------------------------


@dataclass
class LatencyConfig:
    enabled: bool = param(True, "Measure forward latency after training (batch 1 and training batch).")
    warmup: int = param(5, "Untimed forward passes before sampling.", ge=0, le=100_000)
    samples: int = param(50, "Timed forward passes per batch size.", ge=1, le=100_000)
    budget_frac: float = param(0.05, "Time budget of the latency passes as a fraction of the measured epochs' "
                                     "time (0.05 = 5%), shared equally by the batch sizes: warmup and samples "
                                     "stop when the next pass would not fit (one timed sample at least), and the "
                                     "log says how many were taken.", gt=0)


@dataclass
class MemoryConfig:
    margin: float = param(0.1, "Fraction of the memory budget kept free when fitting a batch (CUDA context, "
                               "fragmentation, epoch-to-epoch variation).", ge=0, lt=1)
    probe_steps: int = param(3, "Real training steps per probe of the `auto` batch-size search on a GPU.", ge=1)
    predict: bool = param(True, "On a GPU, trace one training step with fake tensors and log its predicted peak "
                                "(predicted_peak_vram_mb) beside the measured one.")


@dataclass
class NoiseScaleConfig:
    enabled: bool = param(True, "After the measured epochs, estimate the gradient noise scale B_simple from pairs "
                                "of the model's own steps at its batch and an eighth of it "
                                "(trainbench.measure.noise_scale); never timed. false: skipped.")
    budget_frac: float = param(0.1, "Time budget of the noise-scale pairs as a fraction of the measured epochs' "
                                    "time (0.1 = 10%): it takes as many pairs as fit, none when not one fits, "
                                    "and says so.", gt=0)
    max_pairs: int = param(16, "Most pairs of steps (one at each batch size); more pairs resolve the estimate "
                               "better (its relative standard error is logged as noise_scale_rel_se).", ge=1)


class DistBackend(ValueEnum):
    """``trainer.distributed.backend``: auto = nccl on CUDA, gloo on a CPU."""

    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


@dataclass
class DistributedConfig:
    nproc: int = param(1, "Ranks of the job on this node: >1 runs it under torch DDP, launched the torchrun way "
                          "(torch.distributed.run), each step's global batch (model.batch_size) split across the "
                          "ranks; models that do not support it run on one rank (docs/distributed.md).", ge=1)
    nnodes: int = param(1, "Nodes of the job: >1 only under SLURM (hydra/launcher=slurm_gpu with "
                           "hydra.launcher.nodes and tasks_per_node=nproc; each SLURM task is a rank).", ge=1)
    backend: DistBackend = param(DistBackend.auto, "The collective backend: auto (nccl on CUDA, gloo on a CPU), "
                                                   "nccl or gloo.")
    timeout_s: float = param(120.0, "Seconds a rank waits in a collective (the process group's timeout) before "
                                    "the job fails: a rank stopped, hung or gone fails the job within timeout_s "
                                    "plus the agent's 30 s shutdown (docs/distributed.md).", gt=0, le=86_400)


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
class ReferenceProfileConfig:
    enabled: bool = param(True, "Where the job trains another size than `reference` (the CPU profile's `small`), "
                                "also profile the model at its reference size without training it: a run of its "
                                "own (kind=size_profile, outcome profiled) holding the workload profile and the memory "
                                "prediction the analysis projects the reference size from (docs/run-contract.md). "
                                "Skipped where the two sizes are one config (the trained run then stands for "
                                "both) and under data parallelism.")
    budget_s: float = param(60.0, "Seconds the reference profile may take (compose, data, build, memory "
                                  "prediction, workload profile): past them it stops, its run ends failed saying "
                                  "so, and the job still completes.", gt=0, le=86_400)


@dataclass
class TrainerConfig:
    profile: str = param("default", "Label of this trainer profile (default, cpu, quick, ...), logged.")
    size: str = param("small", "The model size this profile measures, as its defaults list selects it (`override "
                               "/size@_global_.size: ...`); recorded so that the analysis' decision uses this size.")
    epochs: int = param(500, "Most measured epochs (after warmup); trainer.stop may end the run earlier.", ge=1)
    warmup_epochs: int = param(5, "Extra epochs run first and flagged as warmup; the analysis drops them.",
                               ge=0, le=100_000)
    seed: int = param(0, "Seed for torch, numpy and python's random.", ge=0)
    device: Device = param(Device.auto, "auto (cuda when available), cpu or cuda.")
    deterministic: bool = param(False, "Use deterministic algorithms (slower; exact reruns on CPU).")
    precision: Precision = param(Precision.auto, "Autocast precision of forward passes: auto, fp32, bf16 or "
                                 "fp16 (fp16 adds a GradScaler). auto: bf16 on GPUs of capability >= 8.0, fp16 on "
                                 "7.x (V100, T4), fp32 on a CPU (trainbench.core.precision); the run records "
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
    progress: bool = param(True, "Show a progress bar (only when stderr is a terminal; elsewhere the log gets "
                                 "phase lines and epoch lines at a bounded rate).")
    progress_every_epochs: int = param(10, "Without a terminal: log an epoch line every this many epochs ...", ge=0)
    progress_every_s: float = param(30.0, "... or every this many seconds, whichever comes first (both 0: none).",
                                    ge=0)
    profile_reason: str | None = param(None, "Why this profile was chosen: set by trainer=auto (the default) at "
                                             "start-up, e.g. `auto: no CUDA GPU`; empty when trainer= was given.")
    latency: LatencyConfig = param(doc="Inference latency measurement.", factory=LatencyConfig)
    grad_accum: int = param(1, "Micro-batches of model.batch_size accumulated per optimiser step (the optimiser "
                               "batch is their sum; an epoch does the same work).", ge=1)
    effective_batch: int | None = param(
        None, "Samples per optimiser step; micro-batches of at most model.batch_size (or the `auto` size) and "
        "the accumulation steps are derived. Do not combine with trainer.grad_accum.", ge=1)
    memory: MemoryConfig = param(doc="Memory budget fitting: `auto` batch search and peak prediction.",
                                 factory=MemoryConfig)
    profile_workload: bool = param(True, "After the measured epochs, profile one more epoch under FLOP/byte/op "
                                         "counters (measure/workload.py; a few steps of each loop, scaled): the "
                                         "workload profile the analysis projects other GPUs from. Never timed. "
                                         "Skipped with compile=true.")
    reference_profile: ReferenceProfileConfig = param(
        doc="The reference size profiled (not trained) where the job trains a smaller one.",
        factory=ReferenceProfileConfig)
    stop: StopConfig = param(doc="The measurement budget: when to stop before trainer.epochs (a maximum).",
                             factory=lambda: StopConfig())
    noise_scale: NoiseScaleConfig = param(doc="The gradient noise scale after the measured epochs, and its "
                                              "time budget.", factory=NoiseScaleConfig)
    distributed: DistributedConfig = param(doc="Data parallelism: ranks per node, nodes and the collective "
                                               "backend (docs/distributed.md).", factory=DistributedConfig)


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
    rerun_allow_spec: str | None = param(
        None, "With rerun=: the logged model.spec (<package.module>:<SPEC>) you trust to be imported; a logged "
        "module path that no installed model declares is refused without it (docs/scaling-out.md).")


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


def _numeric_fields(cls: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """{dotted key: field metadata} of the fields of ``cls`` (and its nested sections) that carry a range."""
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            _numeric_fields(type(default), f"{prefix}{f.name}.", out)
        elif any(f.metadata.get(k) is not None for k in ("ge", "gt", "le", "lt")):
            out[f"{prefix}{f.name}"] = f.metadata
    return out


def logged_param_problems(params: Any) -> list[str]:
    """Why logged params (MLflow's ``section.key`` strings) hold values the command line would refuse: the
    ranges of this version's schemas (:func:`~trainbench.config.shared.range_problem`), non-finite numbers
    included. A key the schemas do not know (a model's own field, a derived param) is not checked here."""
    fields: dict[str, Any] = {}
    for section, cls in (("trainer", TrainerConfig), ("hardware", HardwareConfig), ("data", DataConfig),
                         ("model", ModelConfig)):
        _numeric_fields(cls, section + ".", fields)
    from trainbench.core.vocab import ParamKey

    problems = []
    for key, rule in ((ParamKey.BATCH_SIZE, batch_size_problem), (ParamKey.MODEL_SIZE, size_problem)):
        if key in params and params[key] not in (None, "None"):
            problem = rule(params[key])
            if problem:
                problems.append(problem)
    for key, raw in params.items():
        meta = fields.get(key)
        if meta is None or raw in (None, "None", "", "auto"):
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        literal = str(raw).strip()  # an integer as written (never 1e300 spelled out in 300 digits)
        problem = range_problem(key, int(literal) if re.fullmatch(r"[+-]?[0-9]{1,18}", literal) else value, meta)
        if problem:
            problems.append(problem.split(". (", 1)[0])  # the rule, without the doc and the fix
    return problems

#: A model size names a config group option (conf/model/<model>/<size>.yaml): a plain short name.
_SIZE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def batch_size_problem(bs: Any) -> str | None:
    """Why ``bs`` is not a ``model.batch_size`` (a positive integer, or ``auto``), or None. A logged value is the
    string MLflow kept: it is read as the command line reads it."""
    if isinstance(bs, str) and bs != "auto":
        bs = int(bs) if re.fullmatch(r"[+-]?[0-9]+", bs.strip()) else bs
    if bs == "auto" or (isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1):
        return None
    return f"model.batch_size={bs!r} is invalid: use a positive integer or `auto`."


def size_problem(size: Any) -> str | None:
    """Why ``size`` is not a ``model.size`` (the name of a size config, conf/model/<model>/<size>.yaml), or None."""
    if isinstance(size, str) and _SIZE_NAME.fullmatch(size):
        return None
    return (f"model.size={str(size)[:40]!r} is invalid: a size names a config of conf/model/<model>/ (small, "
            "reference, tiny): letters, digits, `_`, `-` or `.`, at most 64.")


_SCHEMAS = ("ohlcv-1s", "ohlcv-1m", "ohlcv-1h", "ohlcv-1d", "mbp-10")


def validate(cfg: DictConfig | Any) -> Any:
    """Check types, ranges and cross-field rules; return the config as dataclass objects.

    Raises :class:`ConfigError` naming the key. Call it once at the start of a job.
    """
    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    for section in ("model", "data", "trainer", "hardware", "tracking"):
        part = getattr(obj, section, None)
        if dataclasses.is_dataclass(part):
            check_ranges(part, section + ".")
    check_peaks(getattr(obj, "hardware", None))
    model = getattr(obj, "model", None)
    if model is not None:
        for problem in (batch_size_problem(model.batch_size), size_problem(model.size)):
            if problem:
                raise ConfigError(problem)
        if isinstance(model, ModelConfig):
            model.check()  # the model's own cross-field rules (ModelConfig.check)
    trainer = getattr(obj, "trainer", None)
    if trainer is not None and trainer.profile == TRAINER_AUTO:
        raise ConfigError("trainer=auto was not resolved: run.py (and compose_run) turn it into the GPU profile "
                          "(trainer=default) or the CPU profile (trainer=cpu) at start-up; in a sweep list name "
                          "the profiles (trainer=default,quick).")
    if trainer is not None and trainer.effective_batch is not None and trainer.grad_accum != 1:
        raise ConfigError(f"trainer.grad_accum={trainer.grad_accum} and trainer.effective_batch="
                          f"{trainer.effective_batch} are both set: set one (effective_batch derives grad_accum).")
    if trainer is not None:
        dist_problem(trainer.distributed, model)
    data = getattr(obj, "data", None)
    if data is not None and data.schema not in _SCHEMAS:
        raise ConfigError(f"data.schema={data.schema!r} is not supported: use one of {', '.join(_SCHEMAS)}.")
    tracking = getattr(obj, "tracking", None)
    if tracking is not None and tracking.kind not in ("local", "server"):
        raise ConfigError(f"tracking.kind={tracking.kind!r} is invalid: use tracking=local or tracking=server.")
    check_names(tracking, {"sweep_id": getattr(obj, "sweep_id", None)})  # config key
    if tracking is not None:
        check_uri_credentials(tracking.uri)
    if getattr(obj, "paths", None) is not None:
        check_paths(obj.paths)
    return obj


def world_size(distributed: DistributedConfig) -> int:
    """The ranks of a job: ``nproc x nnodes``."""
    return int(distributed.nproc) * int(distributed.nnodes)


def dist_problem(distributed: DistributedConfig, model: Any) -> None:
    """Raise :class:`ConfigError` for a data-parallel setting that cannot run (docs/distributed.md)."""
    n = world_size(distributed)
    if n == 1:
        return
    if isinstance(model, ModelConfig):
        model.check_world(n)
    if model is not None and str(model.batch_size) == "auto":
        raise ConfigError(f"model.batch_size=auto does not combine with trainer.distributed (world size {n}): the "
                          "batch search probes one process. Give the global batch, e.g. model.batch_size=256, or "
                          "set trainer.distributed.nproc=1.")
    if model is not None and int(model.batch_size) % n:
        raise ConfigError(f"model.batch_size={model.batch_size} is the global batch of each step and must split "
                          f"evenly across the {n} ranks (trainer.distributed.nproc x nnodes): use a multiple of {n}.")


# --------------------------------------------------------------------------------------------------
# trainer=auto: the profile for this machine
# --------------------------------------------------------------------------------------------------

#: The trainer profile run.py picks by default: the GPU profile on a GPU, the CPU profile elsewhere.
TRAINER_AUTO = "auto"
GPU_PROFILE, CPU_PROFILE = "default", "cpu"
_TRAINER_GROUP = re.compile(r"^[+~]*trainer(@[^=]*)?=")


def resolve_trainer(overrides: list[str], cuda: bool) -> tuple[list[str], str, str]:
    """``(overrides, profile, reason)`` with ``trainer=auto`` (the default, or given) resolved.

    An explicit ``trainer=<profile>`` wins and is kept as it is. Otherwise the profile is ``default`` (the GPU
    profile) when the job will have a CUDA GPU and ``cpu`` when not: ``trainer.device=cpu``/``cuda`` on the
    command line decides; a launcher that runs the jobs on GPUs (``hydra/launcher=<name with gpu>``)
    means a GPU; else ``cuda`` (whether this machine has one). The resolved choice is appended as
    ``trainer=<profile>`` and ``trainer.profile_reason='<why>'``, which the run records and prints.
    """
    given = [o for o in overrides if _TRAINER_GROUP.match(o)]
    choice = given[-1].split("=", 1)[1] if given else TRAINER_AUTO
    rest = [o for o in overrides if not _TRAINER_GROUP.match(o)]
    if choice != TRAINER_AUTO:  # the last one given wins (make sweep ARGS="trainer=quick" after trainer=auto)
        return [*rest, given[-1]], choice, f"trainer={choice} given"
    device = next((o.split("=", 1)[1] for o in reversed(rest) if o.startswith("trainer.device=")), None)
    launcher = next((o.split("=", 1)[1] for o in reversed(rest) if o.startswith("hydra/launcher=")), "")
    if device == "cpu":
        profile, why = CPU_PROFILE, "trainer.device=cpu"
    elif device == "cuda":
        profile, why = GPU_PROFILE, "trainer.device=cuda"
    elif "gpu" in launcher:
        profile, why = GPU_PROFILE, f"hydra/launcher={launcher} runs the jobs on GPUs"
    elif cuda:
        profile, why = GPU_PROFILE, "a CUDA GPU is available"
    else:
        profile, why = CPU_PROFILE, "no CUDA GPU (torch.cuda.is_available() is false)"
    reason = f"trainer=auto: {why}"
    return [*rest, f"trainer={profile}", f"trainer.profile_reason='{reason}'"], profile, reason
