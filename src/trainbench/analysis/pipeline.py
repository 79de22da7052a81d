"""The sweep analysis: read the sweep, compute statistics, decide, and assemble report.json (docs/report-schema.md)."""

from __future__ import annotations

import datetime as dt
import math
import os
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.decision import decision as dec
from trainbench.analysis.decision.offers import for_decision
from trainbench.analysis.fields import to_json
from trainbench.analysis.plan.plan import apply_plans, hours_distribution, largest_data, windows_of
from trainbench.analysis.projection.devices import Speed, device_comparison
from trainbench.analysis.projection.gpus import load_gpus
from trainbench.analysis.projection.projection import Projections, project_report
from trainbench.analysis.projection.roofline import run_precision
from trainbench.analysis.report.plots import write_plots
from trainbench.analysis.report.record import log_analysis, tracking_uri
from trainbench.analysis.report.report import (
    console_summary,
    projection_view,
    report_dir,
    writable_folder,
    write_folder,
    write_report,
)
from trainbench.analysis.report_types import (
    LOCAL,
    SCHEMA_VERSION,
    Basis,
    Costs,
    Coverage,
    Decision,
    DeviceComparison,
    Devices,
    ModelEntry,
    ModelProjection,
    OffersSummary,
    Recommendation,
    Report,
    RunRow,
    Settings,
    Source,
)
from trainbench.analysis.runs import (
    UNSIZED,
    RunRecord,
    comparison_runs,
    experiment_speeds,
    find_runs,
    load_runs,
    open_experiment,
    workload_suffix,
)
from trainbench.analysis.statistics.contamination_report import (
    contamination_block,
    why_all_dropped,
)
from trainbench.analysis.statistics.stats import model_stats
from trainbench.analysis.words import hours_phrase
from trainbench.config.analyze import check_model_names
from trainbench.core.entrypoints import model_names as registered_models
from trainbench.core.errors import AnalysisError
from trainbench.core.vocab import (
    FAST_PATH_KEYS,
    OPEN_STATUSES,
    Outcome,
    ParamKey,
    Series,
    Summary,
    Tag,
)


def primary_device(recs: list[RunRecord], wanted: str | None) -> str | None:
    """The device whose runs the statistics use: ``analysis.device`` or the one with most completed runs."""
    if wanted:
        if not any(r.device == wanted for r in recs):
            devs = sorted({r.device for r in recs})
            raise AnalysisError(f"analysis.device={wanted!r} matches no run in this sweep; devices: {devs}")
        return wanted
    counts = Counter(r.device for r in recs if r.outcome == Outcome.COMPLETED) or Counter(r.device for r in recs)
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
                 device: str | None, rng: np.random.Generator) -> ModelEntry:
    """``models.<name>`` from the statistics of its timed runs; a model without any takes the type's defaults
    (an estimate from ``decision.estimates`` where the team gave one)."""
    d = cfg.decision
    base = {"runs": len(runs), "outcomes": dict(Counter(r.outcome for r in runs)), "device": device,
            "in_plan": in_plan, "runs_timed": len(timed)}
    if not timed:
        entry = ModelEntry(**base)
        profiles = profile_runs(runs)
        if profiles:  # profiled at this size, not trained: the projection stage gives its hours on each GPU
            target, entry.target_epochs_source = dec.target_epochs(name, profiles, dict(d.target_epochs))
            entry.source = Source.PROFILED
            entry.projection = ModelProjection(target_epochs=target, hours=None)
            return entry
        est = d.estimates.get(name)
        if est is not None:
            target = est.target_epochs or d.target_epochs.get(name)
            entry.source, entry.estimate_epoch_ms = Source.ESTIMATE, float(est.epoch_ms)
            entry.projection = dec.project_estimate(float(est.epoch_ms), target)
            entry.target_epochs_source = ("decision.estimates" if est.target_epochs else
                                          "decision.target_epochs" if target else "missing")
        return entry
    s = model_stats(timed, cfg.analysis, rng)
    entry = ModelEntry(**base, **{f.name: getattr(s, f.name) for f in fields(s)})  # every field of the timing
    kind = Counter(r.memory_kind for r in timed).most_common(1)[0][0]
    target, entry.target_epochs_source = dec.target_epochs(name, timed, dict(d.target_epochs))
    entry.peak_memory_mb, entry.memory_kind = _peak_memory(timed, kind), kind
    entry.source = Source.MEASURED if s.samples_used > 0 else Source.MISSING
    if entry.source == Source.MEASURED:
        entry.projection = dec.project_measured(s.epoch_time_ms, target)
    entry.contamination = contamination_block(timed, s.per_run, cfg.analysis)  # busy machine
    # Timings compare like with like only at the same batch size and fast-path switches (precision,
    # compile, optimiser implementation): state them, and warn where pooled runs differ.
    precisions = sorted({run_precision(r.params) for r in timed})  # what the runs trained in (auto resolved)
    entry.precision = precisions[0] if len(precisions) == 1 else precisions
    for key in (ParamKey.BATCH_SIZE, *FAST_PATH_KEYS):
        seen = sorted({r.params.get(key, "?") for r in timed})
        if key != ParamKey.BATCH_SIZE:
            entry.fast_paths[key] = seen[0] if len(seen) == 1 else seen
        if len(seen) > 1:
            entry.stability.add("pooled", f"runs differ in {key} ({', '.join(seen)}) but are pooled; analyse "
                                          "them separately")
    return entry


