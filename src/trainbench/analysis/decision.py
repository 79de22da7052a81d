"""Coverage, projection, the timeline decision, costs and confidence.

Projected hours of a model = mean epoch time x target epochs; the conservative figure uses the upper end of
the headline 95% interval of the mean, times (1 + ``decision.buffer``). The recommendation is made on the
conservative total of the planned models: below ``local_max_hours`` -> ``local_gpu``, above
``cloud_min_hours`` -> ``cloud``, in between -> ``user_choice``; nothing projectable -> ``insufficient_data``.
"""

from __future__ import annotations

import math
from typing import Any

from trainbench.analysis.devices import measured_speed
from trainbench.analysis.report import hours_phrase as _h
from trainbench.core.vocab import GradientHealth, LossTrend, Outcome, Summary, Tag

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


def project_measured(epoch: dict[str, Any], target: int | None) -> dict[str, Any] | None:
    if target is None or epoch.get("mean") is None:
        return None
    ci = epoch.get("ci95_mean")
    return {"target_epochs": target, "hours": epoch["mean"] * target / MS_PER_HOUR,
            "hours_ci95": [max(0.0, ci[0]) * target / MS_PER_HOUR, ci[1] * target / MS_PER_HOUR] if ci else None}


def project_estimate(epoch_ms: float, target: int | None) -> dict[str, Any] | None:
    if target is None:
        return None
    return {"target_epochs": target, "hours": epoch_ms * target / MS_PER_HOUR, "hours_ci95": None}


def recommend(hours_conservative: float | None, local_max: float, cloud_min: float) -> str:
    if hours_conservative is None:
        return "insufficient_data"
    if hours_conservative < local_max:
        return "local_gpu"
    if hours_conservative > cloud_min:
        return "cloud"
    return "user_choice"


def totals(models: dict[str, dict[str, Any]], plan: list[str], buffer: float) -> tuple[float | None, float | None,
                                                                                       list[str]]:
    """(total hours, conservative total, planned models in the total)."""
    total = cons = 0.0
    used = []
    for name in plan:
        proj = (models.get(name) or {}).get("projection")
        if not proj:
            continue
        used.append(name)
        total += proj["hours"]
        upper = proj["hours_ci95"][1] if proj.get("hours_ci95") else proj["hours"]
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


def costs(total: float | None, total_cons: float | None, power_w: float | None, power_source: str,
          price_per_kwh: float, catalogue: list[Any], comparisons: list[dict[str, Any]],
          gpu_labels: dict[str, str] | None = None,
          projected: dict[str, tuple[float, str]] | None = None) -> dict[str, Any]:
    """Local and per-instance costs of the plan run one model after another on one GPU.

    Speed of an instance relative to the measured device: ``relative_speed`` in the catalogue when set,
    else measured (a run on that GPU in the experiment), else ``projected`` ({instance: (speed, source)},
    from the projection's serial hours), else unknown (no hours, no cost).
    ``gpu_labels``: conf/hardware entry -> the name the GPU reports (to match measured devices).
    """
    def usd_local(h: float | None) -> float | None:
        return None if h is None or power_w is None else h * power_w / 1000 * price_per_kwh

    cloud = []
    for inst in catalogue:
        m = measured_speed(comparisons, (gpu_labels or {}).get(inst.gpu, inst.gpu))
        speed: float | None
        if inst.relative_speed is not None:
            speed, source = float(inst.relative_speed), "decision.catalogue"
        elif m is not None:
            speed, source = m
        elif projected and inst.name in projected:
            speed, source = projected[inst.name]
        else:
            speed, source = None, "unknown: not measured and no workload profile to project from"
        hours = None if total is None or speed is None else total / speed
        hours_c = None if total_cons is None or speed is None else total_cons / speed
        cloud.append({"instance": inst.name, "gpu": inst.gpu, "gpus": int(getattr(inst, "gpus", 1) or 1),
                      "usd_per_hour": float(inst.usd_per_hour), "price_date": getattr(inst, "price_date", None),
                      "relative_speed": speed, "relative_speed_source": source, "hours": hours,
                      "usd": None if hours is None else hours * inst.usd_per_hour,
                      "hours_conservative": hours_c,
                      "usd_conservative": None if hours_c is None else hours_c * inst.usd_per_hour})
    return {"local": {"hours": total, "power_w": power_w, "power_source": power_source,
                      "price_per_kwh": price_per_kwh, "usd": usd_local(total),
                      "hours_conservative": total_cons, "usd_conservative": usd_local(total_cons)},
            "cloud": cloud}


