"""The whole analysis: read the sweep, compute statistics, decide, and assemble report.json (schema 1)."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis import decision as dec
from trainbench.analysis.compare import device_comparison
from trainbench.analysis.runs import (
    AnalysisError,
    RunRecord,
    connect,
    experiment_speeds,
    find_runs,
    load_runs,
)
from trainbench.analysis.stats import model_stats

SCHEMA_VERSION = 1

#: The run params of the fast-path switches (trainbench.bench.perf.FAST_PATH_KEYS; the analysis does not
#: import bench/, so they are restated here and a test keeps the two equal).
FAST_PATH_PARAMS = ("trainer.precision", "trainer.compile", "trainer.optimizer_impl")


def tracking_uri(cfg: Any) -> str:
    t = cfg.tracking
    if t.uri:
        return str(t.uri)
    if t.kind == "local":
        return f"sqlite:///{Path(cfg.paths.mlruns) / 'mlflow.db'}"
    raise AnalysisError("tracking.uri is not set: use tracking=local, tracking=server or tracking.uri=<uri>.")


def primary_device(recs: list[RunRecord], wanted: str | None) -> str | None:
    """The device whose runs the statistics use: ``analysis.device`` or the one with most completed runs."""
    if wanted:
        if not any(r.device == wanted for r in recs):
            devs = sorted({r.device for r in recs})
            raise AnalysisError(f"analysis.device={wanted!r} matches no run in this sweep; devices: {devs}")
        return wanted
    counts = Counter(r.device for r in recs if r.outcome == "completed") or Counter(r.device for r in recs)
    if not counts:
        return None
    latest = {r.device: r.start_time for r in recs}
    return max(counts, key=lambda d: (counts[d], latest.get(d, 0)))


def _peak_memory(runs: list[RunRecord], kind: str) -> float | None:
    vals = []
    for r in runs:
        v = r.metrics.get(f"peak_{kind}_mb_max")
        if v is None and f"peak_{kind}_mb" in r.series and np.isfinite(r.series[f"peak_{kind}_mb"]).any():
            v = float(np.nanmax(r.series[f"peak_{kind}_mb"]))
        if v is not None and math.isfinite(v):
            vals.append(float(v))
    return max(vals) if vals else None


def _model_entry(name: str, runs: list[RunRecord], timed: list[RunRecord], cfg: Any, in_plan: bool,
                 device: str | None, rng: np.random.Generator) -> dict[str, Any]:
    d = cfg.decision
    entry: dict[str, Any] = {"runs": len(runs), "outcomes": dict(Counter(r.outcome for r in runs)),
                             "device": device, "in_plan": in_plan, "runs_timed": len(timed)}
    if timed:
        s = model_stats(timed, cfg.analysis, rng)
        kinds = Counter(r.memory_kind for r in timed)
        kind = kinds.most_common(1)[0][0]
        target, target_src = dec.target_epochs(name, timed, dict(d.target_epochs))
        entry.update({k: s[k] for k in ("epochs_measured", "outliers_removed", "samples_used",
                                         "epoch_time_ms", "stability")})
        entry.update({"peak_memory_mb": _peak_memory(timed, kind), "memory_kind": kind,
                      "projection": dec.project_measured(s["epoch_time_ms"], target),
                      "target_epochs_source": target_src,
                      "source": "measured" if s["samples_used"] > 0 else "missing", "per_run": s["per_run"]})
        # Timings compare like with like only at the same batch size and fast-path switches (precision,
        # compile, optimiser implementation): state them, and warn where pooled runs differ.
        entry["fast_paths"] = {}
        for key in ("model.batch_size", *FAST_PATH_PARAMS):
            seen = sorted({r.params.get(key, "?") for r in timed})
            if key != "model.batch_size":
                entry["fast_paths"][key] = seen[0] if len(seen) == 1 else seen
            if len(seen) > 1:
                entry["stability"]["warnings"].append(
                    f"runs differ in {key} ({', '.join(seen)}) but are pooled; analyse them separately")
        if entry["source"] == "missing":
            entry["projection"] = None
        return entry
    entry.update({"epochs_measured": 0, "outliers_removed": 0, "samples_used": 0, "epoch_time_ms": None,
                  "peak_memory_mb": None, "memory_kind": None,
                  "stability": {"loss_trend": "unknown", "loss_start": None, "loss_end": None,
                                "gradient_health": "unknown", "warnings": []},
                  "projection": None, "source": "missing", "per_run": []})
    est = d.estimates.get(name)
    if est is not None:
        target = est.target_epochs or d.target_epochs.get(name)
        entry.update({"source": "estimate", "estimate_epoch_ms": float(est.epoch_ms),
                      "projection": dec.project_estimate(float(est.epoch_ms), target),
                      "target_epochs_source": ("decision.estimates" if est.target_epochs else
                                               "decision.target_epochs" if target else "missing")})
    return entry


def _why_missing(runs: list[RunRecord], device: str | None) -> str:
    if not runs:
        return "no run in this sweep"
    outcomes = Counter(r.outcome for r in runs)
    if not outcomes.get("completed"):
        return "no run completed (" + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())) + ")"
    if device and not any(r.device == device and r.outcome == "completed" for r in runs):
        return f"completed only on other devices than {device}"
    return "completed runs hold no per-epoch timings"


def build_report(cfg: Any, recs: list[RunRecord], sweep_id: str, uri: str,
                 speeds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """report.json as a dict (schema_version 1) from loaded runs; no I/O."""
    a, d = cfg.analysis, cfg.decision
    rng = np.random.default_rng(a.seed)
    plan = list(d.plan)
    device = primary_device(recs, a.device)
    by_model: dict[str, list[RunRecord]] = {}
    for r in recs:
        by_model.setdefault(r.model, []).append(r)

    runs_table, models, timed_all = [], {}, []
    for name in list(dict.fromkeys(plan + sorted(by_model))):
        runs = by_model.get(name, [])
        timed = []
        for r in runs:
            reason = None
            if r.outcome != "completed":
                reason = ("still RUNNING in MLflow: the job was killed without closing its run" if r.outcome ==
                          "stale" else f"outcome {r.outcome}")
                at_failure = r.metrics.get("peak_vram_mb_at_failure", r.metrics.get("peak_host_mb_at_failure"))
                if r.outcome == "oom" and at_failure is not None:
                    reason += (f" at batch {r.params.get('batch_size_resolved', r.params.get('model.batch_size'))}"
                               f", peak {at_failure:.0f} MB at failure")
            elif device and r.device != device:
                reason = f"device {r.device} (the statistics use {device})"
            elif r.measured("epoch_time_ms").size == 0:
                reason = "no per-epoch timings after warmup"
            else:
                timed.append(r)
            runs_table.append({"run_id": r.run_id, "run_name": r.run_name, "model": r.model, "device": r.device,
                               "outcome": r.outcome, "status": r.status, "job": r.tags.get("job"),
                               "epochs_measured": int(r.measured().size), "used_for_timing": reason is None,
                               "excluded_reason": reason, "series_source": r.series_source, "notes": r.notes})
        timed_all += timed
        entry = _model_entry(name, runs, timed, cfg, name in plan, device, rng)
        if entry["source"] != "measured":
            entry["missing_reason"] = _why_missing(runs, device)
        models[name] = entry

    measured = [m for m in plan if models[m]["source"] == "measured"]
    estimated = [m for m in plan if models[m]["source"] == "estimate"]
    missing = [m for m in plan if models[m]["source"] == "missing"]
    unprojected = [m for m in measured + estimated if models[m]["projection"] is None]
    total, total_c, used = dec.totals(models, plan, d.buffer)
    power_w, power_src = dec.local_power(cfg.hardware, timed_all or recs)
    comparisons = device_comparison(speeds or [], device)
    cost = dec.costs(total, total_c, power_w, power_src, cfg.hardware.price_per_kwh, d.catalogue, comparisons)
    level, reasons = dec.confidence(models, plan, d.min_epochs, missing, estimated, unprojected,
                                    power_w is not None)
    rec = dec.recommend(total_c, d.local_max_hours, d.cloud_min_hours)
    if rec == "insufficient_data":
        level = "low"
        reasons.insert(0, "no planned model has a usable timing: no decision is possible")
    decision = {"recommendation": rec, "total_hours": total, "total_hours_conservative": total_c,
                "thresholds_hours": {"local_max": d.local_max_hours, "cloud_min": d.cloud_min_hours},
                "buffer": d.buffer, "confidence": level, "confidence_reasons": reasons,
                "models_in_total": used}
    decision["rationale"] = dec.rationale(decision, cost, used, plan, device, missing)
    partial_reasons = []
    if missing:
        partial_reasons.append(f"planned models not measured: {', '.join(missing)}")
    if estimated:
        partial_reasons.append(f"planned models from estimates only: {', '.join(estimated)}")
    if rec == "insufficient_data":
        partial_reasons.append("no usable timing at all: every run failed or none was measured")
    return {
        "schema_version": SCHEMA_VERSION,
        "sweep_id": sweep_id,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tracking_uri": uri,
        "experiment": cfg.tracking.experiment,
        "device": device,
        "partial": bool(partial_reasons),
        "partial_reasons": partial_reasons,
        "settings": {"outliers": getattr(a.outliers, "value", a.outliers), "bootstrap_resamples":
                     a.bootstrap_resamples, "seed": a.seed, "min_epochs": d.min_epochs},
        "coverage": {"planned": plan, "measured": measured, "estimated": estimated, "missing": missing,
                     "complete": not missing and not estimated,
                     "missing_reasons": {m: models[m]["missing_reason"] for m in missing + estimated}},
        "models": models,
        "runs": runs_table,
        "devices": {"reference": device, "comparisons": comparisons},
        "decision": decision,
        "costs": cost,
    }


def run_analysis(cfg: Any, out_dir: str | Path | None = None, log: Any = print) -> tuple[dict[str, Any], Path]:
    """Read MLflow, analyse, write reports/<sweep_id>/ and log it back; returns (report, folder)."""
    from trainbench.analysis import report as rep

    uri = tracking_uri(cfg)
    client, exp_id = connect(uri, cfg.tracking.experiment, cfg.tracking.timeout_s)
    sweep_id, runs = find_runs(client, exp_id, str(cfg.sweep))
    recs = load_runs(client, runs, cfg.analysis.workers)
    speeds = experiment_speeds(client, exp_id)
    report = build_report(cfg, recs, sweep_id, uri, speeds)
    folder = Path(out_dir or cfg.out_dir or report_dir(cfg.paths.reports, sweep_id))
    rep.write_report(report, folder, recs if cfg.analysis.plots else None)
    if cfg.analysis.log_to_mlflow:
        report["mlflow_run_id"] = rep.log_to_mlflow(client, exp_id, report, folder)
    log(rep.console_summary(report, folder))
    return report, folder


def report_dir(reports: str | Path, name: str) -> Path:
    """``reports/<name>``, checked to stay inside ``reports/``."""
    from trainbench.tracking.names import inside

    return inside(reports, _safe(name))


def _safe(name: str) -> str:
    """A sweep id as one folder name under reports/ (never ``..``, a hidden folder or a path)."""
    from trainbench.tracking.names import safe_id

    return safe_id(name or "sweep")
