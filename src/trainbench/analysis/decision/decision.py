"""Coverage, projection, the timeline decision, costs and confidence.

Projected hours of a model = mean epoch time x target epochs; the conservative figure uses the upper end of
the range (the headline 95% interval of the mean, or the projection's range), times (1 + ``decision.buffer``).
The recommendation is made on the LOCAL instance's conservative total (its row of the instances table,
analysis/projection/projection.py: the card named by hardware=, measured on it or projected to it; else the machine the
sweep ran on): below ``local_max_hours`` -> ``local_gpu``, above ``cloud_min_hours`` -> ``cloud``, in between
-> ``user_choice``; nothing projectable -> ``insufficient_data``. Costs are a view of that table (one cost per
instance); the confidence follows from the basis chosen, the sizes, the target epochs and the thresholds.
"""

from __future__ import annotations

import math
from typing import Any

from trainbench.analysis.plan.curves import EARLY_STOPPING, EXTRAPOLATED
from trainbench.analysis.projection.projection import PRICED, Projections
from trainbench.analysis.report_types import (
    LOCAL,
    Basis,
    CloudCost,
    Confidence,
    ConfidenceReason,
    Costs,
    DataParallelAdvice,
    Decision,
    Instance,
    LocalCost,
    LocalInstance,
    MeasuredDevice,
    ModelEntry,
    ModelProjection,
    ProjectionRow,
    ReasonKind,
    Recommendation,
    Source,
)
from trainbench.analysis.statistics.timing import EpochTime
from trainbench.analysis.words import hours_phrase as _h
from trainbench.core.vocab import (
    GradientHealth,
    LossTrend,
    Outcome,
    Summary,
)

MS_PER_HOUR = 3_600_000.0


def target_epochs(name: str, runs: list[Any], overrides: dict[str, int]) -> tuple[int | None, str]:
    """(target epochs, where it came from) for a measured model."""
    if name in overrides:
        return int(overrides[name]), "decision.target_epochs"
    vals = sorted({r.target_epochs for r in runs if r.target_epochs})
    if not vals:
        return None, "missing"
    return vals[-1], "run param model.target_epochs" + (f" (runs differ: {vals}; the largest is used)"
                                                        if len(vals) > 1 else "")


def project_measured(epoch: EpochTime, target: int | None) -> ModelProjection | None:
    """A measured model's hours on the sweep's device: mean x target epochs, and its interval's."""
    if target is None or epoch.mean is None:
        return None
    ci = epoch.ci95_mean
    return ModelProjection(target_epochs=target, hours=epoch.mean * target / MS_PER_HOUR,
                           hours_ci95=[max(0.0, ci[0]) * target / MS_PER_HOUR, ci[1] * target / MS_PER_HOUR]
                           if ci else None)


def project_estimate(epoch_ms: float, target: int | None) -> ModelProjection | None:
    """An estimated model's hours (decision.estimates): no interval."""
    if target is None:
        return None
    return ModelProjection(target_epochs=target, hours=epoch_ms * target / MS_PER_HOUR, hours_ci95=None)


def recommend(hours_conservative: float | None, local_max: float, cloud_min: float) -> Recommendation:
    if hours_conservative is None:
        return Recommendation.INSUFFICIENT_DATA
    if hours_conservative < local_max:
        return Recommendation.LOCAL_GPU
    if hours_conservative > cloud_min:
        return Recommendation.CLOUD
    return Recommendation.USER_CHOICE


def totals(models: dict[str, ModelEntry], plan: list[str], buffer: float) -> tuple[float | None, float | None,
                                                                                       list[str]]:
    """(total hours, conservative total, planned models in the total)."""
    total = cons = 0.0
    used = []
    for name in plan:
        proj = models[name].projection if name in models else None
        if not proj or proj.hours is None:  # no hours on this device (a profiled size: only projected)
            continue
        used.append(name)
        total += proj.hours
        # the planned range (the epoch-time interval and the epochs' range, analysis/plan/plan.py), else the interval
        rng = proj.hours_range or proj.hours_ci95
        upper = rng[1] if rng else proj.hours
        cons += upper * (1 + buffer)
    return (total, cons, used) if used else (None, None, used)


def local_power(hw: Any, runs: list[Any]) -> tuple[float | None, str]:
    """Board power (W) for the local cost, and its source: hardware config, NVML in the runs, run params."""
    if hw.power_w is not None:
        return float(hw.power_w), f"hardware profile `{hw.name}`"
    nvml = [r.metrics[Summary.GPU_POWER_W_MEAN] for r in runs
            if math.isfinite(r.metrics.get(Summary.GPU_POWER_W_MEAN, math.nan))]
    if nvml:
        return sum(nvml) / len(nvml), f"NVML board power measured during {len(nvml)} run(s)"
    vals = []
    for r in runs:
        try:
            v = float(r.params.get("hardware.power_w", "None"))
        except ValueError:
            continue
        if math.isfinite(v):
            vals.append(v)
    if vals:
        return sum(vals) / len(vals), "the runs' hardware.power_w param"
    return None, "unknown"


