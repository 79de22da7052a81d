"""The typed report: one dataclass per object of report.json, a doc for every field.

The pipeline's stages fill these types; ``report.json`` is their serialisation (analysis/fields.py), report.md,
the console and the plots read their attributes, and docs/report-schema.md is generated from their docs
(:mod:`trainbench.analysis.report.schema`, `trainbench docs`). A field's doc is ``field(metadata={"doc": ...})``, as the config
schemas' ``param(doc=...)``; a field marked ``omit_none`` is left out of the JSON while it is ``None`` (a key
that exists only in some cases, e.g. ``missing_reason``). The defaults are the values of a model without
timed runs: they live here once.

Objects that stages still build as JSON-shaped dicts (the plan, the decision, the projection tables) are
read back with ``from_json``, which refuses a key that has no field here: a new report field is added
here, with its doc, or the tests say which key is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.analysis.fields import Interval, doc
from trainbench.analysis.statistics.timing import ModelTiming
from trainbench.core.enums import ValueEnum
from trainbench.core.vocab import LossTrend, Outcome

#: report.json's schema version (docs/report-schema.md, "Changes")
SCHEMA_VERSION = 8


# --------------------------------------------------------------------------------------------------
# the report's value sets: each spelled once, members equal their strings (core/enums.py)
# --------------------------------------------------------------------------------------------------


class Source(ValueEnum):
    """``models.<m>.source``: where a model's hours come from."""

    MEASURED = "measured"
    PROFILED = Outcome.PROFILED  # a workload profile of the size, not trained: hours only where projected
    ESTIMATE = "estimate"  # decision.estimates
    MISSING = "missing"


class Recommendation(ValueEnum):
    """``decision.recommendation``: local GPU or cloud."""

    LOCAL_GPU = "local_gpu"
    USER_CHOICE = "user_choice"
    CLOUD = "cloud"
    INSUFFICIENT_DATA = "insufficient_data"


class Basis(ValueEnum):
    """The kind of figure an hour rests on (``instances[].basis``, ``decision.basis_kind``), strongest first:
    measured on the GPU, scaled from a measured GPU (or the catalogue's relative_speed), the team's estimate,
    projected by the roofline alone; ``other device``: the decision's fallback to the sweep's device."""

    MEASURED = "measured"
    SCALED = "scaled"
    ESTIMATE = "estimate"
    PROJECTED = "projected"
    OTHER_DEVICE = "other device"


#: The local instance's name in every table (``instances[]``, ``projections[]``).
LOCAL = "local"

#: From the strongest to the weakest: an instance's ``basis`` is its weakest model's.
BASIS_ORDER = (Basis.MEASURED, Basis.SCALED, Basis.ESTIMATE, Basis.PROJECTED)


