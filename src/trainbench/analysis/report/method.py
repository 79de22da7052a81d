"""report.md's Method paragraph, sentence by sentence from what each estimator recorded that it did (the
typed report): changing an estimator changes its sentence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainbench.analysis.report_types import Basis, Recommendation, Report, Source
from trainbench.analysis.statistics.stats import CENTRE_METHODS, OUTLIER_RULES, UNRESOLVED_RATIO

#: ``analysis.contaminated`` in words (trainbench.core.contamination_policy).
CONTAMINATED_POLICIES = {
    "auto": "dropped when a run has at least three clean epochs, else used and labelled (low confidence)",
    "drop": "always dropped",
    "use": "always used, labelled",
}


def _by(report: Report, key: Callable[[Any], Any]) -> dict[Any, list[str]]:
    """{value of ``key`` on a measured model: the models}, in report order."""
    out: dict[Any, list[str]] = {}
    for name, m in report.models.items():
        if m.source == Source.MEASURED and m.epoch_time_ms is not None:
            v = key(m)
            if v is not None:
                out.setdefault(v, []).append(name)
    return out


def _models(names: list[str]) -> str:
    return ", ".join(names)


def outliers_sentence(report: Report) -> str:
    s = report.settings
    marked = sum(p.outliers for m in report.models.values() for p in m.per_run)
    return (f"Warmup epochs dropped; outliers marked per run by {OUTLIER_RULES.get(s.outliers, s.outliers)} "
            f"({marked} epoch(s) marked): left out of the typical epoch time (std, percentiles), kept in the mean "
            "behind the hours, since training pays for them.")


def contamination_sentence(report: Report) -> str:
    s = report.settings.contaminated
    used = [n for n, m in report.models.items() if (m.contamination or {}).get("used")]
    return (f"Epochs flagged contaminated (a busy machine): analysis.contaminated={s}, "
            f"{CONTAMINATED_POLICIES.get(s, s)}" + (f"; used for {_models(used)}." if used else "."))


def interval_sentences(report: Report) -> list[str]:
    """One sentence per estimator of the centre that the models used, and one for unresolved intervals."""
    out = [f"Headline interval of the mean, {CENTRE_METHODS.get(method, method)}: {_models(names)}."
           for method, names in _by(report, lambda m: m.epoch_time_ms.ci95_mean_method).items()]
    if out:
        out[-1] += " Intervals of the mean are built on the log scale, so they stay positive."
    unresolved = _by(report, lambda m: None if m.epoch_time_ms.ci95_mean_resolved else True).get(True)
    if unresolved:
        out.append(f"Unresolved (upper bound more than {UNRESOLVED_RATIO:g} times the lower): {_models(unresolved)}; "
                   "shown without bounds, and the conservative total counts their central hours.")
    return out


def bootstrap_sentences(report: Report) -> list[str]:
    s = report.settings
    return [f"Median and p95 intervals: {method} ({s.bootstrap_resamples} resamples, seed {s.seed}): "
            f"{_models(names)}."
            for method, names in _by(report, lambda m: m.epoch_time_ms.bootstrap and
                                     m.epoch_time_ms.bootstrap.method).items()]


def basis_sentence(report: Report) -> str:
    d = report.decision
    if d.recommendation == Recommendation.INSUFFICIENT_DATA:
        return "No decision: no planned model has a usable timing."
    s = f"The decision rests on {d.basis}"
    if d.hours_median is not None:
        s += (f"; the hours as a distribution ({d.hours_basis}) are a Monte Carlo over each model's factors "
              "(epoch time, projection, data scaling, epochs, batch)")
    return s + "."


def plan_sentence(report: Report) -> str | None:
    by: dict[str, list[str]] = {}
    for name, m in report.models.items():
        if m.plan is not None and m.plan.epochs is not None:
            by.setdefault(m.plan.epochs_basis.split(":")[0], []).append(name)
    if not by:
        return None
    return "Planned epochs: " + "; ".join(f"{basis} for {_models(names)}" for basis, names in by.items()) + "."


def eval_sentence(report: Report) -> str | None:
    names = [n for n, m in report.models.items() if m.epoch_time_includes_eval and m.source == Source.MEASURED]
    if not names:
        return None
    return (f"The epoch time of {_models(names)} is the training pass plus the validation pass (epoch_time_ms + "
            "eval_time_ms), as an epoch of the training plan costs both.")


def data_parallel_sentence(report: Report) -> str | None:
    """How the rows across N GPUs were had, from what they recorded (their methods and what calibrated them)."""
    rows = [p for p in report.projections_data_parallel if p.epoch_ms is not None]
    if not rows:
        return None
    calibrated = sorted({p.instance for p in rows if "calibrated on measured DDP" in (p.range_basis or "")})
    measured = sorted({f"{p.model} on {p.instance} x{p.data_parallel}" for p in rows
                       if (p.method or "").startswith(Basis.MEASURED)})
    models = sorted({p.model for p in rows})
    plans = {m: report.models[m].plan for m in models if m in report.models}
    scaled = [m for m, p in plans.items() if p is not None and p.data_parallel_epochs]
    unmeasured = [m for m in models if m not in scaled]
    epochs = ("its epochs for the global batch from the measured gradient noise scale (McCandlish et al. 2018), "
              f"with the range its standard error gives, for {_models(scaled)}" if scaled else "")
    if unmeasured:
        epochs += (("; " if epochs else "") + f"no noise scale measured for {_models(unmeasured)}: their epochs "
                   "for the global batch span 1x to Nx, the hours taking Nx")
    return ("One model across N GPUs: the 1-GPU epoch over N ranks' share of its steps plus the ring all-reduce "
            "the backward does not hide (2(N-1)/N x fp32 gradient bytes at published NVLink bus bandwidths, DDP's "
            f"buckets); {epochs}"
            + (f"; the all-reduce calibrated on measured DDP runs for {_models(calibrated)}" if calibrated else
               "; no measured DDP run calibrates it")
            + (f"; measured: {_models(measured)}" if measured else "") + ".")


def method_sentences(report: Report) -> list[str]:
    """Every sentence of the Method paragraph, in order."""
    out = [outliers_sentence(report), contamination_sentence(report), *interval_sentences(report),
           *bootstrap_sentences(report), basis_sentence(report), plan_sentence(report), eval_sentence(report),
           data_parallel_sentence(report),
           "Runs that failed are listed but not timed; an interrupted run's measured epochs are used. "
           "See docs/report-schema.md."]
    return [s for s in out if s]