def profile_runs(runs: list[RunRecord]) -> list[RunRecord]:
    """The profile runs (``kind=size_profile``) that ended ``profiled``: a workload profile and a memory prediction of
    a size not trained in the sweep."""
    return [r for r in runs if r.profile_only and r.outcome == Outcome.PROFILED]


def decision_sizes(recs: list[RunRecord], wanted: str | None) -> dict[str, tuple[str, str]]:
    """{model: (the size its decision row uses, why)}.

    ``decision.size`` when set; else the size the team trains, ``reference``, wherever the model has a run of that
    workload: trained at it, trained at a size that is the same config (tag ``size_same_as``), or profiled at it
    without training (a ``kind=size_profile`` run: the CPU profile's reference-size profile); else the size the runs'
    trainer profile names (param ``trainer.size``); else the only size measured; else the size with most runs.
    Other sizes are reported as rows of their own (``<model>[<size>]``), outside the plan's total: two sizes are
    never pooled.
    """
    out: dict[str, tuple[str, str]] = {}
    by_model: dict[str, list[RunRecord]] = {}
    for r in recs:
        by_model.setdefault(r.model, []).append(r)
    team = dec.TRAINED_SIZE
    for name, runs in by_model.items():
        sizes = Counter(r.size for r in runs)
        if wanted:
            out[name] = (wanted, f"decision.size={wanted}")
            continue
        trained = [r for r in runs if not r.profile_only and team in r.sizes]
        if trained:
            at = sorted({r.size for r in trained})
            how = ("measured at it" if team in at else
                   f"measured at size {', '.join(at)}, the same workload (one config: tag size_same_as)")
            out[name] = (team, f"the size the team trains ({team}): {how}")
            continue
        if any(r.profile_only and r.size == team and r.outcome == Outcome.PROFILED for r in runs):
            out[name] = (team, f"the size the team trains ({team}): profiled without training (a kind=size_profile "
                               "run), projected from its workload profile")
            continue
        failed = [r for r in runs if r.profile_only and r.size == team]
        why_not = (f"its {team} profile run ended {failed[0].outcome}"
                   + (f" ({failed[0].tags[Tag.ERROR]})" if failed[0].tags.get(Tag.ERROR) else "")
                   if failed else f"no run or profile at size {team}")
        sizes = Counter(r.size for r in runs if not r.profile_only) or sizes
        named = Counter(r.params["trainer.size"] for r in runs if r.params.get("trainer.size"))
        profile = named.most_common(1)[0][0] if named else None
        if profile in sizes:
            out[name] = (profile, f"the size the trainer profile names (trainer.size={profile}); {why_not}")
        elif len(sizes) == 1:
            (only,) = sizes
            out[name] = (only, "the only size measured" + (f" (the profile names {profile})" if profile else ""))
        else:
            most = max(sizes, key=lambda s: (sizes[s], s))
            out[name] = (most, "the size with most runs")
    return out


def check_size_exists(recs: list[RunRecord], wanted: str | None, planned: list[str]) -> None:
    """``decision.size=<size>`` where a planned model of the sweep has neither a run of that workload nor a
    profile of it: one line naming the command that makes one (AnalysisError)."""
    if not wanted:
        return
    have = {m for r in recs if wanted in r.sizes and (not r.profile_only or r.outcome == Outcome.PROFILED)
            for m in [r.model]}
    lacking = sorted({r.model for r in recs if r.model in planned} - have)
    if lacking:
        seen = sorted({r.size for r in recs if r.model in lacking and (not r.profile_only or r.outcome ==
                                                                        Outcome.PROFILED)})
        make = (f"`python run.py -m model={','.join(lacking)} trainer=cpu` (trains the small size and profiles the "
                f"{wanted} one) or `python run.py -m model={','.join(lacking)} size={wanted}` (trains it)"
                if wanted == dec.TRAINED_SIZE else f"`python run.py -m model={','.join(lacking)} size={wanted}`")
        raise AnalysisError(f"decision.size={wanted}: no run or profile of size {wanted} for {', '.join(lacking)} "
                            f"in this sweep (measured or profiled at: {', '.join(seen) or 'nothing'}); make one "
                            f"with {make}, or choose another decision.size.")