class Confidence(ValueEnum):
    """``decision.confidence``."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class ReasonKind(ValueEnum):
    """``decision.confidence_reason_kinds[].kind``: what lowers the confidence (besides a model's stability
    warnings, whose kinds are ``models.<m>.stability.warning_kinds``)."""

    NO_TIMING = "no_timing"
    MISSING = "missing"
    NO_TARGET_EPOCHS = "no_target_epochs"
    ESTIMATED = "estimated"
    FEW_EPOCHS_USED = "few_epochs_used"
    NON_FINITE = LossTrend.NON_FINITE  # training went non-finite (the loss trend's word)
    INCOMPLETE_RUNS = "incomplete_runs"
    POWER_UNKNOWN = "power_unknown"
    BASIS = "basis"
    PROFILED_OUTSIDE = "profiled_outside"
    LOCAL_FIT = "local_fit"
    SIZE = "size"
    UNSIZED = "unsized"
    TARGET_EPOCHS_UNSET = "target_epochs_unset"
    THRESHOLD = "threshold"
    UNRESOLVED = "unresolved"
    EPOCHS_CONFIGURED = "epochs_configured"
    CURVE_OVERFITS = "curve_overfits"
    CURVE_WORSENED = "curve_worsened"
    DATA_SCALE_UNTRUSTED = "data_scale_untrusted"
    BUSY_MACHINE = "busy_machine"


@dataclass
class ConfidenceReason:
    """``decision.confidence_reason_kinds[]``: one reason that lowers the confidence, as data, made where it is
    decided (analysis/decision/decision.py): the report groups them by kind without reading their words."""

    kind: str = doc("a kind of the decision (`missing`, `basis`, `size`, `threshold`, `few_epochs_used`, "
                    "`epochs_configured`, `curve_overfits`, `data_scale_untrusted`, `busy_machine`, ...) or of a "
                    "model's stability warning (`noisy`, `drift`, `disagree`, ...: "
                    "`models.<m>.stability.warning_kinds`)")
    models: list[str] = doc("the models it is about, where its words name them first (`<models>: <detail>`); "
                            "empty for a reason about the sweep")
    detail: str = doc("its words after the models")
    severe: bool = doc("it makes the confidence low (else at most medium)", False)

    @property
    def text(self) -> str:
        """The reason in words, as ``confidence_reasons`` lists it."""
        return f"{', '.join(self.models)}: {self.detail}" if self.models else self.detail


@dataclass
class ModelProjection:
    """``projection``: a model's hours on the sweep's device."""

    target_epochs: int | None = doc("the epochs the hours count (`plan.epochs` with a plan)")
    hours: float | None = doc("mean × target epochs (× `work_scale` with a plan)")
    hours_ci95: Interval | None = doc("the mean's interval × target epochs (`null` for estimates, a single epoch "
                                      "or an unresolved interval)", None)
    work_scale: float | None = doc("`plan.data_scale` × `plan.batch_scale`", None, omit_none=True)
    hours_range: Interval | None = doc("[interval low × epochs low, interval high × epochs high] (with a plan)",
                                       None, omit_none=True)


@dataclass
class AlphaRun:
    """``plan.data_alpha_runs[]``: one data size that gave the data exponent α."""

    windows: int = doc("training + validation windows of the runs at this size")
    runs: list[str] = doc("the runs' names")
    epochs: int | None = doc("where their curves are best (the median epoch as good as the smoothed minimum)")
    epochs_range: list[int] | None = doc("its 5–95% range [low, high]")
    epochs_basis: str = doc("how it was read: `best epoch` (the smoothed minimum), `extrapolated plateau` (a curve "
                            "still improving at its end), or both")
    steps: int | None = doc("best epoch × steps per epoch (⌈training windows / batch⌉)")


@dataclass(kw_only=True)
class Plan:
    """``plan``: what the model will be trained on and for how long, beside what was measured. Hours of a
    model on any instance = epoch_ms on that instance × `data_scale` × `epochs` × `batch_scale`."""

    data: str = doc("the planned data (`decision.plan_data`, `decision.model_plans.<m>.data`: a data config name, "
                    "a DBN file, or the measured data's name)")
    data_measured: str | None = doc("the data the runs measured on")
    batch_measured: int | None = doc("the measured batch")
    windows_measured: int | None = doc("training + validation windows of a supervised model on the measured data "
                                       "(after session gaps and the split); `null` for RL")
    windows_planned: int | None = doc("the same on the planned data")
    windows_method: str | None = doc(
        "how `windows_planned` was found: `counted: windows of <span> bars on <layout>` (the span recovered from "
        "the runs' `model_info.train_windows` on the measured data's layout, the count "
        "`trainbench.core.windows.count_windows` on the planned layout: its file, or the synthetic generator's "
        "calendar before the file exists), `proportional to the bars/events` (the span could not be recovered, "
        "or a book), or `measured data kept`")
    data_scale: float = doc("`windows_planned / windows_measured` for a supervised model (a supervised epoch is a "
                            "pass over the training windows plus the validation pass); 1.0 for RL (an epoch is "
                            "fixed environment steps) and where the measured data is kept")
    data_scale_trusted: bool = doc("false when the measured data held fewer than `decision.plan_min_batches` (4) "
                                   "batches of training windows (fixed per-epoch costs dominate such an epoch) or "
                                   "its size is unknown; the confidence drops")
    data_scale_note: str = doc("why the scale is what it is, or why it is not trusted; also when the model's data "
                               "kind (bars, book) differs from the planned data's, so its measured data is kept")
    target_epochs_configured: int | None = doc("the configured epochs: the epochs the team plans **on the planned "
                                               "data** (`model.target_epochs` of the runs, or "
                                               "`decision.target_epochs.<m>`); never converted, shown beside the "
                                               "curve's estimate")
    epochs_curve: str | None = doc("the curve read (`val_loss`, `episode_reward`, `loss`)", extra=True)
    epochs_families: dict[str, float] | None = doc("the Akaike weight of each curve family", extra=True)
    epochs_notes: list[str] = doc("notes (seeds pooled, runs without an estimate, fits capped)", extra=True)
    epochs: int | None = doc("the planned epochs (Methods: epochs from evidence)")
    epochs_range: list[int] | None = doc("their 5–95% range [low, high]")
    epochs_basis: str = doc("`early_stopping` or `extrapolated` (a curve of the decided size, at least "
                            "`decision.min_epochs` long, that shows where it levels off, converted to the planned "
                            "data only with a measured α), `configured` (asked for: `decision.epochs=config` or a "
                            "number), or `configured: <why the curve was not used>` (shorter than "
                            "`decision.min_epochs`, α unmeasured where the planned data differs, too few epochs, a "
                            "worsening or flat curve, no family fits, still improving at "
                            "`decision.curves.max_epochs`, no curve at this size: profiled, not trained)")
    epochs_confirmed: bool = doc("the epochs rest on a curve or on a figure the team gave the analysis "
                                 "(`decision.target_epochs.<m>`, `decision.model_plans.<m>.epochs`, "
                                 "`decision.epochs=<n>`); false for the runs' `model.target_epochs`, which the "
                                 "Monte Carlo then spreads from half to twice (an assumption)", True)
    epochs_labels: list[str] = doc("what the plan says about the curves: `overfits after epoch k: ...`, `worse than "
                                   "its start after epoch k: ...`, `too short for early stopping: ...` (prefixed "
                                   "`run i:` with several runs)", factory=list)
    diverged_after_epoch: int | None = doc("the best epoch of a curve that then climbed above its starting value "
                                           "(the earliest over the runs; `curve_worsened` says how); `null` when "
                                           "none did (a run whose loss went non-finite is its `outcome` "
                                           "`diverged`, not this)", None)
    curve_worsened: str | None = doc("how that curve got worse: `overfitting` (its `val_loss` climbed while the "
                                     "training loss fell, in every run that climbed) or `worsening` (anything "
                                     "else); `null` when none did", None)
    epochs_measured_data: int | None = doc("the epochs read off the measured (largest) data's curves, before any "
                                           "conversion to the planned data (also where the curve was not used: "
                                           "`epochs_basis` says why); `null` without a curve estimate", None)
    epochs_measured_data_range: list[int] | None = doc("their range [low, high]; `null` without a curve estimate",
                                                       None)
    data_alpha: float | None = doc("the fitted exponent α of steps ∝ windows^α (clipped to [0, 1]); `null` "
                                   "without evidence or where it does not apply", None)
    data_alpha_range: list[float] | None = doc("its 5th–95th percentile range; `null` without evidence or where it "
                                               "does not apply", None)
    data_alpha_basis: str = doc("`fitted on where the curves are best at N data sizes (...)` (the smoothed minimum "
                                "of each size's curves, never the early-stopping epoch; patience added after the "
                                "conversion), `no evidence: ...` (the curve's epochs are then not converted and "
                                "the configured ones stand), or `not applied: ...` (RL, configured epochs, the "
                                "planned data is the measured data, the curve not used)", "")
    data_alpha_runs: list[AlphaRun] = doc("the data sizes that gave α (Methods: epochs on the planned data)",
                                          factory=list)
    noise_scale: float | None = doc("the runs' median gradient noise scale B_simple (run metric `noise_scale`)")
    noise_scale_runs: int = doc("runs whose noise scale the median takes", 0)
    noise_scale_pairs: int | None = doc("pairs of steps those runs took for it (run metric `noise_scale_pairs`; "
                                        "as many as fit in `trainer.noise_scale.budget_frac` of the measured "
                                        "epochs); `null` when no run gave one", None)
    noise_scale_rel_se: float | None = doc("the median of those runs' relative standard errors of B_simple (run "
                                           "metric `noise_scale_rel_se`); `null` with under two pairs a run or no "
                                           "estimate", None)
    noise_scale_resolution: str = doc("how resolved it is, in words: `N pair(s) of steps in K run(s), relative "
                                      "standard error X%` (`unresolved` when ±1.96 standard errors include 0), "
                                      "or `not measured: <the runs' reasons>` (tag `noise_scale_note`: the budget "
                                      "allowed no pair, turned off, a batch too small to split, ...)", "")
    batch_planned: int | None = doc("the planned batch (`decision.model_plans.<m>.batch`, default the measured)")
    batch_scale: float = doc("epochs factor for the planned batch: `(1 + B_planned/B_noise) / (1 + "
                             "B_measured/B_noise)`, a model-based estimate (McCandlish et al. 2018); 1.0 when the "
                             "batch is unchanged or no noise scale was measured")
    batch_note: str = doc("which of those")
    data_parallel_epochs: dict[str, float] = doc(
        "{N: epochs factor} for N = 2, 4, 8 GPUs at the per-GPU batch (the global batch N × `batch_measured`): "
        "`(1 + N·B/B_noise) / (1 + B/B_noise)`, the examples a loss costs growing with the batch (McCandlish et "
        "al. 2018, E = E_min(1 + B/B_noise); the steps fall as S = S_min(1 + B_noise/B)); empty without a "
        "measured noise scale (the projection across GPUs then bounds it by [1, N])", factory=dict)
    data_parallel_note: str = doc("what `data_parallel_epochs` rests on", "")
    data_parallel_epochs_range: dict[str, list[float]] = doc(
        "{N: [low, high]}: each factor's range from the noise scale's 90% range, `B_noise (1 ± 1.645 × "
        "noise_scale_rel_se)` (the high end N where that range reaches 0); `[1, N]` without a standard error; "
        "the hours across GPUs span it", factory=dict)
    epoch_ms_planned: float | None = doc("the measured mean epoch time × `data_scale`")
    epoch_ms_planned_label: str = doc("`scaled`, or `measured` when the scale is 1")


@dataclass
class ModelEntry(ModelTiming):
    """``models.<name>``: one (model, size). The entry named after the model is the size the decision uses;
    any other size is an entry ``<model>[<size>]`` with ``in_plan: false``, outside the total."""

    runs: int = doc("runs of the model in the sweep, all outcomes", 0)
    outcomes: dict[str, int] = doc("counts of `completed`, `oom`, `diverged`, `failed`, `interrupted`, `stale`, "
                                   "`in_progress` (a run still open while its sweep's parent run is RUNNING)",
                                   factory=dict)
    device: str | None = doc("the device whose runs the statistics use", None, extra=True)
    in_plan: bool = doc("the model is in `decision.plan`", False, extra=True)
    runs_timed: int = doc("completed or interrupted runs on `device` that have per-epoch timings after warmup", 0,
                          extra=True)
    peak_memory_mb: float | None = doc("largest `peak_vram_mb_max` / `peak_host_mb_max` over the timed runs", None)
    memory_kind: str | None = doc("`vram` (GPU memory) or `host` (host RSS: CPU runs never report VRAM)", None)
    projection: ModelProjection | None = doc("the model's hours on the sweep's device; `null` without target "
                                             "epochs or timing", None)
    target_epochs_source: str | None = doc("where the target epochs came from", None, extra=True)
    source: str = doc("`measured`, `profiled` (a workload profile of this size, not trained: hours only on the "
                      "GPUs it is projected onto), `estimate` (`decision.estimates`) or `missing`: where the "
                      "projection comes from", "missing")
    contamination: dict[str, Any] | None = doc(
        "`null` when no measured epoch of the timed runs was flagged `contaminated`; else `epochs_flagged`, "
        "`epochs_measured`, `policy` (`analysis.contaminated`), `used` (the timing includes contaminated epochs), "
        "`runs_using_contaminated`, `load` (mean and max over the flagged epochs of `cpu_other_pct`, "
        "`cpu_steal_pct`, `host_wait_pct`, `gpu_other_processes`), `meaning` and `advice`. A decision resting on "
        "a `used` timing has confidence `low`", None, extra=True)
    precision: str | list[str] | None = doc("the precision the timed runs trained in (`trainer.precision=auto` "
                                            "resolved; a list when runs differ)", None, extra=True)
    fast_paths: dict[str, Any] = doc("`trainer.precision` (as configured), `trainer.compile`, "
                                     "`trainer.optimizer_impl` of the timed runs (a list where runs differ, with a "
                                     "warning)", factory=dict, extra=True)
    estimate_epoch_ms: float | None = doc("the team's epoch time (`decision.estimates`) of an estimated model", None,
                                          omit_none=True, extra=True)
    model: str = doc("the model", "", extra=True)
    size: str | None = doc("its size (`small`, `reference`, `unsized` for runs recorded before sizes existed)", None,
                           extra=True)
    size_reason: str = doc("why the decision row uses that size", "", extra=True)
    stop_reasons: dict[str, int] = doc("how the runs' measurements stopped (`converged`, `budget`, `max_epochs`, "
                                       "or the outcome)", factory=dict, extra=True)
    epoch_time_includes_eval: bool = doc("the epoch time is the training pass plus the validation pass "
                                         "(`epoch_time_ms + eval_time_ms`), as an epoch of the plan costs both",
                                         False, extra=True)
    missing_reason: str | None = doc("why a model is not measured, e.g. `no run in this sweep`, `no run completed "
                                     "(oom: 1)`", None, omit_none=True, extra=True)
    plan: Plan | None = doc("the training plan of a model with runs; `null` for a model without runs", None)


# --------------------------------------------------------------------------------------------------
# the sweep: settings, coverage, runs, decision
# --------------------------------------------------------------------------------------------------


@dataclass
class Settings:
    """``settings``: the analysis settings used."""

    outliers: str = doc("`analysis.outliers`: `iqr`, `mad` or `none`")
    bootstrap_resamples: int = doc("`analysis.bootstrap_resamples`")
    seed: int = doc("`analysis.seed`")
    min_epochs: int = doc("`decision.min_epochs`")
    batches: int = doc("`analysis.batches`: at most this many batch means per run")
    autocorr_max_tau: float = doc("`analysis.autocorr_max_tau`")
    contaminated: str = doc("`analysis.contaminated`: `auto`, `drop` or `use`")


@dataclass
class Coverage:
    """``coverage``: which planned models the report covers."""

    planned: list[str] = doc("`decision.plan`")
    measured: list[str] = doc("planned models with at least one timed run (completed, or interrupted with "
                              "measured epochs)")
    estimated: list[str] = doc("planned models projected from `decision.estimates`", extra=True)
    missing: list[str] = doc("planned models neither measured nor estimated")
    complete: bool = doc("every planned model measured or profiled (estimates do not count)")
    missing_reasons: dict[str, str] = doc("why each missing or estimated model is, with the epochs failed runs "
                                          "measured before they ended", extra=True)
    profiled: list[str] = doc("planned models profiled at the decided size without training (a `kind=size_profile` "
                              "run): projected onto each GPU from their workload profile", factory=list)


@dataclass
class RunRow:
    """``runs[]``: every training run of the sweep, whatever its outcome."""

    run_id: str = doc("MLflow run id")
    run_name: str = doc("MLflow run name")
    model: str = doc("the model")
    device: str = doc("the `device` tag")
    size: str = doc("the model size")
    stop_reason: str | None = doc("why the measurement stopped")
    outcome: str = doc("`completed`, `oom`, `diverged`, `failed`, `interrupted`, `stale`, `in_progress`, "
                       "`invalid`")
    status: str | None = doc("the MLflow status")
    job: str | None = doc("the Hydra job number")
    epochs_measured: int = doc("epochs after warmup")
    used_for_timing: bool = doc("the run's epochs enter the statistics")
    excluded_reason: str | None = doc("why not (an outcome, another device, no timings, or `data size: ...`: a "
                                      "smaller data size of a sweep over sizes, whose curve serves only "
                                      "`plan.data_alpha`)")
    series_source: str | None = doc("where the per-epoch series were read")
    notes: list[str] = doc("notes on the run")


@dataclass
class MeasuredDevice:
    """``decision.measured_device``: what the hours measured on the sweep's device alone give."""

    device: str | None = doc("the sweep's device")
    total_hours: float | None = doc("Σ hours measured there")
    total_hours_conservative: float | None = doc("its conservative total")
    total_hours_range: Interval | None = doc("its range")
    models: list[str] = doc("the models in it")
    recommendation: str = doc("what those hours alone recommend")