def _reference_speed(inst: Instance, reference: dict[str, float | None]) -> tuple[float | None, str]:
    """Σ hours measured on the sweep's device / Σ hours on the instance, over the instance's models: how much
    faster it is (informative; the hours and the cost come from the instances table, not from this ratio)."""
    ref = [reference.get(m) for m in inst.models]
    if not inst.models or not inst.hours_serial or any(h is None for h in ref):
        return None, "unknown: " + ("; ".join(inst.methods) or "no model projected onto it")
    return sum(ref) / inst.hours_serial, "instances table: " + ", ".join(inst.methods)  # type: ignore[arg-type]


def costs(instances: list[Instance], power_w: float | None, power_source: str, price_per_kwh: float,
          reference: dict[str, float | None] | None = None) -> Costs:
    """The report's ``costs``: a view of THE instances table (analysis/projection/projection.py), one cost per instance.

    ``local``: the local instance's row, priced as its hours x ``power_w`` x ``price_per_kwh`` (the hours of
    the local card, measured or projected; never another device's hours). ``cloud``: one entry per catalogue
    instance, its wall hours (the models in parallel, one per GPU) x the whole instance's hourly price.
    ``reference``: {model: hours measured on the sweep's device}, for the informative ``relative_speed``.
    """
    local = next(i for i in instances if i.instance == LOCAL)
    why = None
    if local.wall_hours is None:
        why = (f"no hours on the local {local.gpu}: {local.local_why or ''}" if local.local_kind == "unknown" else
               f"no planned model measured on or projected onto the local {local.gpu}")
    elif power_w is None:
        why = "local power draw unknown (no hardware.power_w, no NVML data)"
    loc = LocalCost(instance=LOCAL, gpu=local.gpu, basis=local.basis, models=local.models, missing=local.missing,
                    hours=local.wall_hours, hours_range=local.wall_hours_range,
                    hours_conservative=local.wall_hours_conservative, power_w=power_w, power_source=power_source,
                    price_per_kwh=price_per_kwh, usd=local.usd, usd_range=local.usd_range,
                    usd_conservative=local.usd_conservative, why_unpriced=why)
    cloud = []
    for inst in instances:
        if inst.price_source != PRICED:
            continue
        speed, source = _reference_speed(inst, reference or {})
        cloud.append(CloudCost(instance=inst.instance, gpu=inst.gpu, gpus=inst.gpus, gpus_used=inst.gpus_used,
                               usd_per_hour=inst.usd_per_hour, price_date=inst.price_date, basis=inst.basis,
                               methods=inst.methods, complete=inst.complete, missing=inst.missing,
                               fits_all=inst.fits_all, hours=inst.wall_hours, hours_serial=inst.hours_serial,
                               hours_range=inst.wall_hours_range, usd=inst.usd, usd_range=inst.usd_range,
                               hours_conservative=inst.wall_hours_conservative,
                               usd_conservative=inst.usd_conservative, relative_speed=speed,
                               relative_speed_source=source, data_parallel=inst.data_parallel,
                               global_batch=inst.global_batch))
    return Costs(local=loc, cloud=cloud)


# --------------------------------------------------------------------------------------------------
# the decision rests on the local instance
# --------------------------------------------------------------------------------------------------


def _phrase(kind: str, method: str, row: Instance) -> str:
    if kind == Basis.MEASURED:
        return f"measured on {row.gpu}" + (f" ({row.local_why})" if row.local_kind == "measured device"
                                           and str(row.local_why or "").startswith("hardware=auto") else "")
    if kind == Basis.SCALED:
        return method if method.startswith("scaled") else f"scaled ({method})"
    if kind == Basis.ESTIMATE:
        return "estimated (decision.estimates)"
    return f"projected ({method})"


