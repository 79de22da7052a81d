"""Typed configuration schemas of analyze.py: decision, analysis, comparison, and their validation.

Values live in ``conf/analyze.yaml`` and ``conf/decision/``; the shared sections (tracking, hardware,
paths) and :func:`~trainbench.config.run.param` come from :mod:`trainbench.config.run`. Importing this module
loads neither torch nor the model registry nor the measurement harness: analyze.py reads only MLflow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
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
)
from trainbench.core.contamination_policy import ContaminatedPolicy
from trainbench.core.enums import ValueEnum
from trainbench.core.errors import ConfigError
from trainbench.core.precision import ProjectionPrecision

#: The numbers of GPUs one model is projected across (analysis/projection/data_parallel.py's DP_SIZES).
DATA_PARALLEL_SIZES = (1, 2, 4, 8)


class OutlierRule(ValueEnum):
    iqr = "iqr"
    mad = "mad"
    none = "none"


def _registered_models() -> list[str]:
    """Every registered model's name, read from the entry points (no torch, no model module imported)."""
    from trainbench.core.entrypoints import model_names

    return model_names()


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
    target_epochs: int | None = param(None, "Epochs to project; default decision.target_epochs.<model>.", ge=1,
                                      le=MAX_TARGET_EPOCHS)


@dataclass
class CurvesConfig:
    """How the epochs are estimated from each run's curve (analysis/plan/curves.py, docs/report-schema.md)."""

    patience: int = param(10, "Early stopping: epochs without an improvement before training would stop.", ge=1)
    min_delta: float = param(0.01, "Early stopping: an improvement must beat the best value by this fraction of "
                                   "the curve's range (its spread over the measured epochs).", ge=0, lt=1)
    min_epochs: int = param(10, "Fewer epochs than this: no extrapolation (the configured epochs are used).", ge=3)
    threshold: float = param(0.001, "Extrapolation: stop where the expected improvement per epoch falls below "
                                    "this fraction of the fitted total improvement.", gt=0, lt=1)
    max_epochs: int = param(100_000, "Extrapolation: fits still improving here are refused.", ge=10)
    bootstrap: int = param(200, "Parameter draws per run for the extrapolated epochs' range (from each fit's "
                                "covariance, without refitting).", ge=10)
    patience_growth: float = param(0.1, "Early stopping: the patience grows to this fraction of the best epoch "
                                        "when that is longer than `patience`.", ge=0, lt=1)
    noise_z: float = param(3.0, "Early stopping: an improvement of the smoothed curve must exceed this many "
                                "standard errors of its own noise (and min_delta).", ge=0)
    min_epochs_stop: int = param(20, "Early stopping needs a curve this long (shorter ones are extrapolated or "
                                     "refused, and labelled).", ge=3)