@dataclass
class DataParallelAdvice:
    """``decision.data_parallel[]``: a planned model whose hours on one GPU pass `decision.local_max_hours`, and
    whether training it across several GPUs of one instance (data parallelism) is worth it."""

    model: str = doc("the model")
    single_gpu_hours: float | None = doc("its hours on the decision's one GPU (the local row), slow end of the "
                                         "range")
    recommended: bool = doc("an instance across N GPUs is recommended for it")
    instance: str | None = doc("the recommended instance (its cheapest row across N GPUs that brings the model "
                               "under `local_max_hours`, else under `cloud_min_hours`, else its fastest); `null` "
                               "when none is")
    gpu: str | None = doc("its GPU entry", None)
    data_parallel: int | None = doc("the GPUs the model trains across", None)
    global_batch: int | None = doc("the batch over those GPUs", None)
    hours: float | None = doc("the model's hours across them", None)
    hours_range: Interval | None = doc("their range", None)
    usd: float | None = doc("the whole instance's price × the model's hours", None)
    why: str = doc("why: the hours one GPU and N take, the all-reduce, the epochs at the global batch; or why not "
                   "(`cannot be split across GPUs: ...`, no board with a published bus bandwidth, not faster)", "")


@dataclass(kw_only=True)
class Decision:
    """``decision``: local GPU or cloud, what it rests on, and how sure it is."""

    headline: str = doc("what the answer rests on, in one line read first: the sizes of the models in the total "
                        "and where each figure comes from (measured, measured at a size of the same config, "
                        "profiled without training, estimated; a size the team does not train is named as such), "
                        "then the epochs and where they come from (the curves, yours, or the configured "
                        "`model.target_epochs` nobody confirmed)", "")
    thresholds_hours: dict[str, float] = doc("`local_max` (24), `cloud_min` (48)")
    buffer: float = doc("`decision.buffer` (0.5)")
    measured_device: MeasuredDevice = doc("what the hours measured on the sweep's device alone give")
    local_instance: LocalInstance = doc(
        "the local row: `instance` (`local`), `gpu` (the entry, or the device), `gpu_name`, `local_kind` (`gpu "
        "entry`, `measured device`, `unknown`), `local_why`, `hours`, `hours_range`, `hours_conservative`, "
        "`models`, `missing`, `fits_all`, `does_not_fit`, `methods`, `basis`")
    recommendation: str = doc("`local_gpu` (conservative total < `local_max`), `user_choice` (between), `cloud` (> "
                              "`cloud_min`), or `insufficient_data` when no planned model has a usable timing", Recommendation.INSUFFICIENT_DATA)
    total_hours: float | None = doc("the local instance's wall hours (`instances[local].wall_hours`; on the "
                                    "fallback: Σ hours measured on `device`)", None)
    total_hours_conservative: float | None = doc("slow end of the range × (1 + `buffer`) "
                                                 "(`instances[local].wall_hours_conservative`); a model whose "
                                                 "interval is unresolved counts its central hours "
                                                 "(`conservative_unbounded`)", None)
    total_hours_range: Interval | None = doc("its range (`wall_hours_range`; on the fallback: Σ of the "
                                             "`hours_ci95` bounds)", None)
    models_in_total: list[str] = doc("the models summed into the total (the local row's models)", extra=True, factory=list)
    basis: str | None = doc("what the recommendation rests on: `measured on <card>`, `scaled from <gpu>`, `projected "
                            "(roofline from cpu profile)`, `estimated (decision.estimates)`; models on different "
                            "bases: each phrase `for <models>`, joined by `; `; on the fallback `measured on "
                            "<device>, not the local <card>: <why>`", None)
    basis_kind: str | None = doc("the weakest basis of the total: `measured` > `scaled` > `estimate` > `projected`; "
                                 "`other device` on the fallback", None)
    on_local: bool = doc("the decision rests on the local instance (false: the fallback)", False)
    hours_median: float | None = doc("the total hours as a distribution (Monte Carlo, analysis/plan/montecarlo.py): "
                                     "its median, on `hours_basis`", None)
    hours_interval90: Interval | None = doc("its 5–95% interval", None)
    p_within_24h: float | None = doc("P(total < `decision.local_max_hours`)", None)
    p_over_48h: float | None = doc("P(total > `decision.cloud_min_hours`)", None)
    probability_thresholds_hours: list[float] = doc("the two thresholds of those probabilities", extra=True, factory=list)
    uncertainty_drivers: dict[str, Any] = doc("`dominant`: the source whose variation alone moves the log total "
                                              "most (`epoch time`, `projection`, `epochs`, `data scaling`, "
                                              "`batch`, `epochs' data exponent (alpha)`), `shares`: each source's "
                                              "share of those variances", factory=dict)
    distribution_models: list[str] = doc("the models in the distribution", extra=True, factory=list)
    distribution_left_out: list[str] = doc("models of the total without a distribution (an unresolved interval, "
                                           "no epochs)", extra=True, factory=list)
    recommendation_probabilistic: str = doc(
        "what the probabilities say: `local_gpu` when `p_within_24h` ≥ `decision.p_local` (0.9), else `cloud` when "
        "`p_over_48h` ≥ `decision.p_cloud` (0.5), else `user_choice`; `insufficient_data` when a model of the "
        "total has no distribution. With `decision.recommend_by=probability` (the default) it is the "
        "`recommendation`", Recommendation.INSUFFICIENT_DATA)
    probability_levels: dict[str, float] = doc("`p_local`, `p_cloud`", extra=True, factory=dict)
    hours_basis: str = doc("the `basis` the distribution is computed on; where the local row is scaled or "
                           "projected, the measured epoch-time interval and the projection's `epoch_ms_range` are "
                           "separate factors", "")
    confidence: str = doc("`high`, `medium` or `low`: computed after the basis is chosen, by the rules below", Confidence.LOW)
    confidence_reasons: list[str] = doc("everything that lowers it, most severe first", factory=list)
    rationale: str = doc("the decision in plain language (its costs from the instances table)", "")
    recommendation_conservative: str | None = doc("the conservative rule's answer where the probabilities' "
                                                  "recommendation differs", None, omit_none=True)
    conservative_unbounded: list[str] = doc("models whose interval of the mean is unresolved: the conservative "
                                            "total counts their central hours, it cannot bound them",
                                            factory=list)
    data_parallel: list[DataParallelAdvice] = doc("every planned model whose hours on one GPU pass "
                                                  "`local_max_hours`: whether to train it across several GPUs, "
                                                  "and why (a model that cannot be split says so)", factory=list)
    probabilities_withheld: str | None = doc("why `p_within_24h` and `p_over_48h` are null although the hours have "
                                             "a distribution: the total rests on a size the team does not train "
                                             "(no spread describes that)", None, omit_none=True)
    confidence_reason_kinds: list[ConfidenceReason] = doc("the same reasons as data, in the same order: each "
                                                          "one's kind, models and words", factory=list)