def basis_text(row: Instance, entries: list[ProjectionRow]) -> str:
    """``measured on <card>`` / ``scaled from <gpu>`` / ``projected (roofline from cpu profile)`` for the local
    row; with models on different bases, each phrase followed by its models."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        if e.hours is None:
            continue
        kind = row.model_basis.get(e.model) or Basis.PROJECTED
        groups.setdefault(_phrase(kind, e.method or "", row), []).append(e.model)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{p} for {', '.join(ms)}" for p, ms in groups.items())


def local_view(local: Instance) -> LocalInstance:
    """``decision.local_instance``: the local row as the decision reads it."""
    return LocalInstance(gpu=local.gpu, gpu_name=local.gpu_name, local_kind=local.local_kind,
                         local_why=local.local_why, models=local.models, missing=local.missing,
                         fits_all=local.fits_all, does_not_fit=local.does_not_fit, methods=local.methods,
                         basis=local.basis, hours=local.wall_hours, hours_range=local.wall_hours_range,
                         hours_conservative=local.wall_hours_conservative)


def decide(local: Instance, local_entries: list[ProjectionRow], total: float | None,
           total_c: float | None, used: list[str], models: dict[str, ModelEntry], device: str | None,
           d: Any) -> Decision:
    """The decision on the local instance (its row of the instances table): its conservative hours (slow end
    of the range x (1 + buffer)) against the thresholds. Where the local instance has no hours for a model
    the sweep measured, the decision falls back to the hours measured on the sweep's ``device`` and its
    ``basis`` says so (the confidence is then low). ``total``/``total_c``/``used``: :func:`totals` of the
    hours measured on ``device``."""
    lo, hi = d.local_max_hours, d.cloud_min_hours
    measured_range = None
    if used:
        def rng(m: str) -> list[float]:
            p = models[m].projection
            return p.hours_range or p.hours_ci95 or [p.hours] * 2  # type: ignore[union-attr]
        lows, highs = [rng(m)[0] for m in used], [rng(m)[1] for m in used]
        measured_range = [sum(lows), sum(highs)]
    measured = MeasuredDevice(device=device, total_hours=total, total_hours_conservative=total_c,
                              total_hours_range=measured_range, models=used,
                              recommendation=recommend(total_c, lo, hi))
    left_out = [m for m in used if m not in local.models]
    out = Decision(thresholds_hours={"local_max": lo, "cloud_min": hi}, buffer=d.buffer, measured_device=measured,
                   local_instance=local_view(local))
    if local.wall_hours is not None and not left_out:
        out.recommendation = recommend(local.wall_hours_conservative, lo, hi)
        out.total_hours, out.total_hours_conservative = local.wall_hours, local.wall_hours_conservative
        out.total_hours_range, out.models_in_total = local.wall_hours_range, local.models
        out.basis, out.basis_kind, out.on_local = basis_text(local, local_entries), local.basis, True
        return out
    if local.wall_hours is None:
        why = (local.local_why if local.local_kind == "unknown" else
               "no planned model projects onto it (" + "; ".join(sorted({e.method for e in local_entries
                                                                         if e.method})) + ")")
    else:
        reasons = sorted({e.method for e in local_entries if e.model in left_out and e.method})
        why = f"{', '.join(left_out)} not projected onto it ({'; '.join(reasons)})"
    out.recommendation = recommend(total_c, lo, hi)
    out.total_hours, out.total_hours_conservative, out.total_hours_range = total, total_c, measured_range
    out.models_in_total, out.on_local = used, False
    out.basis = f"measured on {device}, not the local {local.gpu}: {why}" if used else "nothing measured"
    out.basis_kind = Basis.OTHER_DEVICE if used else None
    return out


# --------------------------------------------------------------------------------------------------
# the headline: what the answer rests on, in one line a person reads first
# --------------------------------------------------------------------------------------------------


def _names(items: list[str]) -> str:
    return ", ".join(items)


def headline(models: dict[str, ModelEntry], used: list[str], device: str | None) -> str:
    """The sizes and the epochs the total rests on, and where each comes from, e.g. ``reference sizes: profiled
    on cpu, not trained (tft, mamba2); measured at small, the same config (dqn); epochs: your configured (not
    confirmed) 1500 tft, 1000 mamba2, 1000 dqn``. Its words come from each model's row and plan."""
    if not used:
        return "nothing to rest on: no planned model has hours"
    groups: dict[str, list[str]] = {}
    for m in used:
        e = models[m]
        size, src = str(e.size or "unsized"), e.source
        if src == Source.ESTIMATE:
            key = "your estimates (decision.estimates)"
        elif src == Source.PROFILED:
            key = f"{size} size, profiled on {device or 'this machine'} without training"
        elif size == TRAINED_SIZE and "same workload" in str(e.size_reason or ""):
            key = f"{size} size, measured on {device} at a size of the same config"
        elif size == TRAINED_SIZE:
            key = f"{size} size, measured on {device}"
        elif size == "unsized":
            key = f"size unknown (runs recorded before sizes existed), measured on {device}"
        else:
            key = f"size {size}, NOT the {TRAINED_SIZE} size the team trains, measured on {device}"
        groups.setdefault(key, []).append(m)
    sizes = "; ".join(f"{k} ({_names(v)})" for k, v in groups.items())
    epochs: dict[str, list[str]] = {}
    for m in used:
        plan, proj = models[m].plan, models[m].projection
        n = (plan.epochs if plan else None) or (proj.target_epochs if proj else None)
        basis = str((plan.epochs_basis if plan else None) or "configured")
        if basis.startswith((EARLY_STOPPING, EXTRAPOLATED)):
            key = "from the curves" + (" (converted to the planned data by a measured alpha)"
                                       if plan and plan.data_alpha is not None else "")
        elif plan is None or plan.epochs_confirmed:
            key = "yours (set in the analysis)"
        else:
            key = "your configured model.target_epochs, not confirmed (set decision.target_epochs.<model>)"
        epochs.setdefault(key, []).append(f"{n} {m}")
    return f"rests on {sizes}; epochs: " + "; ".join(f"{k} {_names(v)}" for k, v in epochs.items())