def _why_missing(runs: list[RunRecord], device: str | None, policy: str = "auto") -> str:
    if not runs:
        return "no run in this sweep"
    outcomes = Counter(r.outcome for r in runs)
    if not outcomes.get(Outcome.COMPLETED) and not outcomes.get(Outcome.INTERRUPTED):
        n = sum(int(r.measured().size) for r in runs)
        return ("no run completed (" + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())) + ")"
                + (f"; {n} epoch(s) measured before they ended, listed in the runs table" if n else ""))
    if device and not any(r.device == device and r.outcome == Outcome.COMPLETED for r in runs):
        return f"completed only on other devices than {device}"
    done = [r for r in runs if r.outcome == Outcome.COMPLETED and (not device or r.device == device)]
    return why_all_dropped(done, policy) or "completed runs hold no per-epoch timings"


@dataclass
class _Rows:
    """The sweep's runs as report rows: one row per (model, size, ranks), the row named after the model being the
    size the decision uses on one rank, other sizes rows ``<model>[<size>]`` and runs on N ranks (``world_size``)
    rows ``<model>[world_size=N]`` / ``<model>[<size>, world_size=N]``, outside the plan (never pooled with it)."""

    by_row: dict[str, list[RunRecord]]
    size_of: dict[str, tuple[str, str, str]]  # row -> (model, size, why)
    chosen: dict[str, tuple[str, str]]  # model -> (the size its decision row uses, why)

    @classmethod
    def of(cls, recs: list[RunRecord], wanted: str | None) -> _Rows:
        chosen = decision_sizes(recs, wanted)
        rows = cls({}, {}, chosen)
        for r in recs:
            size, why = chosen[r.model]
            # the workload's identity: the size and the ranks (a 2-rank run is never pooled with a 1-rank run)
            key = r.model + workload_suffix(None if size in r.sizes else r.size, r.world_size)
            rows.by_row.setdefault(key, []).append(r)
            rows.size_of[key] = (r.model, size if key == r.model else r.size, why if key == r.model else
                                 "reported separately; not in the decision")
        return rows


def _excluded_reason(r: RunRecord, device: str | None) -> str | None:
    """Why a run's epochs do not enter the statistics; None when they do. An interrupted run keeps the epochs
    it measured (each ran to its end)."""
    if r.profile_only:  # a reference-size profile run: projected from its profile, never timed
        if r.outcome == Outcome.PROFILED:
            return (f"profiled at size {r.size}, not trained: its workload profile and memory prediction project "
                    "it onto GPUs")
        return f"profile run {r.outcome}" + (f": {r.tags[Tag.ERROR]}" if r.tags.get(Tag.ERROR) else "")
    partial = r.outcome == Outcome.INTERRUPTED and r.measured(Series.EPOCH_TIME_MS).size > 0
    if r.outcome != Outcome.COMPLETED and not partial:
        reason = ("still RUNNING in MLflow: the job was killed without closing its run" if r.outcome ==
                  Outcome.STALE else f"outcome {r.outcome}")
        if r.outcome == Outcome.INVALID:  # logged values the command line would refuse (runs.py)
            reason = f"invalid: {r.invalid_reason}"
        elif r.outcome == Outcome.IN_PROGRESS:
            reason = "in progress: its sweep's parent run is still RUNNING (analyse again when it ends)"
        at_failure = r.metrics.get(Summary.PEAK_VRAM_MB_AT_FAILURE, r.metrics.get(Summary.PEAK_HOST_MB_AT_FAILURE))
        if r.outcome == Outcome.OOM and at_failure is not None:
            reason += (f" at batch {r.params.get(ParamKey.BATCH_SIZE_RESOLVED, r.params.get(ParamKey.BATCH_SIZE))}"
                       f", peak {at_failure:.0f} MB at failure")
        return reason
    if device and r.device != device:
        return f"device {r.device} (the statistics use {device})"
    if r.measured(Series.EPOCH_TIME_MS).size == 0:
        return "no per-epoch timings after warmup"
    if partial:
        r.notes.append(f"interrupted after {r.measured().size} measured epoch(s): those are used")
    return None


