"""What the statistics give of one model's timed runs, as types: the epoch time and its intervals, the
autocorrelation, the stability, each run; a doc for every field (report.json's ``models.<name>``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainbench.analysis.fields import Interval, doc


@dataclass
class Bootstrap:
    """How ``ci95_median`` and ``ci95_p95`` were computed (analysis/statistics/block_bootstrap.py)."""

    method: str = doc("the procedure in words: `two-stage bootstrap (runs drawn with replacement, then circular "
                      "blocks within each), expanded percentile`, or the circular block bootstrap of one run")
    two_stage: bool = doc("runs were drawn with replacement before the blocks within each (two or more runs)")
    runs: int = doc("runs resampled")
    block_lengths: list[int] = doc("block length per run (Politis & White's rule, at most a tenth of the run)")
    blocks: int = doc("blocks in one resample: the sample size of the expanded percentile interval")
    resamples: int = doc("bootstrap resamples (`analysis.bootstrap_resamples`)")
    epochs: int = doc("epochs resampled")
    tail_probability: float | None = doc("the tail probability of the expanded percentile interval")


@dataclass
class EpochTime:
    """``epoch_time_ms``: the one centre of a model's epoch time, its intervals, and the typical epoch time."""

    mean: float | None = doc("**the one centre**: what the hours use and what `ci95_mean` is centred on (the "
                             "random-effects mean of the run means, or the run's mean with one run; every "
                             "counted epoch, outliers included; Methods)")
    std: float | None = doc("sd of the typical epochs (ddof=1, outliers excluded)")
    cv: float | None = doc("std / mean of the typical epochs")
    min: float | None = doc("fastest typical epoch")
    max: float | None = doc("slowest typical epoch")
    p50: float | None = doc("median of the typical epochs")
    p95: float | None = doc("95th percentile of the typical epochs")
    p99: float | None = doc("99th percentile of the typical epochs")
    mean_typical: float | None = doc("mean of the typical epochs (outliers excluded)", extra=True)
    mean_pooled: float | None = doc("the plain mean of all counted epochs (for comparison)", extra=True)
    ci95_mean: Interval | None = doc("95% interval of `mean` (`[low, high]`); `null` when there is none or it is "
                                     "unresolved (`ci95_mean_resolved`)")
    ci95_mean_basis: str | None = doc("`runs` (two or more timed runs: across-run interval) or `batch_means` "
                                      "(one run)")
    ci95_mean_method: str | None = doc("`random_effects`, `batch_means` or `t_over_runs`", extra=True)
    ci95_mean_why: str | None = doc("which interval is the headline and why, in words")
    ci95_mean_resolved: bool = doc(
        "false when the data cannot resolve the interval (see Methods, *Unresolved intervals*): its upper bound "
        "is more than `UNRESOLVED_RATIO` (10) times its lower bound. Such an interval is shown as unresolved, "
        "never as bounds, and the conservative total does not use it: `ci95_mean` is then `null` and the bounds "
        "the data gave are `centre.unresolved_bounds`", True)
    ci95_mean_unresolved: str | None = doc("why the interval is unresolved and what to run to resolve it; "
                                           "`null` when resolved", None)
    ci95_mean_epochs: Interval | None = doc("the t-interval over pooled counted epochs, which assumes "
                                            "independent epochs (for comparison only)", None)
    ci95_mean_typical: Interval | None = doc("95% interval of `mean_typical`", None, extra=True)
    centre: dict[str, Any] = doc(
        "how the centre was computed: `estimator`, `runs`, `epochs`, `outliers_included`, and per method "
        "`weights` (per run), `tau2_dl` and `between_run_sd_ms` (DerSimonian-Laird between-run variance and the "
        "posterior median between-run sd), `prior_scale`, `i2`, `q`, `q_pvalue`, `runs_with_short_batches` "
        "(runs too short for two batches of ≥ 5 τ), or `batches`, `batch_epochs`, `tau_int`, "
        "`batches_long_enough`", extra=True, factory=dict)
    ci95_median: Interval | None = doc("95% interval of the median of the typical epochs (bootstrap)", None)
    ci95_p95: Interval | None = doc("95% interval of the p95 of the typical epochs (bootstrap)", None)
    bootstrap: Bootstrap | None = doc("how the median and p95 intervals were computed", None, extra=True)


@dataclass
class Autocorrelation:
    """``autocorrelation``: epoch-time autocorrelation of a model's timed runs."""

    lag1_max: float | None = doc("the largest lag-one autocorrelation over runs")
    tau_int_max: float | None = doc("the largest integrated autocorrelation time τ (epochs) over runs")
    ess_total: float | None = doc("Σ effective sample sizes (epochs / τ)")
    threshold_tau_int: float = doc("`analysis.autocorr_max_tau`")
    high_in_runs: list[str] = doc("runs whose τ is above it")
    recommend_more_seeds: bool = doc("a run is above it and fewer than 3 runs are timed; or one run too short "
                                     "for two batches of ≥ 5 τ; or two runs that differ beyond their own noise "
                                     "(heterogeneity p < 0.10)")