# --------------------------------------------------------------------------------------------------
# confidence: computed after the basis is chosen, one rule per function
# --------------------------------------------------------------------------------------------------

Reasons = tuple[list[ConfidenceReason], list[ConfidenceReason]]  # (severe: the confidence is low, mild: at most medium)


def _reason(kind: str, detail: str, models: list[str] | None = None) -> ConfidenceReason:
    """One reason, as data: its kind, the models its words name first, its words."""
    return ConfidenceReason(kind=str(kind), models=list(models or []), detail=detail)

#: P(the total lands where the recommendation says) below these: low / medium (with the plan's Monte Carlo).
P_LOW, P_MEDIUM = 0.5, 0.9
#: The conservative total within this fraction of a threshold: medium (without the Monte Carlo).
THRESHOLD_MARGIN = 0.10
#: The sizes a team trains; a decision on another size (small, tiny) says so unless decision.size chose it.
TRAINED_SIZE = "reference"


def basis_reasons(decision: Decision) -> Reasons:
    """measured on the local machine > scaled from a measured GPU > projected by the roofline alone;
    hours measured on another device than the local one: low."""
    kind, basis = decision.basis_kind, decision.basis
    card = decision.local_instance.gpu
    if kind == Basis.PROJECTED:
        return [_reason(ReasonKind.BASIS, f"the decision rests on a projection onto the local {card}, not a "
                        f"measurement ({basis}): a model of the card from the runs' workload profile, never timed "
                        "on it; measure on it (trainer=default) to replace it")], []
    if kind == Basis.OTHER_DEVICE:
        return [_reason(ReasonKind.BASIS, f"the decision rests on hours {basis}; name the local card with "
                        "hardware=<entry> and record workload profiles (trainer.profile_workload) to project onto "
                        "it, or measure on it")], []
    if kind == Basis.SCALED:
        return [], [_reason(ReasonKind.BASIS, f"the decision rests on hours {basis}: a measured GPU's times scaled "
                            f"to the local {card} by the roofline's ratio, not measured on it")]
    return [], []


def profiled_outside(profiled: list[str], in_total: list[str] | None) -> list[str]:
    """The planned models profiled (not trained) that the total leaves out: nothing projects them onto the basis
    the decision rests on (a CPU as the local machine)."""
    return [m for m in profiled if m not in (in_total or [])]


def profiled_reasons(models: dict[str, ModelEntry], plan: list[str], decision: Decision) -> Reasons:
    """Severe: a planned model profiled at the decided size but without hours in the total (the local machine is
    the sweep's CPU, onto which no profile projects)."""
    profiled = [m for m in plan if m in models and models[m].source == Source.PROFILED]
    out = profiled_outside(profiled, decision.models_in_total)
    if not out:
        return [], []
    card = decision.local_instance.gpu
    return [_reason(ReasonKind.PROFILED_OUTSIDE, f"profiled at size {models[out[0]].size} without "
                    f"training, and nothing projects a profile onto {card}, the local machine: the total leaves "
                    "them out; name your card (hardware=<entry>) to project them onto it, or measure them",
                    out)], []


def local_fit_reasons(decision: Decision) -> Reasons:
    """A planned model predicted not to fit in the local card's memory cannot be trained there as measured."""
    loc = decision.local_instance
    if decision.on_local and loc.does_not_fit:
        return [_reason(ReasonKind.LOCAL_FIT, f"predicted not to fit in the local {loc.gpu}'s memory at the "
                        f"runs' batch size: {', '.join(loc.does_not_fit)}")], []
    return [], []