@dataclass
class DecisionConfig:
    plan: list[str] = param(doc="Models the training plan needs; each is reported as measured or missing. "
                                "Default: every registered model (python -m trainbench.config lists them).",
                            factory=_registered_models)
    buffer: float = param(0.5, "Safety margin added to the upper interval bound (0.5 = +50%).", ge=0, le=10)
    local_max_hours: float = param(24.0, "Conservative total below this: train locally (local_gpu).", gt=0)
    cloud_min_hours: float = param(48.0, "Conservative total above this: rent a cloud GPU (cloud).", gt=0)
    min_epochs: int = param(100, "Measured epochs (after warmup and outliers) a model needs for high confidence; "
                                 "also the length a curve needs before its epochs may replace the configured "
                                 "ones (decision.epochs=auto).", ge=1)
    # Typed Any (not ModelEstimateConfig) because OmegaConf cannot add a new key to a dict of dataclasses from
    # the command line; validate_analyze() checks each entry against ModelEstimateConfig.
    estimates: dict[str, Any] = param(
        doc="Estimates for planned models that were not measured: `+decision.estimates.tft.epoch_ms=40` "
            "(fields of ModelEstimateConfig: epoch_ms, target_epochs).",
        factory=dict)
    target_epochs: dict[str, int] = param(
        doc="The epochs the team plans on the planned data, per model, over the runs' `model.target_epochs` "
            "(`+decision.target_epochs.dqn=2000`): never converted; they also confirm the epochs (no spread in "
            "the Monte Carlo).", factory=dict)
    catalogue: list[CloudInstanceConfig] = param(doc="Cloud instances you were quoted a price for, priced beside "
                                                     "decision.offers: 'decision.catalogue=[{name: quoted-h100, "
                                                     "gpu: h100_sxm, gpus: 1, usd_per_hour: 2.5, price_date: "
                                                     "2026-12-01}]'.", factory=list)
    offers: str = param("packaged", "Where the cloud offers come from (SkyPilot's catalogue format): `packaged` (the "
                                    "dated extract shipped in the package, conf/offers/source.json names its "
                                    "commits and date; `trainbench offers refresh` rewrites it), `skypilot` (the "
                                    "newest ~/.sky/catalogs/<version>/ here), or a folder of <cloud>/vms.csv files "
                                    "or one vms.csv. `none`: only decision.catalogue.")
    gpu_counts: list[int] = param(doc="GPU counts of the offers the decision projects (of each cloud, GPU and "
                                      "count, the cheapest instance type).", factory=lambda: [1, 2, 4, 8])
    spot: bool = param(False, "Also price each offer at its spot price (an interruptible instance, its own row).")
    spot_restart_allowance: float = param(0.25, "Spot rows: the conservative hours (and cost) grow by this "
                                                "fraction for interruptions (work lost since the last checkpoint "
                                                "and restarts); an assumption, not a measurement.", ge=0, le=10)
    plan_data: str = param("futures_90d", "The data the plan trains on, for every model: a data config name "
                                          "(conf/data/<name>.yaml), a path to a .dbn/.dbn.zst file, or `measured` "
                                          "(the data of the sweep). A supervised epoch is scaled by its windows.")
    epochs: str = param("auto", "How the plan's epochs are chosen, for every model: `auto` (a curve of the "
                                "decided size at least decision.min_epochs long that shows where it levels off "
                                "(early stopping or learning-curve extrapolation), converted to other planned "
                                "data only with a measured data exponent; else the configured epochs) or `config` "
                                "(model.target_epochs / decision.target_epochs). Configured epochs are the team's "
                                "on the planned data and never converted.")
    # Typed Any for the same reason as estimates; validate_analyze() checks the keys.
    model_plans: dict[str, Any] = param(
        doc="Per-model plan settings over plan_data/epochs: `+decision.model_plans.tft.data=<name|file>`, "
            "`+decision.model_plans.tft.epochs=<n>|auto|config`, `+decision.model_plans.tft.batch=<n>` (a planned "
            "batch other than the measured one: epochs scaled by the gradient noise scale).",
        factory=dict)
    curves: CurvesConfig = field(default_factory=CurvesConfig)
    plan_min_batches: int = param(4, "The data scaling is trusted when the measured data held at least this many "
                                     "batches of training windows.", ge=1)
    p_local: float = param(0.9, "Recommend local_gpu when P(total < local_max_hours) is at least this.", gt=0, le=1)
    p_cloud: float = param(0.5, "Recommend cloud when P(total > cloud_min_hours) is at least this (and local_gpu "
                                "does not apply).", gt=0, le=1)
    recommend_by: str = param("probability", "What the recommendation reads: `probability` (the Monte Carlo "
                                             "P(total < local_max_hours) >= p_local: local_gpu; P(total > "
                                             "cloud_min_hours) >= p_cloud: cloud; else user_choice) or "
                                             "`conservative` (the upper interval end plus the buffer).")
    mc_samples: int = param(20_000, "Monte Carlo draws of the total hours.", ge=1000)
    size: str | None = param(None, "The model size the decision uses (small, reference). None: `reference`, the "
                                   "size the team trains, wherever the sweep has a run of its workload (trained, "
                                   "trained at a size of the same config, or profiled without training: "
                                   "trainer=cpu profiles it), else the size the runs' trainer profile names "
                                   "(trainer.size). Other sizes are reported as rows of their own "
                                   "(`<model>[<size>]`), never pooled and never in the total. A size with "
                                   "neither a run nor a profile in the sweep is refused.")


@dataclass
class AnalysisConfig:
    outliers: OutlierRule = param(OutlierRule.iqr, "Outlier rule: iqr (Tukey fences), mad (robust z) or none.")
    contaminated: ContaminatedPolicy = param(
        ContaminatedPolicy.auto, "Epochs flagged contaminated (a busy machine): auto drops them when a run has at "
        "least 3 clean ones and else uses them, labelled, at low confidence; drop never uses them; use always "
        "does (trainbench.core.contamination_policy).")
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
    grad_norm_max: float = param(1e3, "A gradient norm above this many times the median norm of the run's first "
                                      "third counts as exploding (trainbench.core.grad_health, as the run's tag).",
                                 gt=0)
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


def _default_match() -> list[str]:
    from trainbench.core.vocab import (
        ParamKey,  # imported when used: the schema modules import nothing at import
    )

    return [ParamKey.MODEL_SIZE, ParamKey.BATCH_SIZE, "data.name", "data.n_bars", ParamKey.TRAINER_PRECISION,
            ParamKey.TRAINER_COMPILE]