@dataclass
class HostFloor:
    """``projections[].host_floor``: the local card against the CPU the sweep ran on (analysis/projection/host_floor.py):
    its epoch floored by this host's dispatch of every op plus the GPU's launch, and the speed-up over the CPU."""

    cpu_epoch_ms: float = doc("the model's epoch measured on this CPU")
    ops: float = doc("eager ops per epoch (the workload profile's `host.ops`)")
    dispatch_us_per_op: float = doc("this host's dispatch cost per op: the least CPU time per op among the other "
                                    "models measured here (an upper bound: that model's CPU arithmetic included)")
    dispatch_from: str = doc("the model and figures it comes from")
    launch_us: list[float] = doc("the GPU's own launch per kernel, µs [low, nominal, high] (public figures)")
    floor_ms: float = doc("ops × (dispatch + launch): no launch-bound epoch on the card is shorter")
    floor_ms_range: Interval = doc("at the launch's low and high")
    gpu_epoch_ms: float = doc("the card's projected epoch, the larger of the kernel model's and the floor")
    gpu_epoch_ms_range: Interval = doc("its range, floored at each end")
    speedup: float = doc("CPU epoch / the card's: above 1 the card is faster")
    speedup_range: Interval = doc("its range")
    gpu_faster: bool | None = doc("true: faster over the whole range; false: not faster even at its fast end; "
                                  "null: the range spans 1")