@dataclass
class Stability:
    """``stability``: training stability of a model's timed runs."""

    loss_trend: str = doc("`converging`, `flat`, `diverging`, `non_finite`, `unknown`: the worst run's; the same "
                          "definition and words as the run's `loss_trend` tag (Methods)", "unknown")
    loss_start: float | None = doc("median over runs of the loss at the start of the measured epochs", None)
    loss_end: float | None = doc("median over runs of the loss at the end", None)
    gradient_health: str = doc("`healthy`, `vanishing`, `exploding`, `non_finite`, `unknown`: the worst run's; the "
                               "same definition and words as the run's `gradient_health` tag (Methods)", "unknown")
    warnings: list[str] = doc("every stability and timing warning, in words", factory=list)
    warning_kinds: list[str] = doc("the kind of each warning, in order (`noisy`, `drift`, `loss`, `gradients`, "
                                   "`few_epochs`, `contaminated`, `nonfinite_times`, `autocorrelated`, `disagree`, "
                                   "`more_seeds`, `pooled`): what lowers confidence is listed once per kind",
                                   factory=list, extra=True)

    def add(self, kind: str, text: str) -> None:
        """One more warning of ``kind``."""
        self.warnings.append(text)
        self.warning_kinds.append(kind)


@dataclass
class Drift:
    """A run's epoch-time drift test."""

    rho: float | None = doc("Spearman's ρ of epoch time against epoch index")
    p: float | None = doc("its p-value")
    change: float | None = doc("median of the last third / median of the first third - 1")
    drifting: bool = doc("p < `analysis.drift_pvalue` and |change| ≥ `analysis.drift_min_change`")


@dataclass
class RunAutocorrelation:
    """A run's epoch-time autocorrelation."""

    lag1: float | None = doc("lag-one autocorrelation")
    tau_int: float | None = doc("integrated autocorrelation time (Sokal's window)")
    ess: float | None = doc("effective sample size: epochs / τ")
    window: int | None = doc("the window M of the sum")


@dataclass
class PerRun:
    """``per_run[]``: one timed run of a model."""

    run_id: str = doc("MLflow run id")
    run_name: str = doc("MLflow run name")
    outcome: str | None = doc("the run's outcome")
    epochs_measured: int = doc("epochs after warmup")
    outliers_removed: int = doc("epochs left out of the typical statistics (outliers, non-finite, contaminated)")
    mean_ms: float | None = doc("mean of all counted epochs")
    ci95_mean_ms: Interval | None = doc("batch-means 95% interval of `mean_ms`")
    epochs_in_mean: int = doc("counted epochs")
    outliers: int = doc("outliers by the outlier rule")
    mean_typical_ms: float | None = doc("mean with outliers excluded")
    iqr_over_median: float | None = doc("IQR / median of the counted epochs")
    drift: Drift = doc("the drift test")
    autocorrelation: RunAutocorrelation = doc("the run's autocorrelation")
    loss_trend: str = doc("the run's loss trend")
    gradient_health: str = doc("the run's gradient health")
    series_source: str | None = doc("where the per-epoch series were read (epochs.json or the metric history)")
    partial: bool = doc("an interrupted run whose measured epochs are used")
    contaminated_epochs: int = doc("measured epochs flagged contaminated")
    contaminated_used: bool = doc("they are used (too few clean ones under `auto`, or `use`)")


@dataclass
class ModelTiming:
    """What the statistics give of one model's timed runs (analysis/statistics/stats.py). The defaults are a
    model without timed runs."""

    epochs_measured: int = doc("epochs after warmup in the timed runs", 0)
    outliers_removed: int = doc(
        "epochs left out of the *typical* epoch-time statistics: outliers by the outlier rule, non-finite times "
        "and epochs the harness flagged `contaminated` (a busy machine). Outliers stay in the mean behind the "
        "hours (Methods)", 0)
    samples_used: int = doc("epochs behind the typical epoch-time statistics = `epochs_measured - "
                            "outliers_removed`", 0)
    epochs_in_mean: int = doc("epochs behind `epoch_time_ms.mean` and the hours: every finite, non-warmup, "
                              "non-contaminated epoch, outliers included", 0, extra=True)
    epoch_time_ms: EpochTime | None = doc("the epoch time (see `models.<name>.epoch_time_ms`); `null` without "
                                          "timed runs", None)
    autocorrelation: Autocorrelation | None = doc("epoch-time autocorrelation of the timed runs", None)
    runs_disagree: bool = doc("two runs' 95% intervals of the mean (`per_run[].ci95_mean_ms`) do not overlap and "
                              "their means differ by at least `analysis.disagree_min_change`; a warning says which",
                              False)
    stability: Stability = doc("training stability", factory=Stability)
    per_run: list[PerRun] = doc("each timed run", factory=list, extra=True)