@dataclass
class CompareConfig:
    sweeps: list[str] = param(doc="Two sweeps to compare, baseline first: `compare=<sweep_a>,<sweep_b>` (ids, "
                                  "`latest` or `previous`). Empty: the normal analysis of `sweep`.",
                              factory=list)
    match: list[str] = param(
        doc="Run params that must be equal for runs of the two sweeps to be compared (besides the model).",
        factory=lambda: _default_match())
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
class ProjectionConfig:
    """How GPUs nobody measured are projected (docs/projection.md)."""

    precision: ProjectionPrecision = param(ProjectionPrecision.auto, "Precision the projections are made at: auto (what trainer.precision=auto "
                                   "and trainer.tf32=true resolve on each GPU: bf16 on capability >= 8.0, fp16 "
                                   "on 7.x, TF32 for fp32 matmuls on >= 8.0), fp32 (TF32 off), tf32, bf16 or "
                                   "fp16.")
    data_parallel: int = param(1, "Also project every model across this many GPUs of one board (torch DDP: 1, 2, 4 "
                                  "or 8), on each project= GPU and each catalogue instance that holds them: "
                                  "`analyze.py project=h100_sxm projection.data_parallel=8` (docs/projection.md, "
                                  "data parallelism). Multi-GPU catalogue instances are always projected at 2, 4 "
                                  "and 8 up to their GPUs.", ge=1, le=8)



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
    projection: ProjectionConfig = field(default_factory=ProjectionConfig)


def validate_analyze(cfg: DictConfig | Any) -> AnalyzeConfig:
    """Ranges and cross-field rules of analyze.py's config; raises :class:`ConfigError` naming the key."""
    obj = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
    for section in ("tracking", "hardware", "decision", "analysis", "projection"):
        check_ranges(getattr(obj, section), section + ".")
    if obj.projection.data_parallel not in DATA_PARALLEL_SIZES:
        raise ConfigError(f"projection.data_parallel={obj.projection.data_parallel} is not a projected number of "
                          f"GPUs: use one of {', '.join(map(str, DATA_PARALLEL_SIZES))}.")
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
        check_ranges(est, key + ".")
        estimates[name] = est
    d.estimates = estimates
    for name, n in d.target_epochs.items():
        if not _epochs_ok(n):
            raise ConfigError(f"decision.target_epochs.{name}={n!r} is invalid: use a positive integer of at most "
                              f"{MAX_TARGET_EPOCHS}.")
    _validate_plan(d)
    if not d.plan:
        raise ConfigError("decision.plan is empty: list the models the training plan needs, e.g. [dqn, ppo].")
    if not d.gpu_counts or any(int(n) < 1 for n in d.gpu_counts):
        raise ConfigError(f"decision.gpu_counts={list(d.gpu_counts)} is invalid: list GPU counts of 1 or more, "
                          "e.g. [1, 2, 4, 8].")
    if d.local_max_hours > d.cloud_min_hours:
        raise ConfigError(f"decision.local_max_hours={d.local_max_hours} is above decision.cloud_min_hours="
                          f"{d.cloud_min_hours}: the local threshold must not exceed the cloud one.")
    if obj.tracking.kind not in ("local", "server"):
        raise ConfigError(f"tracking.kind={obj.tracking.kind!r} is invalid: use tracking=local or tracking=server.")
    if not obj.sweep:
        raise ConfigError("sweep is empty: use sweep=latest, sweep=all or sweep=<sweep_id>.")
    c = obj.compare
    check_names(obj.tracking, {"sweep": obj.sweep, **{f"compare[{i}]": v for i, v in enumerate(c.sweeps or [])}})
    check_uri_credentials(obj.tracking.uri)
    check_paths(obj.paths)
    if c.sweeps and (len(c.sweeps) != 2 or c.sweeps[0] == c.sweeps[1]):
        raise ConfigError(f"compare={','.join(map(str, c.sweeps))} is invalid: name two different sweeps, baseline "
                          "first: compare=<sweep_a>,<sweep_b> (sweep ids, latest or previous).")
    if c.unit not in ("auto", "run", "epoch"):
        raise ConfigError(f"compare.unit={c.unit!r} is invalid: use auto, run or epoch.")
    check_ranges(c, "compare.")
    return obj


PLAN_KEYS = ("data", "epochs", "batch")