def _data_size_excluded(timed: list[RunRecord], smaller: list[RunRecord]) -> dict[str, str]:
    """A sweep over data sizes is timed on the model's largest measured data; the smaller sizes' runs serve the
    epochs' data exponent only (``plan.data_alpha``)."""
    top = max((w for r in timed if (w := windows_of(r))), default=None)
    return {r.run_id: (f"data size: {windows_of(r)} windows; the timing uses the model's largest measured data "
                       f"({top} windows); its curve serves the epochs' data exponent (plan.data_alpha)")
            for r in smaller}


def _run_row(r: RunRecord, reason: str | None) -> RunRow:
    """The runs table's row of one run."""
    return RunRow(run_id=r.run_id, run_name=r.run_name, model=r.model, device=r.device, size=r.size,
                  stop_reason=r.stop_reason, outcome=r.outcome, status=r.status, job=r.tags.get(Tag.JOB),
                  epochs_measured=int(r.measured().size), used_for_timing=reason is None, excluded_reason=reason,
                  series_source=r.series_source,
                  notes=r.notes + ([f"stopped: {r.stop_reason}"] if r.stop_reason else []))


def _row_entry(name: str, rows: _Rows, runs: list[RunRecord], timed: list[RunRecord], cfg: Any, planned: list[str],
               device: str | None, rng: np.random.Generator) -> ModelEntry:
    """One row of ``models``: the model's entry, its size, and why it is missing where it is."""
    entry = _model_entry(name, runs, timed, cfg, name in planned, device, rng)
    entry.model, entry.size, entry.size_reason = rows.size_of.get(name, (name, rows.chosen.get(name, (None, ""))[0],
                                                                         ""))
    entry.stop_reasons = dict(Counter(r.stop_reason for r in runs if r.stop_reason))
    entry.epoch_time_includes_eval = any(Series.EVAL_TIME_MS in r.series for r in timed)
    if entry.source not in (Source.MEASURED, Source.PROFILED):
        a = cfg.analysis
        entry.missing_reason = _why_missing(runs, device, str(a.contaminated))
        size, why = rows.chosen.get(name, (None, ""))
        elsewhere = [k for k in rows.by_row if k.startswith(f"{name}[")]
        others = sorted({rows.size_of[k][1] for k in elsewhere if rows.size_of[k][1] != size})
        ranked = sorted(k for k in elsewhere if f"{ParamKey.WORLD_SIZE}=" in k)
        if not runs and others:
            entry.missing_reason = (f"no run at size {size} ({why}); measured only at {', '.join(others)}: set "
                                    "decision.size to decide on those")
        elif not runs and ranked:
            entry.missing_reason = (f"no 1-rank run; measured only on several ranks ({', '.join(ranked)}), which "
                                    "the decision does not pool with 1-rank runs: they calibrate the data-parallel "
                                    "projection once a 1-rank run exists")
    return entry


def _coverage(planned: list[str], entries: dict[str, ModelEntry]) -> Coverage:
    by = {k: [m for m in planned if entries[m].source == k] for k in Source}
    return Coverage(planned=planned, measured=by[Source.MEASURED], profiled=by[Source.PROFILED],
                    estimated=by[Source.ESTIMATE], missing=by[Source.MISSING],
                    complete=not by[Source.MISSING] and not by[Source.ESTIMATE],
                    missing_reasons={m: entries[m].missing_reason  # type: ignore[misc]
                                     for m in by[Source.MISSING] + by[Source.ESTIMATE]})


def _partial_reasons(cov: Coverage, decision: Decision) -> list[str]:
    out = []
    if cov.missing:
        out.append(f"planned models not measured: {', '.join(cov.missing)}")
    unplaced = dec.profiled_outside(cov.profiled, decision.models_in_total)
    if unplaced:
        out.append(f"planned models profiled, not trained, and not projected onto the decision's basis: "
                   f"{', '.join(unplaced)}")
    if cov.estimated:
        out.append(f"planned models from estimates only: {', '.join(cov.estimated)}")
    if decision.recommendation == Recommendation.INSUFFICIENT_DATA:
        out.append("no usable timing at all: every run failed or none was measured")
    return out


def _settings(cfg: Any) -> Settings:
    a, d = cfg.analysis, cfg.decision
    return Settings(outliers=str(a.outliers), bootstrap_resamples=a.bootstrap_resamples,
                    seed=a.seed, min_epochs=d.min_epochs, batches=a.batches, autocorr_max_tau=a.autocorr_max_tau,
                    contaminated=str(a.contaminated))