def size_reasons(models: dict[str, ModelEntry], used: list[str], size_chosen: str | None) -> Reasons:
    """A decision on sizes the team will not train (the CPU profile's `small`) says so and is low, unless
    ``decision.size`` chose that size; runs without a size (recorded before sizes existed) lower it a little."""
    by_size: dict[str, list[str]] = {}
    for m in used:
        if models[m].source == Source.ESTIMATE:  # no run: the team's own figure, for the size it trains
            continue
        by_size.setdefault(str(models[m].size or "unsized"), []).append(m)
    severe, mild = [], []
    for size, names in by_size.items():
        if size == TRAINED_SIZE or (size_chosen and size == size_chosen):
            continue
        if size == "unsized":
            mild.append(_reason(ReasonKind.UNSIZED, f"model size unknown for {', '.join(names)} (runs recorded "
                                "before model sizes existed)"))
        else:
            severe.append(_reason(ReasonKind.SIZE, f"the decision rests on size={size} ({', '.join(names)}), "
                                  f"which the team will not train: the plan trains the {TRAINED_SIZE} sizes; "
                                  f"measure at size={TRAINED_SIZE} (trainer=default), or set decision.size={size} "
                                  f"if {size} is what you will train"))
    return severe, mild


def epochs_reasons(models: dict[str, ModelEntry], used: list[str]) -> Reasons:
    """Target epochs the team did not set (the runs' model.target_epochs: the model's default unless set at
    training time) put a guess into hours that scale with them. Set: decision.target_epochs or
    decision.estimates; estimated from the data: the plan's epochs_basis early_stopping or extrapolated."""
    default = []
    for m in used:
        entry = models[m]
        if str(entry.target_epochs_source or "").startswith("decision."):
            continue
        if entry.plan and entry.plan.epochs_basis in (EARLY_STOPPING, EXTRAPOLATED):
            continue
        target = entry.projection.target_epochs if entry.projection else None
        default.append(f"{m} ({target})" if target else m)
    if not default:
        return [], []
    return [], [_reason(ReasonKind.TARGET_EPOCHS_UNSET, f"target epochs not set by the team for "
                        f"{', '.join(default)}: the runs' model.target_epochs (the model's default unless set at "
                        "training time), and the hours scale with them; set decision.target_epochs.<model> to the "
                        "epochs you will train")]


def plan_reasons(models: dict[str, ModelEntry], used: list[str]) -> Reasons:
    """The plan's own doubts (mild): epochs the curves could not estimate or were not used for (why), a curve that
    got worse, and data scaling that cannot be trusted (epochs are never converted with alpha unmeasured)."""
    mild = []
    for name in used:
        p = models[name].plan if name in models else None
        if not p:
            continue
        if str(p.epochs_basis).startswith("configured:"):  # the curves could not estimate them
            mild.append(_reason(ReasonKind.EPOCHS_CONFIGURED, f"epochs {p.epochs_basis}", [name]))
        if p.diverged_after_epoch is not None:
            overfits = p.curve_worsened == "overfitting"
            how = "overfits" if overfits else "got worse than its start"
            mild.append(_reason(ReasonKind.CURVE_OVERFITS if overfits else ReasonKind.CURVE_WORSENED,
                                f"its curve {how} after epoch {p.diverged_after_epoch}", [name]))
        if not p.data_scale_trusted:
            mild.append(_reason(ReasonKind.DATA_SCALE_UNTRUSTED, f"data scaling not trusted ({p.data_scale_note})",
                                [name]))
    return [], mild


def contamination_reasons(models: dict[str, ModelEntry], plan: list[str]) -> Reasons:
    """A decision resting on contaminated timings (analysis/statistics/contamination_report.py) is low confidence."""
    busy = [n for n in plan if n in models and models[n].source == Source.MEASURED
            and (models[n].contamination or {}).get("used")]
    if not busy:
        return [], []
    c = [models[n].contamination or {} for n in busy]
    return [_reason(ReasonKind.BUSY_MACHINE, f"timed on a busy machine ({sum(x['epochs_flagged'] for x in c)} of "
                    f"{sum(x[Summary.EPOCHS_MEASURED] for x in c)} measured epochs contaminated and used, "
                    "analysis.contaminated); measure again on a quiet machine", busy)], []


def unbounded_models(models: dict[str, ModelEntry], decision: Decision) -> list[str]:
    """The measured models of the total whose interval of the mean the data cannot resolve
    (``epoch_time_ms.ci95_mean_unresolved``): the conservative total counts their central hours, unbounded."""
    return [m for m in decision.models_in_total
            if models[m].source == Source.MEASURED and models[m].epoch_time_ms
            and models[m].epoch_time_ms.ci95_mean_unresolved]


def unresolved_reasons(models: dict[str, ModelEntry], decision: Decision) -> Reasons:
    """Severe: a model of the total whose interval of the mean is unresolved (the conservative total cannot bound
    it), with what to run."""
    unbounded = decision.conservative_unbounded
    if not unbounded:
        return [], []
    why = models[unbounded[0]].epoch_time_ms.ci95_mean_unresolved  # type: ignore[union-attr]
    return [_reason(ReasonKind.UNRESOLVED, "interval of the mean unresolved, so the conservative total cannot "
                    f"bound {'it' if len(unbounded) == 1 else 'them'} ({why})", unbounded)], []


