"""Write the report: report.json (docs/report-schema.md), report.md, plots; log it to MLflow."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_report(report: dict[str, Any], folder: Path, recs: list[Any] | None = None) -> list[Path]:
    """report.json, report.md and (when ``recs`` is given) the PNG plots into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    if recs is not None:
        from trainbench.analysis.plots import write_plots

        report["plots"] = [p.name for p in write_plots(report, recs, folder)]
    else:
        report["plots"] = []
    p = folder / "report.json"
    p.write_text(json.dumps(clean(report), indent=2, allow_nan=False) + "\n")
    files.append(p)
    p = folder / "report.md"
    p.write_text(markdown(report))
    files.append(p)
    return files


def log_folder_run(client: Any, exp_id: str, run_name: str, tags: dict[str, str], values: dict[str, Any],
                   folder: Path) -> str:
    """One MLflow run holding ``values`` (finite ones, as metrics at step 0) and every file of ``folder``.

    Ends FINISHED, or FAILED (and re-raises) if logging fails; returns the run id. The analysis and the
    sweep comparison both record their reports this way.
    """
    from mlflow.entities import Metric

    run = client.create_run(exp_id, run_name=run_name, tags=tags)
    rid = run.info.run_id
    try:
        ts = int(run.info.start_time or 0)
        metrics = [Metric(k, float(v), ts, 0) for k, v in values.items() if v is not None and math.isfinite(v)]
        if metrics:
            client.log_batch(rid, metrics=metrics)
        client.log_artifacts(rid, str(folder))
    except Exception:
        client.set_terminated(rid, "FAILED")
        raise
    client.set_terminated(rid, "FINISHED")
    return rid


def log_to_mlflow(client: Any, exp_id: str, report: dict[str, Any], folder: Path) -> str:
    """Log the report folder as a run tagged kind=analysis with the sweep's sweep_id; returns its id."""
    d = report["decision"]
    tags = {"kind": "analysis", "sweep_id": report["sweep_id"], "recommendation": d["recommendation"],
            "confidence": d["confidence"], "partial": str(report["partial"]).lower()}
    values = {"total_hours": d["total_hours"], "total_hours_conservative": d["total_hours_conservative"],
              "local_usd": report["costs"]["local"]["usd"],
              "models_measured": len(report["coverage"]["measured"]),
              "models_missing": len(report["coverage"]["missing"])}
    return log_folder_run(client, exp_id, f"analysis-{report['sweep_id']}", tags, values, folder)


# --------------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------------


def _n(x: Any, fmt: str = ".4g") -> str:
    return "–" if x is None else format(x, fmt)


def _ci(ci: Any, fmt: str = ".4g") -> str:
    return "–" if not ci else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _hours(h: Any) -> str:
    if h is None:
        return "–"
    if h < 1 / 60:
        return f"{h * 3600:.3g} s"
    return f"{h * 60:.3g} min" if h < 1 else f"{h:.2f} h"