def build_report(cfg: Any, recs: list[RunRecord], sweep_id: str, uri: str,
                 speeds: list[Speed] | None = None) -> Report:
    """The report (report.json's types, SCHEMA_VERSION) from loaded runs; no I/O. The statistics fill the
    models' typed entries; the plan, projection and decision stages read and fill their JSON form, which the
    report's types then read back (a key without a field is an error)."""
    a, d = cfg.analysis, cfg.decision
    rng = np.random.default_rng(a.seed)
    planned = list(d.plan)
    device = primary_device(recs, a.device)
    check_size_exists(recs, getattr(d, "size", None), planned)
    rows = _Rows.of(recs, getattr(d, "size", None))
    runs_table, entries, timed_by_model = [], {}, {}
    profiled_by_model: dict[str, list[RunRecord]] = {}
    for name in list(dict.fromkeys(planned + sorted(rows.by_row))):
        runs = rows.by_row.get(name, [])
        reasons = {r.run_id: _excluded_reason(r, device) for r in runs}
        timed, smaller = largest_data([r for r in runs if reasons[r.run_id] is None])  # a sweep over data sizes
        reasons.update(_data_size_excluded(timed, smaller))
        runs_table += [_run_row(r, reasons[r.run_id]) for r in runs]
        timed_by_model[name] = timed
        entries[name] = _row_entry(name, rows, runs, timed_by_model[name], cfg, planned, device, rng)
        if entries[name].source == Source.PROFILED:  # its profile runs stand in for timed runs in the projection
            profiled_by_model[name] = profile_runs(runs)
    for name, p in apply_plans(entries, timed_by_model, cfg, rng, rows.by_row).items():
        entries[name].plan, entries[name].projection = p.plan, p.projection  # the planned hours
    cov = _coverage(planned, entries)
    timed_all = [r for t in timed_by_model.values() for r in t]
    dp_runs = _dp_runs(recs, rows)
    decision, cost, proj, offered, comparisons = _decide(cfg, entries, {**timed_by_model, **profiled_by_model},
                                                         planned, device, cov, timed_all or recs, speeds or [],
                                                         dp_runs)
    return Report(
        schema_version=SCHEMA_VERSION, sweep_id=sweep_id,
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), tracking_uri=uri,
        experiment=cfg.tracking.experiment, device=device,
        partial=bool(_partial_reasons(cov, decision)), partial_reasons=_partial_reasons(cov, decision), settings=_settings(cfg), coverage=cov,
        models=entries, runs=runs_table,
        devices=Devices(reference=device, comparisons=comparisons,
                        runs=comparison_runs(speeds or [], comparisons)),
        decision=decision, costs=cost, instances=proj.instances, projections=proj.projections,
        projections_data_parallel=proj.projections_data_parallel, cheapest=proj.cheapest,
        projection_assumptions=proj.projection_assumptions, offers=offered)


def _dp_runs(recs: list[RunRecord], rows: _Rows) -> dict[str, list[RunRecord]]:
    """Each model's completed runs on several ranks at the size its decision uses: they calibrate (and, at their
    own N and GPU, measure) the projection across GPUs; they never enter the 1-rank statistics."""
    out: dict[str, list[RunRecord]] = {}
    for r in recs:
        if r.world_size > 1 and r.outcome == Outcome.COMPLETED and r.size == rows.chosen[r.model][0]:
            out.setdefault(r.model, []).append(r)
    return out


def _decide(cfg: Any, entries: dict[str, ModelEntry], timed_by_model: dict[str, list[RunRecord]],
            planned: list[str], device: str | None, cov: Coverage, local_runs: list[RunRecord],
            speeds: list[Speed], dp_runs: dict[str, list[RunRecord]] | None = None,
            ) -> tuple[Decision, Costs, Projections, OffersSummary | None, list[DeviceComparison]]:
    """The decision and what it rests on: the totals, the projections (THE instances table), the costs (a view
    of it), the hours as a distribution, the confidence and the rationale. Each stage reads the typed entries
    and returns its own typed value, which this composes."""
    a, d = cfg.analysis, cfg.decision
    unprojected = [m for m in cov.measured + cov.profiled + cov.estimated
                   if not (entries[m].projection and entries[m].projection.target_epochs)]
    total, total_c, used = dec.totals(entries, planned, d.buffer)  # the hours measured on `device`
    power_w, power_src = dec.local_power(cfg.hardware, _local_runs(cfg.hardware, local_runs))
    comparisons = device_comparison(speeds, device)
    proj, offered = _projections(cfg, entries, timed_by_model, planned, device, comparisons, power_w, dp_runs or {})
    # THE instances table (proj.instances): the decision rests on its local row, the costs are a view of it
    local = proj.local()
    cost = dec.costs(proj.instances, power_w, power_src, cfg.hardware.price_per_kwh,
                     {m: entries[m].projection.hours if entries[m].projection else None for m in planned})
    decision = dec.decide(local, proj.on(LOCAL), total, total_c, used, entries, device, d)
    distribution_note = _hours_as_distribution(decision, entries, proj, d, a.seed)  # the hours as a distribution
    decision.conservative_unbounded = dec.unbounded_models(entries, decision)
    decision.headline = dec.headline(entries, list(decision.models_in_total), device)
    decision.confidence, reasons = dec.confidence(entries, planned, d.min_epochs, cov.missing, cov.estimated,
                                                  unprojected, power_w is not None, decision,
                                                  getattr(d, "size", None))
    decision.confidence_reasons, decision.confidence_reason_kinds = [r.text for r in reasons], reasons
    decision.data_parallel = dec.data_parallel_advice(proj, planned, d)
    decision.rationale = (dec.rationale(decision, cost, planned, device, cov.missing) + distribution_note
                          + _projection_rationale(proj, cfg.hardware, device) + _unbounded_note(decision)
                          + dec.data_parallel_rationale(decision.data_parallel))
    return decision, cost, proj, offered, comparisons