@dataclass
class ProjectionRow:
    """``projections[]``: one (instance, planned model): its epoch time and hours on that instance's GPU."""

    instance: str = doc("catalogue instance name, `local`, or a `project=` GPU entry")
    gpu: str = doc("the `conf/hardware` entry (`t4`, `a100_40gb`, ...)")
    gpus: int = doc("GPUs in the instance")
    model: str = doc("the planned model")
    epoch_ms: float | None = doc("projected (or measured) epoch time; `null`: not projectable (see `method`)")
    epoch_ms_range: Interval | None = doc(
        "the range (docs/projection.md): for a projection, the calibration's held-out error percentiles "
        "propagated (wider where there is no calibration data); for `measured`, the mean's 95% interval")
    hours: float | None = doc("× the model's target epochs (and its plan's work scale)")
    hours_range: Interval | None = doc("the range × the epochs' range")
    target_epochs: int | None = doc("the epochs counted", extra=True)
    method: str | None = doc("`measured`, `decision.catalogue relative_speed`, `scaled from <gpu>`, `roofline from "
                             "cpu profile` (`roofline from <device> profile`), `cannot run`, or `not projected: ...`")
    fits: bool | None = doc("the model's memory need at its batch size ≤ the GPU's memory; `null`: unknown")
    memory_need_mb: float | None = doc("the need", extra=True)
    precision: str | None = doc(
        "what the entry projects: `projection.precision` (default `auto`: what `trainer.precision=auto` and "
        "`trainer.tf32=true` resolve on that GPU: bf16 on capability ≥ 8.0, fp16 on 7.x), substituted where the "
        "GPU lacks it (bf16 on a V100 → fp16, tf32 on a T4 → fp32); for `measured` entries the run's precision")
    range_basis: str | None = doc("what the range rests on: the calibration's held-out percentiles and GPU, or "
                                  "`both GPUs' calibration in quadrature: ...` for `scaled from <gpu>`")
    notes: list[str] = doc("what was converted (`matmul_attention fp32->bf16`), what was substituted, the "
                           "calibration GPU and how it relates, the old coarse profile when the runs have no "
                           "`workload_profile.json`, and the device/host/sync split", extra=True)
    gpu_name: str | None = doc("the name the GPU reports", None, omit_none=True, extra=True)
    memory_source: str | None = doc("where the memory need comes from", None, omit_none=True, extra=True)
    fits_with: dict[str, Any] | None = doc(
        "where `fits` is false: `micro_batch` (the largest micro-batch predicted to fit; 0: not even the fixed part "
        "fits), `grad_accum` (the accumulation that keeps the optimiser batch `batch`), `fixed_mb` and "
        "`per_sample_mb` (the predicted peak split into a fixed part and activations taken as linear in the "
        "micro-batch): an estimate; the epoch time at that micro-batch is not projected", None, omit_none=True,
        extra=True)
    data_parallel: int = doc("GPUs the model trains across (torch DDP, at the runs' per-GPU batch); 1: one GPU",
                             1)
    comm_ms: float | None = doc("the all-reduce time of an epoch the backward pass does not hide (summed over a "
                                "rank's steps; the runs' metric `comm_exposed_ms`), inside `epoch_ms`: 0 on one "
                                "GPU; projected from ring all-reduce (2(N-1)/N × gradient bytes at the board's "
                                "bus bandwidth) and DDP's buckets, or measured", None)
    comm_ms_range: Interval | None = doc("its range (the bus bandwidths' published range, the backward's share "
                                         "of a step)", None, extra=True)
    global_batch: int | None = doc("the batch of one optimiser step over all the GPUs: per-GPU batch × "
                                   "`data_parallel`", None)
    host_floor: HostFloor | None = doc("local card rows of a CPU sweep: the card's epoch floored by this host and "
                                       "whether it beats the CPU (already applied to `epoch_ms` and `hours`)", None,
                                       omit_none=True)