def _usd(x: Any) -> str:
    return "–" if x is None else (f"${x:.4f}" if x < 1 else f"${x:,.2f}")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown(r: dict[str, Any]) -> str:
    d, cov, cost = r["decision"], r["coverage"], r["costs"]
    out = [f"# Training-time report: sweep `{r['sweep_id']}`\n",
           f"Generated {r['generated_at']} from `{r['tracking_uri']}` (experiment `{r['experiment']}`); "
           f"timings from device **{r['device'] or 'none'}**.\n"]
    if r["partial"]:
        out.append("> **PARTIAL REPORT.** " + "; ".join(r["partial_reasons"]) + ". The figures below do not "
                   "cover the whole training plan.\n")
    out.append("## Decision\n")
    out.append(f"**Recommendation: `{d['recommendation']}`** · confidence **{d['confidence']}**\n")
    if d.get("basis") == "projected_local" and d.get("projected_local"):
        pl = d["projected_local"]
        out.append(f"- Based on the **projection** onto the local {pl['gpu']} ({', '.join(pl['methods'])}): "
                   f"{_hours(pl['hours'])}, conservative {_hours(pl['hours_conservative'])}. The hours below were "
                   f"measured on {r['device']}; they alone would say `{d.get('measured_recommendation')}`.")
    out.append(f"- Projected total: {_hours(d['total_hours'])}; conservative (upper 95% bound + "
               f"{d['buffer']:.0%} buffer): {_hours(d['total_hours_conservative'])}.")
    out.append(f"- Thresholds: local GPU below {d['thresholds_hours']['local_max']:g} h, cloud above "
               f"{d['thresholds_hours']['cloud_min']:g} h, your choice in between.")
    if d["confidence_reasons"]:
        out.append("- What lowers confidence:")
        out += [f"  - {x}" for x in d["confidence_reasons"]]
    out.append(f"\n{d['rationale']}\n")

    out.append("## Coverage\n")
    rows = []
    for name in cov["planned"] + [m for m in r["models"] if m not in cov["planned"]]:
        m = r["models"][name]
        rows.append([name, "yes" if m["in_plan"] else "no", m["source"], m["runs"],
                     ", ".join(f"{k} {v}" for k, v in sorted(m["outcomes"].items())) or "–",
                     m["samples_used"], m.get("missing_reason", "")])
    out.append(_table(["model", "planned", "source", "runs", "outcomes", "epochs used", "why missing"], rows))
    sized = [(n, m) for n, m in r["models"].items() if m.get("size")]
    if sized:
        out.append("\nModel sizes (two sizes of one model are never pooled; only the row named after the model "
                   "enters the decision): " + "; ".join(f"`{n}` = {m['size']} ({m.get('size_reason') or '–'})"
                                                        for n, m in sized) + ".")
        stops = [f"`{n}` " + ", ".join(f"{k} {v}" for k, v in sorted(m["stop_reasons"].items()))
                 for n, m in sized if m.get("stop_reasons")]
        if stops:
            out.append("How the measurements stopped (trainer.stop): " + "; ".join(stops) + ".")

    out.append("\n## Epoch time (ms) and projection\n")
    rows = []
    for name, m in r["models"].items():
        e, p = m["epoch_time_ms"], m["projection"]
        if m["source"] == "estimate":
            rows.append([name, "estimate", "–", "–", _n(m["estimate_epoch_ms"]), "–", "–", "–", "–",
                         _n(p and p["target_epochs"], "d"), _hours(p and p["hours"]), "–"])
        elif e:
            rows.append([name, m["runs_timed"], f"{m['samples_used']} ({m['outliers_removed']} out)",
                         _n(e["cv"], ".1%"), _n(e["mean"]), f"{_ci(e['ci95_mean'])} ({e['ci95_mean_basis']})",
                         f"{_n(e['p50'])} {_ci(e['ci95_median'])}", f"{_n(e['p95'])} {_ci(e['ci95_p95'])}",
                         _n(e["p99"]), _n(p and p["target_epochs"], "d"), _hours(p and p["hours"]),
                         "–" if not p or not p["hours_ci95"] else
                         f"{_hours(p['hours_ci95'][0])} – {_hours(p['hours_ci95'][1])}"])
    out.append(_table(["model", "runs", "epochs (outliers)", "CV", "mean", "95% CI mean", "p50 [block bootstrap]",
                       "p95 [block bootstrap]", "p99", "target epochs", "hours", "hours 95% CI"], rows))
    out.append(_autocorrelation_section(r))

    out.append("\n## Memory and stability\n")
    rows = []
    for name, m in r["models"].items():
        if m["source"] != "measured":
            continue
        s = m["stability"]
        rows.append([name, f"{_n(m['peak_memory_mb'], '.0f')} MB ({m['memory_kind']})", s["loss_trend"],
                     f"{_n(s['loss_start'])} → {_n(s['loss_end'])}", s["gradient_health"],
                     "; ".join(s["warnings"]) or "none"])
    out.append(_table(["model", "peak memory", "loss trend", "loss start → end", "gradients", "warnings"], rows))

    out.append("\n## Costs\n")
    loc = cost["local"]
    out.append(f"- Local: {_hours(loc['hours'])} × {_n(loc['power_w'])} W ({loc['power_source']}) × "
               f"${loc['price_per_kwh']:g}/kWh = **{_usd(loc['usd'])}** (conservative {_usd(loc['usd_conservative'])}).\n")
    out.append(_table(["instance", "GPU", "$/h", "relative speed", "hours", "cost", "conservative cost"],
                      [[c["instance"], c["gpu"], f"{c['usd_per_hour']:g}",
                        f"{_n(c['relative_speed'], '.3g')} ({c['relative_speed_source']})", _hours(c["hours"]),
                        _usd(c["usd"]), _usd(c["usd_conservative"])] for c in cost["cloud"]]))
    if r.get("projections"):  # issue 15: per-GPU projections (analysis/projection.py)
        from trainbench.analysis.projection import markdown_section

        out.append(markdown_section(r))
    comps = r["devices"]["comparisons"]
    if comps:
        out.append("\n## Devices compared (every completed run in the experiment)\n")
        out.append(_table(["model", "reference", "ms", "device", "ms", "speed-up"],
                          [[c["model"], c["reference_device"], _n(c["reference_epoch_ms"]), c["device"],
                            _n(c["epoch_ms"]), f"{c['speedup']:.2f}×"] for c in comps]))
    out.append("\n## Runs\n")
    out.append(_table(["run", "model", "device", "outcome", "epochs", "used", "note"],
                      [[x["run_name"], x["model"], x["device"], x["outcome"], x["epochs_measured"],
                        "yes" if x["used_for_timing"] else "no",
                        "; ".join(filter(None, [x["excluded_reason"]] + x["notes"]))] for x in r["runs"]]))
    if r.get("plots"):
        out.append("\n## Plots\n")
        out += [f"![{p}]({p})" for p in r["plots"]]
    s = r["settings"]
    out.append(f"\n## Method\n\nWarmup epochs dropped; outliers marked per run with rule `{s['outliers']}`. The "
               "headline 95% interval of the mean is the t-interval of the per-run means when a model has two or "
               "more timed runs (independent runs), else batch means over one run's consecutive epochs (valid when "
               "epoch times are autocorrelated); both are built on the log scale so they stay positive. Median and "
               f"p95 intervals are circular block bootstrap ({s['bootstrap_resamples']} resamples, seed {s['seed']}). "
               "Runs that failed are listed but not timed; an interrupted run's measured epochs are used. "
               "The epoch time of a model with a validation pass (Mamba-2, TFT, TLOB) is the training pass plus "
               "the validation pass (epoch_time_ms + eval_time_ms), as an epoch of the training plan costs both. "
               "See docs/report-schema.md.\n")
    return "\n".join(out) + "\n"