def _unbounded_note(decision: Decision) -> str:
    unbounded = decision.conservative_unbounded
    if not unbounded:
        return ""
    return (f" The conservative total cannot bound {', '.join(unbounded)}: the data do not resolve "
            f"{'its' if len(unbounded) == 1 else 'their'} interval of the mean, so it counts "
            f"{'its' if len(unbounded) == 1 else 'their'} central hours.")


def _local_runs(hardware: Any, runs: list[RunRecord]) -> list[RunRecord]:
    """The runs measured on the local machine, whose NVML power may price the local electricity: on the card
    hardware= names (a GPU entry), else every run (hardware=auto/cpu: the sweep's machine is the local one)."""
    spec = load_gpus().get(getattr(hardware, "name", None))
    return runs if spec is None else [r for r in runs if spec.matches(r.device)]


def _hours_as_distribution(decision: Decision, models: dict[str, ModelEntry], proj: Projections, d: Any,
                           seed: int) -> str:
    """The hours as a distribution on the basis the decision rests on (analysis/plan/plan.py, montecarlo.py): the
    local instance's row when the decision rests on it (a projection or scaling onto it is a factor of its own;
    measured there, the measured interval alone), else the hours measured on the sweep's device. With
    ``decision.recommend_by=probability`` the recommendation follows the probabilities. Fills the decision's
    distribution fields; returns the sentence the rationale gets."""
    used = list(decision.models_in_total)
    local, gpus = None, 1
    if decision.on_local and decision.local_instance.basis not in (None, Basis.MEASURED):
        local = {p.model: p for p in proj.on(LOCAL)}
        gpus = int(proj.local().gpus or 1)
    assumed = [m for m in used if models[m].source != Source.ESTIMATE and models[m].size
               and models[m].size not in (dec.TRAINED_SIZE, UNSIZED, getattr(d, "size", None))]
    withheld = (f"the total rests on size {', '.join(sorted({str(models[m].size) for m in assumed}))} for "
                f"{', '.join(assumed)}, which the team does not train (decision.size is not set): profile or measure "
                f"the {dec.TRAINED_SIZE} size, or set decision.size if that size is what you will train"
                if assumed else None)
    dist = hours_distribution(models, used, d, seed, local, gpus, withheld)
    decision.hours_median, decision.hours_interval90 = dist.hours_median, dist.hours_interval90
    decision.p_within_24h, decision.p_over_48h = dist.p_within_24h, dist.p_over_48h
    decision.probability_thresholds_hours = dist.probability_thresholds_hours
    decision.probabilities_withheld, decision.uncertainty_drivers = dist.probabilities_withheld, dist.uncertainty_drivers
    decision.distribution_models, decision.distribution_left_out = dist.distribution_models, dist.distribution_left_out
    decision.recommendation_probabilistic = dist.recommendation_probabilistic
    decision.probability_levels = dist.probability_levels
    decision.hours_basis = decision.basis or Basis.MEASURED
    rec = dist.recommendation_probabilistic
    if not used or dist.hours_median is None:
        return ""
    lo, hi = dist.hours_interval90  # type: ignore[misc]
    drv = dist.uncertainty_drivers["dominant"]
    probs = (f"no probabilities: {withheld}" if withheld else
             f"P(under {d.local_max_hours:g} h) = {dist.p_within_24h:.0%}, P(over {d.cloud_min_hours:g} h) = "
             f"{dist.p_over_48h:.0%}")
    note = (f" As a distribution ({decision.hours_basis}), the total is {hours_phrase(dist.hours_median)} "
            f"(90% interval {hours_phrase(lo)} to {hours_phrase(hi)}); {probs}"
            + (f"; the uncertainty is dominated by {drv}." if drv else "."))
    if d.recommend_by == "probability" and rec != Recommendation.INSUFFICIENT_DATA and \
            decision.recommendation != Recommendation.INSUFFICIENT_DATA:
        if rec != decision.recommendation:
            decision.recommendation_conservative = decision.recommendation
            note += (f" The recommendation follows these probabilities ({rec}: local_gpu when the first is at "
                     f"least {d.p_local:.0%}, cloud when the second is at least {d.p_cloud:.0%}), not the "
                     f"conservative figure's {decision.recommendation_conservative}.")
        decision.recommendation = rec
    return note