# --------------------------------------------------------------------------------------------------
# THE instances table, the costs (a view of it), the local instance, the devices, the projection's assumptions
# --------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Instance:
    """``instances[]``: one row of THE instances table (see the prose above)."""

    instance: str = doc("the instance: `local`, a catalogue or offer instance, or a `project=` GPU entry")
    gpu: str | None = doc("its GPU entry (the local row: the card `hardware=` names, or the sweep's device)")
    gpu_name: str | None = doc("the name the GPU reports", None)
    gpus: int = doc("GPUs in the instance")
    usd_per_hour: float | None = doc("its hourly price (`local`: electricity; `null` for `project=` entries)")
    price_date: str | None = doc("where and when the price was read")
    price_source: str = doc("`decision.catalogue` (a priced row), the local electricity, or `project= (no price)`")
    models: list[str] = doc("the planned models projected onto it")
    missing: list[str] = doc("the planned models not projected onto it")
    complete: bool = doc("every planned model projected")
    hours_serial: float | None = doc("Σ hours, one model after another")
    hours_serial_range: Interval | None = doc("its range")
    wall_hours: float | None = doc("wall hours, one model per GPU (per group of `data_parallel` GPUs) in parallel")
    wall_hours_range: Interval | None = doc("their range")
    gpus_used: int = doc("GPUs that get a model")
    usd: float | None = doc("wall hours × the whole instance's hourly price")
    usd_range: Interval | None = doc("its range")
    wall_hours_conservative: float | None = doc("the slow end × (1 + `decision.buffer`) (× (1 + "
                                                "`restart_allowance`) on a spot row)")
    usd_conservative: float | None = doc("its cost")
    basis: str | None = doc("the weakest basis of its models: `measured`, `scaled`, `estimate`, `projected`")
    model_basis: dict[str, str] = doc("{model: basis}")
    fits_all: bool | None = doc("`false` when a model does not fit, `true` when all are known to fit, else `null`")
    does_not_fit: list[str] = doc("the models predicted not to fit")
    methods: list[str] = doc("the projection methods of its models")
    data_parallel: int = doc("GPUs each model trains across (1: one model per GPU)", 1)
    global_batch: dict[str, int | None] = doc("{model: the batch of one optimiser step over its GPUs}",
                                              factory=dict)
    within: dict[str, bool] = doc("`within_<h>h` per threshold: complete and the slow end of the wall-time range "
                                  "within it (written as keys of the row)", factory=dict, flatten="within_")
    local_kind: str | None = doc("the local row: `gpu entry`, `measured device` or `unknown`", None,
                                 omit_none=True)
    local_why: str | None = doc("the local row: why that kind", None, omit_none=True)
    cloud: str | None = doc("an offer's cloud", None, omit_none=True)
    region: str | None = doc("an offer's region (of its on-demand price)", None, omit_none=True)
    spot_usd_per_hour: float | None = doc("an offer's cheapest spot price", None, omit_none=True)
    spot_region: str | None = doc("its region", None, omit_none=True)
    gpu_note: str | None = doc("an offer whose GPU variant the catalogue could not tell", None, omit_none=True)
    spot: bool | None = doc("a spot row", None, omit_none=True)
    restart_allowance: float | None = doc("a spot row's allowance for interruptions", None, omit_none=True)
    split: list[str] | None = doc("a row across N GPUs: the models trained across them", None, omit_none=True)
    not_split: dict[str, str] | None = doc("a row across N GPUs: {model: why not split}", None, omit_none=True)