def threshold_reasons(decision: Decision) -> Reasons:
    """How sure the total is to land where the recommendation says: from the plan's Monte Carlo
    (``p_within_<local_max>h``, ``p_over_<cloud_min>h``) when present, else the hours range (fast end to the
    conservative total) against the thresholds and the conservative total's distance to them."""
    rec = decision.recommendation
    th = decision.thresholds_hours
    lo, hi = th["local_max"], th["cloud_min"]
    # the plan's Monte Carlo: p_within_24h = P(total < local_max), p_over_48h = P(total > cloud_min), whatever
    # the thresholds are (the names are the report's, docs/report-schema.md)
    p_in, p_over = decision.p_within_24h, decision.p_over_48h
    if rec not in (Recommendation.LOCAL_GPU, Recommendation.CLOUD, Recommendation.USER_CHOICE):
        return [], []
    if p_in is not None and p_over is not None:
        p = {Recommendation.LOCAL_GPU: p_in, Recommendation.CLOUD: p_over,
             Recommendation.USER_CHOICE: 1.0 - p_in - p_over}[rec]
        where = {Recommendation.LOCAL_GPU: f"under {lo:g} h", Recommendation.CLOUD: f"over {hi:g} h",
                 Recommendation.USER_CHOICE: f"between {lo:g} h and {hi:g} h"}[rec]
        text = _reason(ReasonKind.THRESHOLD, f"the total lands {where} (where `{rec}` rests) with probability "
                       f"{p:.0%} only (Monte Carlo)")
        return ([text], []) if p < P_LOW else (([], [text]) if p < P_MEDIUM else ([], []))
    cons, rng = decision.total_hours_conservative, decision.total_hours_range
    if cons is None or not rng:
        return [], []
    crossed = [t for t in sorted({lo, hi}) if rng[0] < t < cons]
    span = f"{rng[0]:.3g} h (fast end) to {cons:.3g} h (conservative)"
    if len(crossed) >= 2:
        return [_reason(ReasonKind.THRESHOLD, f"the total's range, {span}, spans both the {lo:g} h and {hi:g} h "
                        "thresholds")], []
    if crossed:
        return [], [_reason(ReasonKind.THRESHOLD, f"the total's range, {span}, crosses the {crossed[0]:g} h "
                            "threshold: the recommendation could change within it")]
    near = [t for t in sorted({lo, hi}) if abs(cons - t) <= THRESHOLD_MARGIN * t]
    if near:
        return [], [_reason(ReasonKind.THRESHOLD, f"the conservative total ({cons:.3g} h) lies within "
                            f"{THRESHOLD_MARGIN:.0%} of the {near[0]:g} h threshold")]
    return [], []