def _projections(cfg: Any, models: dict[str, ModelEntry], timed_by_model: dict[str, list[RunRecord]], planned: list[str],
                 device: str | None, comparisons: list[DeviceComparison], power_w: float | None,
                 dp_runs: dict[str, list[RunRecord]] | None = None) -> tuple[Projections, OffersSummary | None]:
    """The projection blocks (analysis/projection/projection.py): projections, THE instances table, cheapest;
    and where the cloud prices come from."""
    gpus = load_gpus()
    wanted = list(getattr(cfg, "project", None) or [])
    unknown = [g for g in wanted if g not in gpus]
    if unknown:
        raise AnalysisError(f"project={','.join(unknown)}: no such GPU entry; choose from {', '.join(gpus)} "
                            "(conf/hardware/*.yaml with peak_tflops and memory_gbps).")
    local_usd = None if power_w is None else power_w / 1000 * cfg.hardware.price_per_kwh
    d = cfg.decision
    bad = [f"decision.catalogue.{k}.gpu={inst.gpu!r}" for k, inst in enumerate(d.catalogue) if inst.gpu not in gpus]
    if bad:
        raise AnalysisError(f"{', '.join(bad)}: not a GPU entry of conf/hardware; use one of {', '.join(gpus)} "
                            "(or add conf/hardware/<entry>.yaml with gpu, peak_tflops, memory_gbps, vram_mb).")
    offers, offered = for_decision(d, gpus)  # decision.offers (analysis/decision/offers.py), then the quoted prices
    return (project_report(models, timed_by_model, planned, device, comparisons, [*offers, *d.catalogue],
                           cfg.hardware, local_usd, (d.local_max_hours, d.cloud_min_hours), gpus, wanted,
                           precision=_projection_precision(cfg), buffer=d.buffer, dp_runs=dp_runs,
                           data_parallel=int(getattr(getattr(cfg, "projection", None), "data_parallel", 1) or 1)),
            offered)


def _projection_view(cfg: Any, report: Report) -> str | None:
    """`analyze.py hardware=<gpu>` / `project=<gpu>,<gpu>`: per-model projections side by side."""
    only = list(getattr(cfg, "project", None) or [])
    if any(i.instance == LOCAL and i.local_kind == "gpu entry" for i in report.instances):
        only = [LOCAL, *only]
    return projection_view(report, only) if only else None


def _projection_rationale(proj: Projections, hardware: Any, device: str | None) -> str:
    """The cheapest instance within each threshold (from the instances table, as the costs are)."""
    s = ""
    if not any(p.hours is not None for p in proj.projections if p.instance != LOCAL):
        return s + (" No projection to other GPUs: the runs hold no workload profile (trainer.profile_workload)."
                    if proj.projections else "")
    for c in proj.cheapest:
        if c.instance:
            across = f", each model across {c.data_parallel} GPUs" if (c.data_parallel or 1) > 1 else ""
            s += (f" Cheapest instance projected to finish the plan within {c.within_hours:g} h: {c.instance} "
                  f"({c.gpu}{across}), about {hours_phrase(c.wall_hours)} for ${c.usd:.4g}.")
        else:
            s += f" No cheapest instance within {c.within_hours:g} h: {c.why_none}."
    return s


#: A run left open under a sweep's parent still RUNNING counts as in progress until nothing was logged to it
#: (its start, its last per-epoch metric) for this long and for 10 of its longest epochs: past both, the sweep is
#: taken for killed (no process ends its parent then) and the run is ``stale``.
IN_PROGRESS_MAX_SILENCE_H = 24.0