@dataclass(kw_only=True)
class LocalCost:
    """``costs.local``: the local row, priced by electricity (see the prose above)."""

    instance: str = doc("`local`")
    gpu: str | None = doc("the local card or device")
    basis: str | None = doc("the row's basis")
    models: list[str] = doc("its models")
    missing: list[str] = doc("the planned models without hours on it")
    hours: float | None = doc("its wall hours")
    hours_range: Interval | None = doc("their range")
    hours_conservative: float | None = doc("their conservative figure")
    power_w: float | None = doc("the board power")
    power_source: str = doc("where the power comes from")
    price_per_kwh: float = doc("`hardware.price_per_kwh`")
    usd: float | None = doc("hours × power_w / 1000 × price")
    usd_range: Interval | None = doc("its range")
    usd_conservative: float | None = doc("its conservative figure")
    why_unpriced: str | None = doc("why `usd` is `null`")


@dataclass(kw_only=True)
class CloudCost:
    """``costs.cloud[]``: one priced instance, from its row (see the prose above)."""

    instance: str = doc("the instance")
    gpu: str | None = doc("its GPU entry")
    gpus: int = doc("its GPUs")
    gpus_used: int = doc("the GPUs that get a model")
    usd_per_hour: float | None = doc("its hourly price")
    price_date: str | None = doc("the price's source and date")
    basis: str | None = doc("the row's basis")
    methods: list[str] = doc("its methods")
    complete: bool = doc("every planned model projected")
    missing: list[str] = doc("the models not projected")
    fits_all: bool | None = doc("the row's `fits_all`")
    hours: float | None = doc("the row's `wall_hours`")
    hours_serial: float | None = doc("the row's `hours_serial`")
    hours_range: Interval | None = doc("the row's `wall_hours_range`")
    usd: float | None = doc("the row's `usd`")
    usd_range: Interval | None = doc("its range")
    hours_conservative: float | None = doc("the row's `wall_hours_conservative`")
    usd_conservative: float | None = doc("the row's `usd_conservative`")
    relative_speed: float | None = doc("Σ hours measured on the sweep's device / `hours_serial` (informative)",
                                       extra=True)
    relative_speed_source: str = doc("what it rests on", extra=True)
    data_parallel: int = doc("the row's `data_parallel`")
    global_batch: dict[str, int | None] = doc("the row's `global_batch`")


@dataclass
class Costs:
    """``costs``: a view of the instances table, one cost per instance."""

    local: LocalCost = doc("the local row, priced by electricity")
    cloud: list[CloudCost] = doc("one per priced instance")


@dataclass(kw_only=True)
class LocalInstance:
    """``decision.local_instance``: the local row the decision rests on."""

    gpu: str | None = doc("the local card's entry, or the device")
    gpu_name: str | None = doc("the name the GPU reports")
    local_kind: str | None = doc("`gpu entry`, `measured device` or `unknown`")
    local_why: str | None = doc("why that kind")
    models: list[str] = doc("the models with hours on it")
    missing: list[str] = doc("the planned models without")
    fits_all: bool | None = doc("the row's `fits_all`")
    does_not_fit: list[str] = doc("the models predicted not to fit")
    methods: list[str] = doc("the methods of its models")
    basis: str | None = doc("the row's basis")
    instance: str = doc("`local`", LOCAL)
    hours: float | None = doc("its wall hours")
    hours_range: Interval | None = doc("their range")
    hours_conservative: float | None = doc("their conservative figure")


@dataclass
class DeviceComparison:
    """``devices.comparisons[]``: one model timed on two devices of the experiment."""

    model: str = doc("the model (`<model>[<size>]` for another size)")
    reference_device: str = doc("the report's device")
    device: str = doc("the other device")
    reference_epoch_ms: float = doc("the median epoch time on the reference device")
    epoch_ms: float = doc("the median epoch time on the other device")
    reference_runs: int = doc("runs on the reference device")
    runs: int = doc("runs on the other device")
    speedup: float = doc("`reference_epoch_ms / epoch_ms`")


@dataclass
class DeviceRun:
    """``devices.runs[]``: a run a comparison read."""

    run_id: str = doc("the run")
    sweep_id: str | None = doc("its sweep")
    model: str = doc("its model row")
    device: str = doc("its device")
    epoch_ms: float = doc("its median epoch time")


@dataclass
class Devices:
    """``devices``: measured speed ratios between devices."""

    reference: str | None = doc("the report's device")
    comparisons: list[DeviceComparison] = doc("one per (model, other device)")
    runs: list[DeviceRun] = doc("every run the comparisons read")


@dataclass
class ProjectionAssumptions:
    """``projection_assumptions``: the kernel model's stated constants and its calibration (docs/projection.md)."""

    model: str = doc("the kernel model in words")
    launch_us: list[float] = doc("the kernel launch time [low, central, high] (µs)")
    sync_us: list[float] = doc("a host sync [low, central, high] (µs)")
    min_kernel_ms: list[float] = doc("the minimum kernel time [low, central, high] (ms)")
    chain_step: dict[str, Any] = doc("per pass: the fitted per-step floor per cell, bandwidth and peak fractions of "
                                     "a recurrent chain's step")
    calibration: dict[str, Any] = doc("source repository, commit, date, range percentiles, the tensor-core rule and "
                                      "its sources, the chains' source, each catalogue entry's calibration GPU and "
                                      "relation, per tensor dtype where one differs")
    precision_asked: str = doc("`projection.precision`")
    cuda_context_mb: float = doc("the CUDA context added to a memory need")
    measured_device_gpu: str | None = doc("the catalogued GPU the sweep was measured on, if any")