def confidence(models: dict[str, ModelEntry], plan: list[str], min_epochs: int, missing: list[str],
               estimated: list[str], unprojected: list[str], power_known: bool,
               decision: Decision | None = None,
               size_chosen: str | None = None) -> tuple[Confidence, list[ConfidenceReason]]:
    """('high' | 'medium' | 'low', reasons), computed once the decision's basis is chosen (``decision``).
    Low: a planned model is missing or unprojectable, training went non-finite, no timing at all, timings of a
    busy machine, or a severe reason of the rules above (basis, local fit, sizes, thresholds). Medium: any other
    reason (the plan's own doubts among them). High: none. Each reason is data (kind, models, words), made
    here; the report groups them by kind (analysis/report/reasons.py)."""
    severe: list[ConfidenceReason] = []
    mild: list[ConfidenceReason] = []
    if decision is not None and decision.recommendation == Recommendation.INSUFFICIENT_DATA:
        severe.append(_reason(ReasonKind.NO_TIMING, "no planned model has a usable timing: no decision is possible"))
    if missing:
        severe.append(_reason(ReasonKind.MISSING, f"{len(missing)} of {len(plan)} planned models were not measured "
                              f"and have no estimate: {', '.join(missing)}; the total leaves them out"))
    if unprojected:
        severe.append(_reason(ReasonKind.NO_TARGET_EPOCHS, f"no target epochs for {', '.join(unprojected)}: set "
                              "decision.target_epochs.<model>"))
    if estimated:
        mild.append(_reason(ReasonKind.ESTIMATED, f"{', '.join(estimated)} projected from user estimates "
                            "(decision.estimates), not measured"))
    for name in plan:
        m = models.get(name)
        if not m or m.source != Source.MEASURED:
            continue
        if m.samples_used < min_epochs:
            mild.append(_reason(ReasonKind.FEW_EPOCHS_USED, f"{m.samples_used} epochs used, fewer than "
                                f"decision.min_epochs={min_epochs}", [name]))
        stab = m.stability
        # the analysis' gradient verdict says non_finite (analysis/statistics/stats.py), the run's tag nonfinite
        if stab.loss_trend == LossTrend.NON_FINITE or \
                stab.gradient_health in (LossTrend.NON_FINITE, GradientHealth.NONFINITE):
            severe.append(_reason(ReasonKind.NON_FINITE, "training produced non-finite losses or gradients", [name]))
        kinds = stab.warning_kinds
        for i, w in enumerate(stab.warnings):  # a stability warning's kind is the statistics'
            mild.append(_reason(kinds[i] if len(kinds) == len(stab.warnings) else "", w, [name]))
        bad = {k: v for k, v in m.outcomes.items() if k != Outcome.COMPLETED}
        if bad:
            mild.append(_reason(ReasonKind.INCOMPLETE_RUNS, f"{sum(bad.values())} run(s) did not complete "
                                f"({', '.join(f'{k}: {v}' for k, v in sorted(bad.items()))})", [name]))
    if not power_known:
        mild.append(_reason(ReasonKind.POWER_UNKNOWN, "local power draw unknown (no NVML data, no hardware.power_w): "
                            "the local cost is not priced"))
    if decision is not None:
        used = list(decision.models_in_total)
        for s_, m_ in (basis_reasons(decision), profiled_reasons(models, plan, decision), local_fit_reasons(decision),
                       size_reasons(models, used, size_chosen),
                       epochs_reasons(models, used), threshold_reasons(decision),
                       unresolved_reasons(models, decision)):
            severe += s_
            mild += m_
        s_, m_ = plan_reasons(models, used)
        severe += s_
        mild += m_
    busy, _ = contamination_reasons(models, plan)  # the busy machine's reason comes first
    severe = busy + severe
    for r in severe:
        r.severe = True
    level = Confidence.LOW if severe else (Confidence.MEDIUM if mild else Confidence.HIGH)
    return level, severe + mild


def rationale(dec: Decision, cost: Costs, plan: list[str], device: str | None, missing: list[str]) -> str:
    """The decision in words, from the decision and the costs (a view of the instances table)."""
    rec = dec.recommendation
    lo, hi = dec.thresholds_hours["local_max"], dec.thresholds_hours["cloud_min"]
    if rec == Recommendation.INSUFFICIENT_DATA:
        return ("No planned model has a usable timing (every run failed, or none was measured), so no decision "
                "can be made. Fix the failing runs (see the runs table) and train again.")
    used = dec.models_in_total
    loc = dec.local_instance
    where = f"on the local {loc.gpu}" if dec.on_local else f"on {device}"
    s = (f"Training the planned models ({', '.join(used)}) {where} is estimated at {_h(dec.total_hours)} "
         f"({dec.basis}); the conservative figure (slow end of the range plus a {dec.buffer:.0%} buffer) is "
         f"{_h(dec.total_hours_conservative)}. ")
    if rec == Recommendation.LOCAL_GPU:
        s += f"That is under the {lo:g} h threshold, so train locally. "
    elif rec == Recommendation.CLOUD:
        s += f"That is over the {hi:g} h threshold, so rent a cloud GPU. "
    else:
        s += f"That is between {lo:g} h and {hi:g} h: either is reasonable; it is your call. "
    if device is not None and device.lower().startswith("cpu"):
        s += "These timings were measured on a CPU" + (
            f": the local {loc.gpu}'s hours are projected from the CPU runs' workload profile. "
            if dec.on_local and loc.local_kind == "gpu entry" else
            ": they project training on this CPU, not on a GPU. ")
        s += "Run the sweep on the GPU you would train on (trainer=default) before relying on the decision. "
    md = dec.measured_device
    if dec.on_local and loc.local_kind == "gpu entry" and md.total_hours is not None \
            and loc.basis != Basis.MEASURED:
        s += (f"The hours measured on {device} itself are {_h(md.total_hours)} (conservative "
              f"{_h(md.total_hours_conservative)}), which alone would say {md.recommendation}. ")
    lc = cost.local
    if lc.usd is not None:
        s += (f"Locally it costs about ${lc.usd:.4g} of electricity ({_h(lc.hours)} x {lc.power_w:g} W x "
              f"${lc.price_per_kwh:g}/kWh)")
    else:
        s += f"The local electricity cost is unknown ({lc.why_unpriced})"
    priced = [c for c in cost.cloud if c.usd is not None and c.complete]
    if priced:
        c = min(priced, key=lambda c: (c.usd, c.hours))
        s += (f"; the cheapest cloud instance that runs every planned model, {c.instance} ({c.gpu}"
              + (f", each model across {c.data_parallel} of its {c.gpus} GPUs" if c.data_parallel > 1
                 else f", {c.gpus_used} of {c.gpus} GPUs in parallel" if c.gpus > 1 else "")
              + f"), takes {_h(c.hours)} for about ${c.usd:.4g} ({c.basis})")
    s += ". "
    if missing:
        s += (f"This decision is INCOMPLETE: {', '.join(missing)} "
              f"{'was' if len(missing) == 1 else 'were'} not measured, so the real total is larger. ")
    s += f"Confidence is {dec.confidence.upper()}."
    if dec.confidence_reasons and not missing:
        first = dec.confidence_reasons[0]
        s += " " + first[0].upper() + first[1:] + "."
    return s