def mark_in_progress(client: Any, recs: list[RunRecord], now_ms: int | None = None) -> None:
    """A run left open (``stale``) whose sweep's parent run is still RUNNING belongs to a sweep that is still
    going: it is ``in_progress``, not a job killed without closing its run. It stays ``stale`` (with a note why)
    when the parent is closed, missing or unreadable; when the parent names the sweep process (tags sweep_host,
    sweep_pid), on this host, and that process is gone (a SIGKILLed sweep never closes its parent); or when
    nothing was logged to the run for :data:`IN_PROGRESS_MAX_SILENCE_H` hours and 10 of its longest epochs."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    now_ms = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000) if now_ms is None else now_ms
    parents: dict[str, tuple[bool, str | None]] = {}
    for r in recs:
        parent = r.tags.get(MLFLOW_PARENT_RUN_ID)
        if r.outcome != Outcome.STALE or not parent:
            continue
        if parent not in parents:
            try:
                run = client.get_run(parent)
                parents[parent] = (run.info.status in OPEN_STATUSES, _sweep_process_gone(run.data.tags))
            except Exception:  # noqa: BLE001 - a parent that cannot be read proves nothing: the run stays stale
                parents[parent] = (False, None)
        running, gone = parents[parent]
        if not running:
            continue
        if gone:
            r.notes.append(f"its sweep's parent run is still RUNNING but {gone}: the sweep was killed")
            continue
        silent_h = (now_ms - _last_logged_ms(client, r)) / 3.6e6
        longest = float(np.nanmax(r.series[Series.EPOCH_TIME_MS])) if np.isfinite(
            r.series.get(Series.EPOCH_TIME_MS, np.empty(0))).any() else 0.0
        if silent_h > max(IN_PROGRESS_MAX_SILENCE_H, 10 * longest / 3.6e6):
            r.notes.append(f"its sweep's parent run is still RUNNING but nothing was logged to this run for "
                           f"{silent_h:.0f} h (over {IN_PROGRESS_MAX_SILENCE_H:g} h): the sweep was killed")
            continue
        r.outcome = Outcome.IN_PROGRESS


def _sweep_process_gone(tags: dict[str, str]) -> str | None:
    """Why the sweep process named by a parent run's tags is known to be gone, or None (alive, another host, or
    not named: a parent written before the tags)."""
    import socket

    host, pid = tags.get(Tag.SWEEP_HOST), tags.get(Tag.SWEEP_PID)
    if not host or not pid or not pid.isdigit() or host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return f"its sweep process (pid {pid} on {host}) is gone"
    except (PermissionError, OverflowError, OSError):
        return None  # alive under another user, or not a pid: proves nothing
    return None


def _last_logged_ms(client: Any, r: RunRecord) -> int:
    """When the run last logged something: its newest per-epoch metric, else its start."""
    last = r.start_time
    try:
        for m in client.get_metric_history(r.run_id, Series.EPOCH_TIME_MS):
            last = max(last, int(m.timestamp))
    except Exception:  # noqa: BLE001 - unreadable history: the start is what is known
        pass
    return last


def run_analysis(cfg: Any, out_dir: str | Path | None = None, log: Any = print) -> tuple[dict[str, Any], Path]:
    """Read MLflow, analyse, write reports/<sweep_id>/ and log it back; returns (report.json's content, with
    ``mlflow_run_id`` when logged, and the folder)."""
    uri = tracking_uri(cfg)
    client, exp_id = open_experiment(cfg.tracking, uri)
    sweep_id, runs = find_runs(client, exp_id, str(cfg.sweep))
    recs = load_runs(client, runs, cfg.analysis.workers)
    mark_in_progress(client, recs)
    speeds = experiment_speeds(client, exp_id)
    check_model_names(cfg.decision, {*registered_models(), *(r.model for r in recs),
                                     *(s["model"].split("[", 1)[0] for s in speeds)})
    report = build_report(cfg, recs, sweep_id, uri, speeds)
    folder = writable_folder(Path(out_dir or cfg.out_dir or report_dir(cfg.paths.reports, sweep_id)))
    write_folder(folder, lambda tmp: write_report(report, tmp, write_plots(report, recs, tmp) if cfg.analysis.plots
                                                  else []))
    out = to_json(report)
    if cfg.analysis.log_to_mlflow:
        out["mlflow_run_id"] = log_analysis(client, exp_id, report, folder)
    log(console_summary(report, folder))
    view = _projection_view(cfg, report)
    if view:
        log(view)
    return out, folder


def _projection_precision(cfg: Any) -> str:
    """``projection.precision`` (auto when the config has no projection section)."""
    return str(getattr(getattr(cfg, "projection", None), "precision", "auto") or "auto")