@dataclass
class Cheapest:
    """``cheapest[]``: per threshold, the cheapest catalogue instance that projects every planned model, has none
    known not to fit, and finishes within the threshold at the slow end of its range."""

    within_hours: float = doc("the threshold (`decision.local_max_hours`, `decision.cloud_min_hours`)")
    instance: str | None = doc("the instance; `null` when none does")
    gpu: str | None = doc("its GPU entry")
    usd: float | None = doc("its cost")
    wall_hours: float | None = doc("its wall hours")
    wall_hours_range: Interval | None = doc("their range")
    why_none: str | None = doc("why no instance does")
    data_parallel: int | None = doc("its row's GPUs per model (1: one model per GPU; N: each model across N)",
                                    None)


@dataclass
class OffersSummary:
    """``offers``: where the cloud prices come from (``decision.offers``, analysis/decision/offers.py) and what
    of that catalogue the decision considered."""

    source: str = doc("`packaged` (the extract shipped in the package, conf/offers/), `skypilot` (the newest "
                      "~/.sky/catalogs/<version>/) or the folder or file given")
    described: str = doc("the catalogue: SkyPilot's public catalogue and its commit per cloud, or the files read")
    read: str | None = doc("the date the catalogue was read (the packaged extract's), or its files' date")
    offers: int = doc("offers read: one per (cloud, instance type), at its cheapest region, after the screens")
    considered: int = doc("priced instances the decision projected: of each (cloud, GPU entry, GPU count in "
                          "`gpu_counts`) the cheapest instance type, and with `spot` its spot row")
    gpu_counts: list[int] = doc("`decision.gpu_counts`")
    other_gpu_counts: int = doc("offers with a GPU entry left out for their GPU count")
    not_projected: int = doc("offers whose GPU has no `conf/hardware` entry: listed, not projected")
    not_projected_gpus: list[str] = doc("their accelerators and GPU counts (`A6000 x2`), with how many offers")
    screened: dict[str, int] = doc("catalogue rows left out, by reason (`price`, `placeholder`, `spot_above`, "
                                   "`count`, `tpu`, `no_host`; `spot_tenth`: a spot price dropped, its row kept)")
    screened_line: str = doc("the one line that counts them")
    spot: bool = doc("`decision.spot`: offers with a spot price also priced at it, as their own rows "
                     "(`<cloud>:<instance> (spot)`)")
    restart_allowance: float = doc("`decision.spot_restart_allowance`: a spot row's conservative hours and cost "
                                   "grow by this fraction (interruptions)")
    identity_notes: list[str] = doc("offers whose GPU the catalogue could not tell (PCIe or SXM): the slower entry "
                                    "assumed")
    quoted: list[str] = doc("instances of `decision.catalogue` (prices you were quoted, with the `price_date` "
                            "you gave), priced beside the offers")
    commits: dict[str, str] = doc("the catalogue's commit per cloud, where known", factory=dict)


@dataclass
class Report:
    """report.json: the sweep analysis."""

    schema_version: int = doc(f"`{SCHEMA_VERSION}` (see [Changes](#changes))")
    sweep_id: str = doc("the analysed sweep (`all` for `sweep=all`)")
    generated_at: str = doc("ISO 8601 UTC time of the analysis", extra=True)
    tracking_uri: str = doc("where the runs were read", extra=True)
    experiment: str = doc("the MLflow experiment", extra=True)
    device: str | None = doc("the `device` tag whose runs the statistics use: `analysis.device`, else the device "
                             "with the most completed runs", extra=True)
    partial: bool = doc("true when the report does not cover the whole plan (a planned model missing or only "
                        "estimated, or no usable timing at all)", extra=True)
    partial_reasons: list[str] = doc("why it is partial", extra=True)
    settings: Settings = doc("the analysis settings used", extra=True)
    coverage: Coverage = doc("which planned models the report covers")
    models: dict[str, ModelEntry] = doc("every planned model and every model that has runs")
    runs: list[RunRow] = doc("every training run of the sweep, whatever its outcome", extra=True)
    devices: Devices = doc("measured speed ratios between devices: `reference`, `comparisons`, `runs`",
                           extra=True)
    decision: Decision = doc("local GPU or cloud")
    costs: Costs = doc("one cost per instance, a view of `instances` (see below)")
    projections: list[ProjectionRow] = doc("one per (instance, planned model): projected epoch time per GPU "
                                           "(one model per GPU: `data_parallel` 1)")
    instances: list[Instance] = doc("one per instance: wall time, cost, fit")
    cheapest: list[Cheapest] = doc("the cheapest instance within each threshold")
    projection_assumptions: ProjectionAssumptions = doc(
        "the kernel model's stated constants (`launch_us`, `sync_us`, `min_kernel_ms`), `chain_step` (per pass: the "
        "fitted per-step floor per cell, bandwidth and peak fractions of a recurrent chain's step), "
        "`calibration` (source repository, commit, date, range percentiles, the tensor-core rule and its sources, "
        "the chains' source, each catalogue entry's calibration GPU and relation, per tensor dtype where one differs), `precision_asked`, `cuda_context_mb`, and the catalogued GPU the "
        "sweep was measured on, if any (docs/projection.md)", extra=True)
    projections_data_parallel: list[ProjectionRow] = doc(
        "one per (instance, planned model, N): the model trained across N GPUs of the instance (N = 2, 4, 8 up to a "
        "catalogue instance's GPUs; `projection.data_parallel=N` on a `project=` GPU); docs/projection.md, "
        "data parallelism", factory=list)
    plots: list[str] | None = doc("PNG files written next to the report", None, omit_none=True, extra=True)
    offers: OffersSummary | None = doc("where the cloud prices come from and what was left out of them; `null` with "
                                       "`decision.offers=none`", None)
    mlflow_run_id: str | None = doc("the analysis run logged to MLflow (in what `run_analysis` returns; report.json "
                                    "is written before it exists)", None, omit_none=True, extra=True)