def _validate_plan(d: DecisionConfig) -> None:
    """decision.epochs, decision.plan_data and each decision.model_plans.<model> entry."""
    if d.epochs not in ("auto", "config"):
        raise ConfigError(f"decision.epochs={d.epochs!r} is invalid: use auto or config (or set one model's "
                          "epochs with +decision.model_plans.<model>.epochs=<n>).")
    if d.recommend_by not in ("probability", "conservative"):
        raise ConfigError(f"decision.recommend_by={d.recommend_by!r} is invalid: use probability or conservative.")
    if not str(d.plan_data).strip():
        raise ConfigError("decision.plan_data is empty: name a data config (futures_90d), a DBN file or `measured`.")
    plans = {}
    for name, p in d.model_plans.items():
        key = f"decision.model_plans.{name}"
        if not isinstance(p, dict):
            raise ConfigError(f"{key}={p!r} is invalid: set {key}.data, {key}.epochs or {key}.batch.")
        unknown = set(p) - set(PLAN_KEYS)
        if unknown:
            raise ConfigError(f"{key} has unknown keys {sorted(unknown)}: use {', '.join(PLAN_KEYS)}.")
        e = p.get("epochs")
        if e is not None and not (e in ("auto", "config") or _epochs_ok(e)):
            raise ConfigError(f"{key}.epochs={e!r} is invalid: use a positive integer of at most "
                              f"{MAX_TARGET_EPOCHS}, auto or config.")
        b = p.get("batch")
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ConfigError(f"{key}.batch={b!r} is invalid: use a positive integer (samples per optimiser step).")
        if p.get("data") is not None and not str(p["data"]).strip():
            raise ConfigError(f"{key}.data is empty: name a data config, a DBN file or `measured`.")
        plans[name] = dict(p)
    d.model_plans = plans
    check_ranges(d.curves, "decision.curves.")


def _epochs_ok(n: Any) -> bool:
    """A number of epochs a plan may name: a whole number from 1 to :data:`MAX_TARGET_EPOCHS`."""
    return isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_TARGET_EPOCHS


def check_model_names(d: DecisionConfig, known: Any) -> None:
    """Every model ``decision.plan``, ``decision.model_plans`` and ``decision.target_epochs`` name is a model
    the analysis knows (``known``: the registered models and the models of the store's runs; a planned model
    with a ``decision.estimates`` entry counts as declared); raises :class:`ConfigError` naming the unknown
    names, where, and the known ones. A typo is never ignored nor reported as a model not measured."""
    known = set(known) | set(d.estimates)
    for where, names in (("decision.plan", list(d.plan)), ("decision.model_plans", list(d.model_plans)),
                         ("decision.target_epochs", list(d.target_epochs))):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"{where} names {', '.join(map(repr, unknown))}: no registered model and no run of "
                              f"the store has that name; use one of {', '.join(sorted(known))} (or give a planned "
                              "model that was never measured an estimate: +decision.estimates.<model>.epoch_ms=<ms>).")


def register_analysis_configs() -> None:
    """Register analyze.py's schemas (no model registry, no torch)."""
    cs = ConfigStore.instance()
    cs.store(name="base_analyze", node=AnalyzeConfig)
    cs.store(group="decision", name="base_decision", node=DecisionConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
    cs.store(group="tracking", name="base_tracking", node=TrackingConfig)



# --------------------------------------------------------------------------------------------------
# the command line and the store: read before the analysis' modules load (analyze.py answers bad input at once)
# --------------------------------------------------------------------------------------------------


def _one_list(argv: list[str], key: str, target: str) -> list[str]:
    out = []
    for arg in argv:
        k, sep, value = arg.partition("=")
        if sep and k.lstrip("+") == key:
            names = [v.strip().strip("'\"") for v in value.strip().strip("'\"").strip("[]").split(",") if v.strip()]
            arg = f"{target}=[" + ",".join(f"'{n}'" for n in names) + "]"
        out.append(arg)
    return out


def compare_argv(argv: list[str]) -> list[str]:
    """``compare=a,b`` (which Hydra would read as a sweep over two values) -> ``compare.sweeps=['a','b']``."""
    return _one_list(argv, "compare", "compare.sweeps")


def project_argv(argv: list[str]) -> list[str]:
    """``project=a,b`` (which Hydra would read as a sweep over two values) -> ``project=['a','b']``."""
    return _one_list(argv, "project", "project")


def tracking_uri(cfg: Any) -> str:
    """The MLflow store of ``tracking``: ``tracking.uri``, else the local SQLite file under ``paths.mlruns``."""
    from pathlib import Path

    from trainbench.core.errors import AnalysisError

    t = cfg.tracking
    if t.uri:
        return str(t.uri)
    if t.kind == "local":
        return f"sqlite:///{Path(cfg.paths.mlruns) / 'mlflow.db'}"
    raise AnalysisError("tracking.uri is not set: use tracking=local, tracking=server or tracking.uri=<uri>.")