def confidence(models: dict[str, dict[str, Any]], plan: list[str], min_epochs: int, missing: list[str],
               estimated: list[str], unprojected: list[str], power_known: bool) -> tuple[str, list[str]]:
    """('high' | 'medium' | 'low', reasons). Low: a planned model is missing or unprojectable, or training
    went non-finite. Medium: any other reason. High: none."""
    severe, mild = [], []
    if missing:
        severe.append(f"{len(missing)} of {len(plan)} planned models were not measured and have no estimate: "
                      f"{', '.join(missing)}; the total leaves them out")
    if unprojected:
        severe.append(f"no target epochs for {', '.join(unprojected)}: set decision.target_epochs.<model>")
    if estimated:
        mild.append(f"{', '.join(estimated)} projected from user estimates (decision.estimates), not measured")
    for name in plan:
        m = models.get(name)
        if not m or m.get("source") != "measured":
            continue
        if m["samples_used"] < min_epochs:
            mild.append(f"{name}: {m['samples_used']} epochs used, fewer than decision.min_epochs={min_epochs}")
        stab = m["stability"]
        # the analysis' gradient verdict says non_finite (analysis/stats.py), the run's tag nonfinite
        if stab[Tag.LOSS_TREND] == LossTrend.NON_FINITE or \
                stab[Tag.GRADIENT_HEALTH] in (LossTrend.NON_FINITE, GradientHealth.NONFINITE):
            severe.append(f"{name}: training produced non-finite losses or gradients")
        for w in stab["warnings"]:
            mild.append(f"{name}: {w}")
        bad = {k: v for k, v in m["outcomes"].items() if k != Outcome.COMPLETED}
        if bad:
            mild.append(f"{name}: {sum(bad.values())} run(s) did not complete "
                        f"({', '.join(f'{k}: {v}' for k, v in sorted(bad.items()))})")
    if not power_known:
        mild.append("local power draw unknown (no NVML data, no hardware.power_w): the local cost is not priced")
    level = "low" if severe else ("medium" if mild else "high")
    return level, severe + mild


def rationale(dec: dict[str, Any], cost: dict[str, Any], used: list[str], plan: list[str], device: str | None,
              missing: list[str]) -> str:
    rec = dec["recommendation"]
    lo, hi = dec["thresholds_hours"]["local_max"], dec["thresholds_hours"]["cloud_min"]
    if rec == "insufficient_data":
        return ("No planned model has a usable timing (every run failed, or none was measured), so no decision "
                "can be made. Fix the failing runs (see the runs table) and train again.")
    on = f" on {device}" if device else ""
    s = (f"Training the planned models ({', '.join(used)}) is projected to take {_h(dec[Summary.TOTAL_HOURS])}{on}; "
         f"the conservative figure (upper end of the 95% intervals plus a {dec['buffer']:.0%} buffer) is "
         f"{_h(dec[Summary.TOTAL_HOURS_CONSERVATIVE])}. ")
    if rec == "local_gpu":
        s += f"That is under the {lo:g} h threshold, so train on the local GPU. "
    elif rec == "cloud":
        s += f"That is over the {hi:g} h threshold, so rent a cloud GPU. "
    else:
        s += f"That is between {lo:g} h and {hi:g} h: either is reasonable; it is your call. "
    if device is not None and device.lower().startswith("cpu"):
        s += ("These timings were measured on a CPU: they project training on this CPU, not on a GPU. "
              "Run the sweep on the GPU you would train on (trainer=default) before relying on the decision. ")
    loc = cost["local"]
    if loc["usd"] is not None:
        s += f"Locally it costs about ${loc['usd']:.4g} of electricity ({loc['power_w']:g} W, " \
             f"${loc['price_per_kwh']:g}/kWh)"
    else:
        s += "The local electricity cost is unknown (no power figure)"
    if cost["cloud"]:
        cheapest = min(cost["cloud"], key=lambda c: c["usd"] if c["usd"] is not None else math.inf)
        if cheapest["usd"] is not None:
            s += (f"; the cheapest cloud option, {cheapest['instance']} ({cheapest['gpu']}), costs about "
                  f"${cheapest['usd']:.4g} at relative speed {cheapest['relative_speed']:.3g} "
                  f"({cheapest['relative_speed_source']})")
    s += ". "
    if missing:
        s += (f"This decision is INCOMPLETE: {', '.join(missing)} "
              f"{'was' if len(missing) == 1 else 'were'} not measured, so the real total is larger. ")
    s += f"Confidence is {dec['confidence'].upper()}."
    if dec["confidence_reasons"] and not missing:
        s += " " + dec["confidence_reasons"][0][0].upper() + dec["confidence_reasons"][0][1:] + "."
    return s