# --------------------------------------------------------------------------------------------------
# one model across several GPUs (the projection: analysis/projection/data_parallel.py)
# --------------------------------------------------------------------------------------------------


def _slow(row: ProjectionRow, buffer: float) -> float:
    """The conservative hours of a projections[] row: the slow end of its range x (1 + buffer)."""
    return (row.hours_range or [row.hours] * 2)[1] * (1 + buffer)  # type: ignore[operator]


def data_parallel_advice(proj: Projections, plan: list[str], d: Any) -> list[DataParallelAdvice]:
    """``decision.data_parallel``: for every planned model whose conservative hours on the decision's one GPU (its
    local row; else the hours measured on the sweep's device) pass ``local_max_hours``, the catalogue instance and
    N to train it across, and why; or why not (it cannot be split, no board, not faster than one GPU)."""
    lo, hi = d.local_max_hours, d.cloud_min_hours
    price = {i.instance: i.usd_per_hour for i in proj.instances if i.price_source == PRICED}
    local = {p.model: p for p in proj.on(LOCAL)}
    out = []
    for name in plan:
        one = local.get(name)
        if one is None or one.hours is None:
            continue
        single = _slow(one, d.buffer)
        if single <= lo:
            continue
        rows = [p for p in proj.projections_data_parallel if p.model == name and p.instance in price]
        ok = [p for p in rows if p.hours is not None and p.fits is not False]
        entry = DataParallelAdvice(model=name, single_gpu_hours=single, recommended=False, instance=None)
        where = f"{_h(single)} on one GPU (the local {one.gpu}, conservative) passes the {lo:g} h threshold"
        if not ok:
            whys = sorted({p.method for p in rows if p.method})
            entry.why = (f"{where}; " + ("; ".join(whys) if whys else "no catalogue instance holds several GPUs "
                                         "(decision.catalogue gpus)"))
            out.append(entry)
            continue
        tiers = [[p for p in ok if _slow(p, d.buffer) < lo], [p for p in ok if _slow(p, d.buffer) <= hi]]
        pool = next((t for t in tiers if t), None)
        pick = (min(pool, key=lambda p: (p.hours * price[p.instance], p.hours)) if pool else
                min(ok, key=lambda p: _slow(p, d.buffer)))
        base = next((p for p in proj.projections if p.instance == pick.instance and p.model == name), None)
        n, usd = pick.data_parallel, pick.hours * price[pick.instance]
        faster = base is None or base.hours is None or _slow(pick, d.buffer) < _slow(base, d.buffer)
        note = next((x for x in pick.notes if x.startswith(f"{n} GPUs:")), "")
        how = (f"across {n} GPUs of {pick.instance} ({pick.gpu}): {_h(pick.hours)} (conservative "
               f"{_h(_slow(pick, d.buffer))}) for about ${usd:.4g}; an epoch {pick.epoch_ms:.4g} ms of which "
               f"{pick.comm_ms:.3g} ms all-reduce the backward does not hide; {note}")
        if faster:
            entry.recommended, entry.instance = True, pick.instance
            entry.gpu, entry.data_parallel, entry.global_batch = pick.gpu, n, pick.global_batch
            entry.hours, entry.hours_range, entry.usd = pick.hours, pick.hours_range, usd
            entry.why = f"{where}; {how}" + ("" if pool is tiers[0] else f" (no instance brings it under {lo:g} h)")
        else:
            entry.why = f"{where}; not faster across GPUs than on one of them: {how}"
        out.append(entry)
    return out


def data_parallel_rationale(advice: list[DataParallelAdvice]) -> str:
    """The rationale's sentence on data parallelism: each model over the threshold, with or without a
    recommendation."""
    s = ""
    for a in advice:
        if a.recommended:
            s += (f" Data parallelism for {a.model}: train it across {a.data_parallel} GPUs of {a.instance} "
                  f"(global batch {a.global_batch}), about {_h(a.hours)} for ${a.usd:.4g}.")
        else:
            s += f" {a.model}: no data-parallel instance is recommended ({a.why})."
    return s