# -- intervals under autocorrelation (issue 19): its own block, so other report sections merge cleanly ----


def _autocorrelation_section(r: dict[str, Any]) -> str:
    """Per measured model: autocorrelation of epoch times and which interval of the mean is the headline."""
    rows = []
    for name, m in r["models"].items():
        e, ac = m.get("epoch_time_ms"), m.get("autocorrelation")
        if m["source"] != "measured" or not e or not ac:
            continue
        rows.append([name, _n(ac["lag1_max"], ".2f"), _n(ac["tau_int_max"], ".3g"), _n(ac["ess_total"], ".0f"),
                     "yes" if m.get("runs_disagree") else "no",
                     "more seeds" if ac["recommend_more_seeds"] else "–", e.get("ci95_mean_why") or "–"])
    if not rows:
        return ""
    return ("\n### Autocorrelation and the headline interval\n\nlag-one r and the integrated autocorrelation time "
            "τ (epochs; the largest over runs) of epoch times, the effective sample size (epochs / τ, summed over "
            "runs), whether runs disagree beyond their own 95% intervals, and which interval of the mean is the "
            "headline and why.\n\n"
            + _table(["model", "lag-one r", "τ", "ESS", "runs disagree", "advice", "headline interval"], rows))


def console_summary(r: dict[str, Any], folder: Path | None = None) -> str:
    d = r["decision"]
    lines = [f"sweep {r['sweep_id']} · device {r['device']} · {len(r['runs'])} runs"
             + ("  ** PARTIAL REPORT **" if r["partial"] else "")]
    hdr = f"{'model':10s} {'source':9s} {'runs':>4s} {'epochs':>7s} {'mean ms':>10s} {'95% CI':>23s} " \
          f"{'target':>7s} {'hours':>9s}"
    lines += [hdr, "-" * len(hdr)]
    for name, m in r["models"].items():
        e, p = m["epoch_time_ms"] or {}, m["projection"] or {}
        mean = m.get("estimate_epoch_ms") if m["source"] == "estimate" else e.get("mean")
        lines.append(f"{name:10s} {m['source']:9s} {m['runs']:>4d} {m['samples_used']:>7d} {_n(mean):>10s} "
                     f"{_ci(e.get('ci95_mean')):>23s} {_n(p.get('target_epochs'), 'd'):>7s} "
                     f"{_hours(p.get('hours')):>9s}")
    pl = d.get("projected_local") if d.get("basis") == "projected_local" else None
    if pl:  # a CPU sweep deciding on the projection onto the local GPU: say so, and show the CPU hours apart
        lines.append(f"\ndecision: {d['recommendation']}  PROJECTED on {pl['gpu']}: {_hours(pl['hours'])}, "
                     f"conservative {_hours(pl['hours_conservative'])}  confidence {d['confidence']}  "
                     f"(measured on {r['device']}: {_hours(d['total_hours'])}, conservative "
                     f"{_hours(d['total_hours_conservative'])})")
    else:
        lines.append(f"\ndecision: {d['recommendation']}  total {_hours(d['total_hours'])}, conservative "
                     f"{_hours(d['total_hours_conservative'])}  confidence {d['confidence']}")
    loc = r["costs"]["local"]
    lines.append(f"local {_usd(loc['usd'])}  " + "  ".join(f"{c['instance']} {_usd(c['usd'])}"
                                                          for c in r["costs"]["cloud"]))
    lines += [f"  - {x}" for x in d["confidence_reasons"]]
    if folder is not None:
        lines.append(f"report: {folder / 'report.md'}")
    return "\n".join(lines)
