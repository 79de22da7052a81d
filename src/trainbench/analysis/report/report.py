"""Write the reports: the sweep analysis (report.json per docs/report-schema.md, report.md, the console
summary, the projection view) and the sweep comparison (compare.json, compare.md, its console table).

Every text the analysis shows lives here; the plots are analysis/report/plots.py, logging a report folder back to
MLflow is analysis/report/record.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.fields import from_json, to_json
from trainbench.analysis.projection import host_floor
from trainbench.analysis.report.method import method_sentences
from trainbench.analysis.report.reasons import reason_kinds
from trainbench.analysis.report_types import (
    LOCAL,
    Basis,
    Decision,
    Instance,
    ModelProjection,
    Plan,
    ProjectionRow,
    Report,
    Source,
)
from trainbench.analysis.statistics.contamination_report import summary_lines as contamination_lines
from trainbench.analysis.statistics.timing import EpochTime
from trainbench.core.safe_text import md_cell, md_code, md_text, term
from trainbench.core.vocab import ParamKey, ReportKey


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


def write_json(obj: dict[str, Any], path: Path) -> Path:
    """``obj`` as strict JSON (NaN/inf as null, numpy scalars as numbers), indented."""
    return atomic_write_text(path, json.dumps(clean(obj), indent=2, allow_nan=False) + "\n")


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: a temporary file beside it, renamed over it (a full
    disk or a crash mid-write leaves the previous file, never half of the new one)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write(path: Path, write: Any) -> Path:
    """``write(tmp)`` into a temporary file beside ``path``, then renamed over ``path`` (see
    :func:`atomic_write_text`); the temporary file is removed when writing fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def writable_folder(folder: Path) -> Path:
    """``folder``, created if missing and checked writable before anything is written there or logged;
    else :class:`~trainbench.core.errors.AnalysisError` naming the folder and the fix, in one line."""
    from trainbench.core.errors import AnalysisError

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as e:
        raise AnalysisError(f"cannot write the report folder {folder} ({e.strerror or type(e).__name__}): make "
                            f"it writable, or write elsewhere with paths.reports=<folder> or out_dir=<folder>."
                            ) from None
    return folder


def write_folder(folder: Path, write: Callable[[Path], Any]) -> Any:
    """Every file of a report folder written whole or not at all: ``write(staging)`` writes them into a hidden
    staging folder inside ``folder`` and, once all are written, they are renamed into ``folder`` (a rename needs no
    space); when writing fails the staging folder is removed and ``folder`` keeps what it held. A full disk or a
    file that cannot be written is :class:`~trainbench.core.errors.AnalysisError` naming the folder and the fix, in
    one line. Returns what ``write`` returns."""
    from trainbench.core.errors import AnalysisError

    staging = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
        out = write(staging)
        for f in sorted(staging.iterdir()):
            os.replace(f, folder / f.name)
    except OSError as e:
        raise AnalysisError(f"cannot write the report into {folder} ({e.strerror or type(e).__name__}); nothing of "
                            "it was written: free space there (or make it writable) and analyse again, or write "
                            "elsewhere with out_dir=<folder>.") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return out


def write_report(report: Report | dict[str, Any], folder: Path, plots: Iterable[Path] = ()) -> list[Path]:
    """report.json (the report's serialisation) and report.md into ``folder``; ``plots``: the PNGs already
    written there (analysis/report/plots.py), listed in both."""
    folder.mkdir(parents=True, exist_ok=True)
    report = typed(report)
    report.plots = [Path(p).name for p in plots]
    md = atomic_write_text(folder / "report.md", markdown(report))
    return [write_json(to_json(report), folder / "report.json"), md]


def report_dir(reports: str | Path, name: str) -> Path:
    """``reports/<name>``, checked to stay inside ``reports/``."""
    from trainbench.core.errors import AnalysisError
    from trainbench.core.safe_names import inside

    name = safe_name(name)
    link = Path(reports) / name
    if link.is_symlink():  # never written through: the link could point anywhere
        raise AnalysisError(f"the report folder {link} is a symbolic link (to {os.readlink(link)}); a report is "
                            "never written through a link: remove the link (a report folder is a plain folder), "
                            "or write elsewhere with out_dir=<folder>.")
    return inside(reports, name)


def safe_name(name: str) -> str:
    """A sweep id as one folder name under reports/ (never ``..``, a hidden folder or a path)."""
    from trainbench.core.safe_names import safe_id

    return safe_id(name or "sweep")


# --------------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------------


def _n(x: Any, fmt: str = ".4g") -> str:
    return "–" if x is None else format(x, fmt)


def _ci(ci: Any, fmt: str = ".4g") -> str:
    return "–" if not ci else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _hours(h: Any, big: str = ".2f") -> str:
    if h is None:
        return "–"
    if h < 1 / 60:
        return f"{h * 3600:.3g} s"
    return f"{h * 60:.3g} min" if h < 1 else f"{h:{big}} h"


def _usd(x: Any) -> str:
    return "–" if x is None else (f"${x:.4f}" if x < 1 else f"${x:,.2f}")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def typed(r: Report | dict[str, Any]) -> Report:
    """The typed report of ``r`` (report.json's content read back, or the report itself)."""
    return r if isinstance(r, Report) else from_json(Report, r)


def _interval(e: EpochTime | None) -> str:
    """The headline interval of the mean as shown: its bounds, ``unresolved`` where the data cannot resolve it."""
    if e is None:
        return "–"
    return "unresolved" if not e.ci95_mean_resolved else _ci(e.ci95_mean)


def markdown(r: Report | dict[str, Any]) -> str:
    """report.md: the decision and the figure it rests on first, then coverage, epoch times, the plan, costs,
    projections, the per-model detail, the runs and the Method."""
    r = typed(r)
    out = [f"# Training-time report: sweep `{md_code(r.sweep_id)}`\n",
           f"Generated {r.generated_at} from `{md_code(r.tracking_uri)}` (experiment `{md_code(r.experiment)}`); "
           f"timings from device **{md_text(r.device or 'none')}**.\n"]
    if r.partial:
        out.append("> **PARTIAL REPORT.** " + "; ".join(md_text(x) for x in r.partial_reasons) + ". The figures "
                   "below do not cover the whole training plan.\n")
    out += [decision_section(r), coverage_section(r), epoch_time_section(r), plan_section(r), costs_section(r)]
    if r.projections:  # per-GPU projections (analysis/projection/projection.py)
        out.append(projection_section(r))
    out += [devices_section(r), detail_section(r), runs_section(r)]
    if r.plots:
        out.append("\n## Plots\n")
        out += [f"![{p}]({p})" for p in r.plots]
    out.append("\n## Method\n\n" + " ".join(md_text(s) for s in method_sentences(r)) + "\n")
    return "\n".join(x for x in out if x) + "\n"


def _total_line(d: Decision) -> str:
    rng = d.total_hours_range or [None, None]
    s = (f"{_hours(d.total_hours)} [{_hours(rng[0])}, {_hours(rng[1])}]; conservative (slow end + {d.buffer:.0%} "
         f"buffer): {_hours(d.total_hours_conservative)}")
    if d.conservative_unbounded:
        s += f", which cannot bound {', '.join(d.conservative_unbounded)} (interval unresolved: central hours)"
    return s


def decision_section(r: Report) -> str:
    """The decision, the figure it rests on, what lowers confidence (one line per kind) and the rationale."""
    d = r.decision
    loc = d.local_instance
    out = ["## Decision\n", f"**The answer {md_text(d.headline)}.**\n",
           f"**Recommendation: `{d.recommendation}`** · confidence **{d.confidence}**\n",
           f"- Rests on: **{md_text(d.basis)}** (the local instance `{loc.gpu}`"
           + ("" if d.on_local else ": not used, see the basis") + f"): total {_total_line(d)}."]
    md = d.measured_device
    if d.on_local and md.total_hours is not None and loc.basis != Basis.MEASURED:
        out.append(f"- Measured on {md_text(md.device)}: {_hours(md.total_hours)}, conservative "
                   f"{_hours(md.total_hours_conservative)} (alone: `{md.recommendation}`).")
    out.append(f"- Thresholds: local GPU below {d.thresholds_hours['local_max']:g} h, cloud above "
               f"{d.thresholds_hours['cloud_min']:g} h, your choice in between.")
    kinds = reason_kinds(r)
    if kinds:
        out.append("- What lowers confidence (each kind once; the per-model detail has the words):")
        out += [f"  - {md_text(k.line())}" for k in kinds]
    out.append(f"\n{md_text(d.rationale)}\n")
    return "\n".join(out)


def coverage_section(r: Report) -> str:
    cov = r.coverage
    rows = []
    for name in cov.planned + [m for m in r.models if m not in cov.planned]:
        m = r.models[name]
        rows.append([md_cell(name), "yes" if m.in_plan else "no", m.source, m.runs,
                     md_cell(", ".join(f"{k} {v}" for k, v in sorted(m.outcomes.items())) or "–"),
                     m.samples_used, md_cell(m.missing_reason or "")])
    out = ["## Coverage\n",
           _table(["model", "planned", "source", "runs", "outcomes", "epochs used", "why missing"], rows)]
    busy = contamination_lines(r)  # measured on a busy machine (analysis/statistics/contamination_report.py)
    if busy:
        out.append("\n**Machine load during the measurement:**\n")
        out += [f"- {x}" for x in busy]
    sized = [(n, m) for n, m in r.models.items() if m.size]
    if sized:
        out.append("\nModel sizes (two sizes of one model are never pooled; only the row named after the model "
                   "enters the decision): " + "; ".join(f"`{md_code(n)}` = {md_text(m.size)} "
                                                        f"({md_text(m.size_reason or '–')})" for n, m in sized) + ".")
        stops = [f"`{md_code(n)}` " + md_text(", ".join(f"{k} {v}" for k, v in sorted(m.stop_reasons.items())))
                 for n, m in sized if m.stop_reasons]
        if stops:
            out.append("How the measurements stopped (trainer.stop): " + "; ".join(stops) + ".")
    return "\n".join(out)


def epoch_time_section(r: Report) -> str:
    """Epoch time and the hours on the sweep's device, per model; unresolved intervals with their reason."""
    rows = []
    for name, m in r.models.items():
        e, p = m.epoch_time_ms, m.projection
        target, hours = (p.target_epochs, p.hours) if p else (None, None)
        if m.source == Source.ESTIMATE:
            rows.append([md_cell(name), Source.ESTIMATE, "–", "–", _n(m.estimate_epoch_ms), "–", "–", "–", "–",
                         _n(target, "d"), _hours(hours), "–"])
        elif e:
            rows.append([md_cell(name), m.runs_timed, f"{m.samples_used} ({m.outliers_removed} out)", _n(e.cv, ".1%"),
                         _n(e.mean), f"{_interval(e)} ({e.ci95_mean_basis})",
                         f"{_n(e.p50)} {_ci(e.ci95_median)}", f"{_n(e.p95)} {_ci(e.ci95_p95)}", _n(e.p99),
                         _n(target, "d"), _hours(hours),
                         "–" if not p or not p.hours_ci95 else f"{_hours(p.hours_ci95[0])} – {_hours(p.hours_ci95[1])}"])
    out = [f"\n## Epoch time (ms) and hours on {md_text(r.device or 'the sweep device')}\n",
           _table(["model", "runs", "epochs (outliers)", "CV", "mean", "95% CI mean", "p50 [block bootstrap]",
                   "p95 [block bootstrap]", "p99", "target epochs", "hours", "hours 95% CI"], rows)]
    unresolved = [(n, m.epoch_time_ms.ci95_mean_unresolved) for n, m in r.models.items()
                  if m.epoch_time_ms and not m.epoch_time_ms.ci95_mean_resolved]
    if unresolved:
        out.append("\n" + "\n".join(f"- `{md_code(n)}`: interval of the mean **unresolved**: {md_text(why)}."
                                    for n, why in unresolved))
    return "\n".join(out)


def detail_section(r: Report) -> str:
    """The per-model detail: memory and stability, every warning in full, and the autocorrelation."""
    rows = []
    for name, m in r.models.items():
        if m.source != Source.MEASURED:
            continue
        s = m.stability
        rows.append([md_cell(name), f"{_n(m.peak_memory_mb, '.0f')} MB ({md_cell(m.memory_kind)})", s.loss_trend,
                     f"{_n(s.loss_start)} → {_n(s.loss_end)}", s.gradient_health])
    if not rows:
        return ""
    out = ["\n## Per-model detail\n",
           _table(["model", "peak memory", "loss trend", "loss start → end", "gradients"], rows)]
    for name, m in r.models.items():
        if m.source == Source.MEASURED and m.stability.warnings:
            out.append(f"\n**{md_text(name)}**\n")
            out += [f"- {md_text(w)}" for w in m.stability.warnings]
    out.append(_autocorrelation_section(r))
    return "\n".join(out)


def devices_section(r: Report) -> str:
    comps = r.devices.comparisons
    if not comps:
        return ""
    return ("\n## Devices compared (every completed run in the experiment)\n\n"
            + _table(["model", "reference", "ms", "device", "ms", "speed-up"],
                     [[md_cell(c.model), md_cell(c.reference_device), _n(c.reference_epoch_ms),
                       md_cell(c.device), _n(c.epoch_ms), f"{c.speedup:.2f}×"] for c in comps])
            + _speed_runs_line(r))


def runs_section(r: Report) -> str:
    return "\n## Runs\n\n" + _table(
        ["run", "model", "device", "outcome", "epochs", "used", "note"],
        [[md_cell(x.run_name), md_cell(x.model), md_cell(x.device), md_cell(x.outcome), x.epochs_measured,
          "yes" if x.used_for_timing else "no", md_cell("; ".join(filter(None, [x.excluded_reason] + x.notes)))]
         for x in r.runs])


def _speed_runs_line(r: Report) -> str:
    """Which runs the devices table read (it reads other sweeps' completed runs): each by id and sweep."""
    runs = r.devices.runs
    if not runs:
        return ""
    return ("\nSpeeds read from " + str(len(runs)) + " completed run(s): "
            + ", ".join(f"`{md_code(x.run_id)}` (sweep `{md_code(x.sweep_id)}`, "
                        f"{md_text(x.device)})" for x in runs) + ".\n")


def _autocorrelation_section(r: Report) -> str:
    """Per measured model: autocorrelation of epoch times and which interval of the mean is the headline."""
    rows = []
    for name, m in r.models.items():
        e, ac = m.epoch_time_ms, m.autocorrelation
        if m.source != Source.MEASURED or not e or not ac:
            continue
        rows.append([name, _n(ac.lag1_max, ".2f"), _n(ac.tau_int_max, ".3g"), _n(ac.ess_total, ".0f"),
                     "yes" if m.runs_disagree else "no", "more seeds" if ac.recommend_more_seeds else "–",
                     e.ci95_mean_why or "–"])
    if not rows:
        return ""
    return ("\n### Autocorrelation and the headline interval\n\nlag-one r and the integrated autocorrelation time "
            "τ (epochs; the largest over runs) of epoch times, the effective sample size (epochs / τ, summed over "
            "runs), whether runs disagree beyond their own 95% intervals, and which interval of the mean is the "
            "headline and why.\n\n"
            + _table(["model", "lag-one r", "τ", "ESS", "runs disagree", "advice", "headline interval"], rows))


def instance_label(i: Instance) -> str:
    """An instances row's name: the instance, and ``×N per model`` for a row training each model across N GPUs
    (the same instance's rows differ by that)."""
    n = i.data_parallel or 1
    return i.instance + (f" ×{n} per model" if n > 1 else "")


def costs_section(r: Report) -> str:
    """report.md's costs: the instances table (one cost per instance), as the costs block and the decision
    read it."""
    loc = r.costs.local
    out = ["\n## Costs\n",
           "One table, one cost per instance: hours one model after another (serial) and in parallel, one model "
           "per GPU (wall); cost = wall hours x the whole instance's hourly price (local: the card's power x the "
           "tariff). Basis: `measured`, `scaled` (from a measured GPU), `projected` (roofline), `estimate`.\n"]
    if loc.usd is not None:
        out.append(f"- Local ({loc.gpu}, {md_text(loc.basis)}): {_hours(loc.hours)} × {_n(loc.power_w)} W "
                   f"({md_text(loc.power_source)}) × ${loc.price_per_kwh:g}/kWh = **{_usd(loc.usd)}** "
                   f"(conservative {_usd(loc.usd_conservative)}).\n")
    else:
        out.append(f"- Local ({loc.gpu}): not priced: {loc.why_unpriced}.\n")
    rows = []
    for i in r.instances:
        if i.usd_per_hour is None and i.instance != LOCAL:
            continue
        rng, urng = i.wall_hours_range, i.usd_range
        spot = i.spot_usd_per_hour
        rows.append([instance_label(i), f"{i.gpu}" + (f" ×{i.gpus}" if i.gpus > 1 else ""),
                     f"{i.gpus_used}/{i.gpus}", "–" if i.usd_per_hour is None else f"{i.usd_per_hour:.4g}"
                     + (f" ({i.region})" if i.region else ""),
                     "–" if spot is None or i.spot else f"{spot:.4g} ({i.spot_region})",
                     _hours(i.hours_serial),
                     f"{_hours(i.wall_hours)}" + (f" [{_hours(rng[0])}, {_hours(rng[1])}]" if rng else ""),
                     f"{_usd(i.usd)}" + (f" [{_usd(urng[0])}, {_usd(urng[1])}]" if urng else ""),
                     md_cell(i.basis or "–"), "yes" if i.complete else "no: " + ", ".join(i.missing)])
    out.append(_table(["instance", "GPU", "GPUs used", "$/h (region)", "spot $/h (region)", "hours serial",
                       "wall hours [range]", "cost [range]", "basis", "all models"], rows))
    out += offers_lines(r)
    return "\n".join(out)


def offers_lines(r: Report) -> list[str]:
    """report.md's account of the cloud prices (report.offers): their source and date, what was left out."""
    o = r.offers
    if o is None:
        return ["\nPrices: only the quoted instances of decision.catalogue (decision.offers=none).\n"]
    quoted = (f" Quoted prices (decision.catalogue, their own dates): {md_text(', '.join(o.quoted))}." if o.quoted
              else "")
    out = [f"\nPrices: {md_text(o.described)}" + (f", read {o.read}" if o.read else "")
           + f" (decision.offers={md_text(o.source)}): on-demand at each instance type's cheapest region, spot in "
           f"its own column; each row's source and date in the projection table's `$/h (as of)`. {o.considered} priced instances considered "
           f"(of each cloud, GPU and GPU count in {o.gpu_counts} the cheapest"
           + (", and those with a spot price also at it" if o.spot else "") + f") of {o.offers} offers read; "
           f"{o.not_projected} not projected, their GPU having no conf/hardware entry"
           + (f" ({md_text(', '.join(o.not_projected_gpus))})" if o.not_projected_gpus else "")
           + (f"; {o.other_gpu_counts} of other GPU counts" if o.other_gpu_counts else "")
           + f". Catalogue rows: {md_text(o.screened_line)}.{quoted}\n"]
    if o.spot:
        out.append(f"- Spot rows `(spot)`: interruptible instances; their conservative hours and cost include a "
                   f"{o.restart_allowance:.0%} restart allowance (decision.spot_restart_allowance, an assumption).\n")
    out += [f"- GPU not told: {md_text(n)}.\n" for n in o.identity_notes]
    return out


#: The console's cost line names at most this many instances (the local one, then the cheapest).
CONSOLE_COSTS = 8


def console_summary(r: Report | dict[str, Any], folder: Path | None = None) -> str:
    """The console: the decision and the figure it rests on first, what lowers confidence once per kind, the
    plan, then the per-model table (its hours are the sweep device's) and the busy-machine lines."""
    r = typed(r)
    d = r.decision
    lines = [f"answer: {term(d.headline)}",
             f"decision: {d.recommendation}  confidence {d.confidence}  rests on: {term(d.basis)}",
             f"  total {term(_total_line(d))}"]
    md = d.measured_device
    if d.on_local and md.total_hours is not None and d.local_instance.basis != Basis.MEASURED:
        lines.append(f"  (measured on {term(md.device)}: {_hours(md.total_hours)}, conservative "
                     f"{_hours(md.total_hours_conservative)})")
    priced = [i for i in r.instances if i.usd_per_hour is not None]
    if len(priced) > CONSOLE_COSTS:  # the local row, then the cheapest of the many cloud offers
        rest = sorted((i for i in priced if i.instance != LOCAL and i.usd is not None),
                      key=lambda i: i.usd)  # those without hours (not projected) are in report.md
        local = [i for i in priced if i.instance == LOCAL]
        shown = local + rest[:CONSOLE_COSTS - len(local)]
        more = f"  (+{len(priced) - len(shown)} more in report.md)"
    else:
        shown, more = priced, ""
    lines.append("cost  " + "  ".join(f"{instance_label(i)} {_usd(i.usd)}" for i in shown) + more)
    if r.offers is not None:
        lines.append(f"  prices: {term(r.offers.described)}" + (f", read {r.offers.read}" if r.offers.read else "")
                     + f"; {r.offers.considered} instances considered; {term(r.offers.screened_line)}")
    kinds = reason_kinds(r)
    if kinds:
        lines.append("what lowers confidence:")
        lines += [f"  - {term(k.line())}" for k in kinds]
    lines += plan_console(r)
    lines.append(f"\nsweep {term(r.sweep_id)} · device {term(r.device)} · {len(r.runs)} runs"
                 + ("  ** PARTIAL REPORT **" if r.partial else ""))
    lines += _models_table(r)
    lines += [f"  {term(x)}" for x in host_floor_lines(r)]
    lines += [f"  ! {term(x)}" for x in contamination_lines(r)]
    if folder is not None:
        lines.append(f"report: {folder / 'report.md'}")
    return "\n".join(lines)


def _models_table(r: Report) -> list[str]:
    """The console's per-model table: epoch time, its interval (or ``unresolved``) and the hours measured on the
    sweep's device, beside the local instance's where the decision rests on a projection onto it."""
    local = {p.model: p for p in r.projections if p.instance == LOCAL}
    projected = r.decision.on_local and r.decision.local_instance.basis != Basis.MEASURED
    w = max([10, *(len(term(n)) for n in r.models)])  # a plugin's name may be longer than the built-ins'
    on = term(r.device or "device")[:18]
    hdr = (f"{'model':{w}s} {'source':9s} {'runs':>4s} {'epochs':>7s} {'mean ms':>10s} {'95% CI':>23s} "
           f"{'target':>7s} {'hours (' + on + ')':>{max(9, len(on) + 8)}s}" + ("  local hours" if projected else ""))
    lines = [hdr, "-" * len(hdr)]
    for name, m in r.models.items():
        e, p = m.epoch_time_ms, m.projection
        mean = m.estimate_epoch_ms if m.source == Source.ESTIMATE else (e.mean if e else None)
        lines.append(f"{term(name):{w}s} {m.source:9s} {m.runs:>4d} {m.samples_used:>7d} {_n(mean):>10s} "
                     f"{_interval(e) if e else '–':>23s} {_n(p.target_epochs if p else None, 'd'):>7s} "
                     f"{_hours(p.hours if p else None):>{max(9, len(on) + 8)}s}"
                     + (f"  {_hours(local[name].hours if name in local else None)}" if projected else ""))
    return lines


# --------------------------------------------------------------------------------------------------
# the training plan (analysis/plan/plan.py): a section of report.md and lines of the console summary
# --------------------------------------------------------------------------------------------------


def _range(r: Any, fmt: str = "d") -> str:
    return "–" if not r else f"{_n(r[0], fmt)}–{_n(r[1], fmt)}"


def _plan_rows(r: Report) -> list[list[str]]:
    rows = []
    for name, m in r.models.items():
        p = m.plan
        if not p:
            continue
        proj = m.projection or ModelProjection(None, None)
        rows.append([md_cell(name), md_cell(f"{p.data_measured or '?'} → {p.data}"),
                     f"{_n(p.windows_measured, 'd')} → {_n(p.windows_planned, 'd')}",
                     _n(p.data_scale, ".3g") + ("" if p.data_scale_trusted else " (not trusted)"),
                     _n(p.epoch_ms_planned) + (" (scaled)" if p.data_scale != 1.0 and p.epoch_ms_planned else ""),
                     f"{_n(p.batch_measured, 'd')} → {_n(p.batch_planned, 'd')}",
                     _n(p.noise_scale, ".3g") + _resolution(p), _n(p.batch_scale, ".3g"),
                     f"{_n(p.epochs, 'd')} [{_range(p.epochs_range)}]", md_cell(p.epochs_basis),
                     _n(p.target_epochs_configured, "d"), _hours(proj.hours),
                     f"{_hours(proj.hours_range[0])}–{_hours(proj.hours_range[1])}" if proj.hours_range else "–"])
    return rows


def _resolution(p: Plan) -> str:
    """The noise scale's resolution beside it: `(±X%, N pairs)`, or `(not measured)`."""
    if p.noise_scale is None:
        return " (not measured)" if p.noise_scale_resolution.startswith("not measured") else ""
    rse = "±?" if p.noise_scale_rel_se is None else f"±{p.noise_scale_rel_se:.0%}"
    return f" ({rse}, {_n(p.noise_scale_pairs, 'd')} pairs)"


def _distribution(d: Decision) -> tuple[float, float, list[float], dict[str, Any]]:
    lo, hi = d.hours_interval90
    return lo, hi, d.probability_thresholds_hours or [24, 48], d.uncertainty_drivers or {}


def _alpha_text(p: Plan) -> str:
    """The data exponent in words: its value and range (or unmeasured) and its basis."""
    a, rng = p.data_alpha, p.data_alpha_range
    head = f"α = {a:g} [{rng[0]:g}–{rng[1]:g}]; " if a is not None and rng else ""
    if p.epochs_measured_data is None:
        conv = ""
    elif a is not None:
        conv = f"{_n(p.epochs_measured_data, 'd')} epochs on the measured data → {_n(p.epochs, 'd')} planned; "
    else:
        conv = f"the curve's {_n(p.epochs_measured_data, 'd')} epochs on the measured data, not used; "
    return head + conv + p.data_alpha_basis


def plan_section(r: Report) -> str:
    """The plan per model (data measured → planned, windows, scale, epochs with range and basis, batch) and the
    decision's distribution of the total."""
    rows = _plan_rows(r)
    if not rows:
        return ""
    d = r.decision
    out = ["\n## Training plan\n",
           "Per model: the data measured → planned, training + validation windows, the epoch-time scale (windows "
           "planned / measured; RL epochs are fixed work), the planned epoch time, the batch, the gradient noise "
           "scale B_simple and the epochs factor it gives a changed batch (a model-based estimate), the epochs "
           "(estimate, 5–95% range, basis) beside the configured target, and the planned hours with their range "
           "(epoch-time interval × epochs range).\n",
           _table(["model", "data", "windows", "scale", "epoch ms planned", "batch", "B_noise", "batch ×",
                   "epochs [range]", "basis", "configured", "hours", "hours range"], rows)]
    notes = [f"- {md_text(name)}: {md_text(m.plan.data_scale_note)}" for name, m in r.models.items()
             if m.plan and m.plan.data_scale_note]
    notes += [f"- {md_text(name)}: {md_text(n)}" for name, m in r.models.items() if m.plan
              for n in m.plan.epochs_labels + (m.plan.epochs_notes or [])]
    notes += [f"- {md_text(name)}: epochs on the planned data, steps ∝ windows^α: {md_text(_alpha_text(m.plan))}"
              for name, m in r.models.items() if m.plan and m.plan.data_alpha_basis]
    notes += [f"- {md_text(name)}: gradient noise scale: {md_text(m.plan.noise_scale_resolution)}"
              for name, m in r.models.items() if m.plan and m.plan.noise_scale_resolution]
    if notes:
        out.append("\n" + "\n".join(notes))
    if d.hours_median is not None:
        lo, hi, th, drv = _distribution(d)
        out.append(f"\n**Total as a distribution** ({d.hours_basis or 'measured'}, Monte Carlo): median "
                   f"{_hours(d.hours_median)}, 90% interval {_hours(lo)} to {_hours(hi)}; "
                   f"{_probabilities(d, th, True, md_text)}. Dominant uncertainty: "
                   f"{drv.get('dominant') or 'none'} "
                   f"({', '.join(f'{k} {v:.0%}' for k, v in (drv.get('shares') or {}).items())}).\n")
    return "\n".join(out) + "\n"


def _probabilities(d: Decision, th: Any, long: bool, safe: Callable[[Any], str]) -> str:
    """``P(total < 24 h) = 3%, P(total > 48 h) = 97%`` (``long``) or ``P(<24 h) 3%, P(>48 h) 97%``; or why there
    are none (``decision.probabilities_withheld``, made ``safe`` for where it is printed)."""
    if d.p_within_24h is None or d.p_over_48h is None:
        return f"no probabilities ({safe(d.probabilities_withheld or 'not computed')})"
    if long:
        return f"P(total < {th[0]:g} h) = {d.p_within_24h:.0%}, P(total > {th[1]:g} h) = {d.p_over_48h:.0%}"
    return f"P(<{th[0]:g} h) {d.p_within_24h:.0%}, P(>{th[1]:g} h) {d.p_over_48h:.0%}"


def plan_console(r: Report) -> list[str]:
    """The plan's lines of the console summary (empty without a plan)."""
    lines = []
    for name, m in r.models.items():
        p = m.plan
        if not p:
            continue
        hours = m.projection.hours if m.projection else None
        lines.append(f"  {term(name)}: data {term(p.data)} (windows {_n(p.windows_measured, 'd')} -> "
                     f"{_n(p.windows_planned, 'd')}, x{_n(p.data_scale, '.3g')}"
                     f"{'' if p.data_scale_trusted else ', NOT TRUSTED'}); epochs {_n(p.epochs, 'd')} "
                     f"[{_range(p.epochs_range)}] {p.epochs_basis} (configured "
                     f"{_n(p.target_epochs_configured, 'd')}); hours {_hours(hours)}"
                     + (f"; alpha {p.data_alpha:g} [{_range(p.data_alpha_range, 'g')}]"
                        if p.data_alpha is not None else
                        f"; the curve's {p.epochs_measured_data} epochs not used"
                        if p.epochs_measured_data is not None and str(p.epochs_basis).startswith("configured")
                        else "")
                     + (f"; {'OVERFITS' if p.curve_worsened == 'overfitting' else 'WORSE THAN ITS START'} after "
                        f"epoch {p.diverged_after_epoch}" if p.diverged_after_epoch is not None else "")
                     + (f"; B_noise {_n(p.noise_scale, '.3g')}{_resolution(p)}" if p.noise_scale is not None else
                        f"; B_noise {term(p.noise_scale_resolution)}" if p.noise_scale_resolution else ""))
    d = r.decision
    if lines and d.hours_median is not None:
        lo, hi, th, drv = _distribution(d)
        lines.append(f"  total {_hours(d.hours_median)} median, 90% {_hours(lo)}-{_hours(hi)}; "
                     f"{_probabilities(d, th, False, term)}; dominated by {drv.get('dominant') or 'nothing'}")
    return (["plan:"] + lines) if lines else []


# --------------------------------------------------------------------------------------------------
# the projection blocks (analysis/projection/projection.py): a section of report.md and the console view
# --------------------------------------------------------------------------------------------------


def _hours3(h: float | None) -> str:
    return _hours(h, ".3g")


def host_floor_lines(r: Report) -> list[str]:
    """Per model of a CPU sweep: whether the local card is projected faster than this CPU, by how much, with the
    range (analysis/projection/host_floor.py), said plainly where it is not."""
    return [host_floor.phrase(p.model, p.gpu, to_json(p.host_floor)) for p in r.projections
            if p.instance == "local" and p.host_floor is not None]


def projection_section(r: Report) -> str:
    lines = ["\n## Projected per GPU\n",
             "Projections are estimates, not measurements, unless the method says `measured`. Method and "
             "constants: docs/projection.md. Wall time of a multi-GPU instance: the planned models in parallel, "
             "one per GPU; a row with GPUs per model N trains each model that can be split across N GPUs (data "
             "parallelism), shown where that finishes sooner. Prices: the catalogue's date, check current "
             "pricing.\n"]
    head = ["instance", "GPU", "GPUs", "GPUs per model", "$/h (as of)", "models", "wall time [range]",
            "cost [range]", "fits", "method"]
    rows = []
    for i in r.instances:
        rng = i.wall_hours_range
        usd_r = i.usd_range
        rows.append([i.instance, i.gpu, i.gpus, i.data_parallel,
                     "–" if i.usd_per_hour is None else f"{i.usd_per_hour:g} ({i.price_date or 'local'})",
                     f"{len(i.models)}/{len(i.models) + len(i.missing)}",
                     f"{_hours3(i.wall_hours)} [{_hours3(rng[0]) if rng else '–'}, {_hours3(rng[1]) if rng else '–'}]",
                     f"{_usd(i.usd)} [{_usd(usd_r[0]) if usd_r else '–'}, "
                     f"{_usd(usd_r[1]) if usd_r else '–'}]",
                     {True: "yes", False: "NO: " + ", ".join(i.does_not_fit), None: "unknown"}[i.fits_all],
                     "; ".join(i.methods) or "–"])
    lines.append(_table(head, rows))
    for c in r.cheapest:
        lines.append(f"- Cheapest instance within {c.within_hours:g} h (slow end of the range): "
                     + (f"**{c.instance}** ({c.gpu}" + (f", each model across {c.data_parallel} GPUs"
                                                         if (c.data_parallel or 1) > 1 else "")
                        + f"), {_hours3(c.wall_hours)}, {_usd(c.usd)}"
                        if c.instance else f"none: {c.why_none}"))
    lines.append("\nPer model: projected epoch time in ms [range] and hours.\n")
    by_model: dict[str, dict[str, ProjectionRow]] = {}
    for p in r.projections:
        by_model.setdefault(p.model, {})[p.instance] = p
    insts = list(dict.fromkeys(i.instance for i in r.instances))  # one model per GPU (rows across GPUs: below)
    rows = []
    for model, per in by_model.items():
        cells = [model]
        for inst in insts:
            p = per.get(inst)
            if not p or p.epoch_ms is None:
                cells.append("–")
                continue
            lo, hi = p.epoch_ms_range
            fit = "" if p.fits is not False else " (does not fit)"
            cells.append(f"{_n(p.epoch_ms)} [{_n(lo)}, {_n(hi)}] · {_hours3(p.hours)}{fit}")
        rows.append(cells)
    lines.append(_table(["model"] + insts, rows))
    notes = sorted({n for p in r.projections for n in p.notes})
    if notes:
        lines.append("\n" + "\n".join(f"- {n}" for n in notes))
    floors = host_floor_lines(r)
    if floors:
        lines.append("\nThe local card against this CPU (the host dispatches every op on either; "
                     "docs/projection.md, The host's floor):\n")
        lines += [f"- {md_text(x)}" for x in floors]
    if r.projections_data_parallel:
        lines.append("\nOne model across N GPUs (data parallelism): epoch time in ms [range], of which the "
                     "all-reduce the backward does not hide, and hours at the global batch's epochs.\n")
        rows = [[p.model, p.instance, p.data_parallel, p.global_batch if p.global_batch is not None else "–",
                 "–" if p.epoch_ms is None else f"{_n(p.epoch_ms)} [{_n(p.epoch_ms_range[0])}, "
                                                f"{_n(p.epoch_ms_range[1])}]",
                 "–" if p.comm_ms is None else _n(p.comm_ms), _hours3(p.hours), p.method or "–"]
                for p in r.projections_data_parallel]
        lines.append(_table(["model", "instance", "GPUs", "global batch", "epoch ms [range]", "all-reduce ms",
                             "hours", "method"], rows))
    return "\n".join(lines) + "\n"


def projection_view(r: Report | dict[str, Any], only: list[str] | None = None) -> str:
    """Per-model projections side by side for the chosen instances (``only``: instance names, e.g. ``local``
    or a ``project=`` GPU entry)."""
    r = typed(r)
    insts = [i for i in r.instances if not only or i.instance in only]
    if not insts:
        return "no projection for " + ", ".join(only or []) + " (see conf/hardware and decision.catalogue)"
    head = ["model"] + [f"{i.instance} ({i.gpu}{' x' + str(i.gpus) if i.gpus > 1 else ''}"
                        + (f", {i.data_parallel} per model" if i.data_parallel > 1 else "") + ")"
                        for i in insts]
    by = {(p.instance, p.model, p.data_parallel): p for p in [*r.projections, *r.projections_data_parallel]}
    rows = []
    for model in dict.fromkeys(p.model for p in r.projections):
        row = [model]
        for i in insts:
            p = by.get((i.instance, model, i.data_parallel))
            if not p or p.epoch_ms is None:
                row.append("–")
                continue
            lo, hi = p.epoch_ms_range
            row.append(f"{_n(p.epoch_ms)} ms [{_n(lo)}-{_n(hi)}] = {_hours3(p.hours)}" + (" !" if p.fits is False else ""))
        rows.append(row)
    rows.append(["wall time"] + [_hours3(i.wall_hours) for i in insts])
    rows.append(["cost"] + [_usd(i.usd) for i in insts])
    widths = [max(len(str(x[k])) for x in [head, *rows]) for k in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if k == 0 else '>'}{w}}}" for k, w in enumerate(widths))
    lines = ["projected epoch time [range] = hours per model (PROJECTIONS unless the method says measured)",
             fmt.format(*head), *(fmt.format(*row) for row in rows)]
    lines += [f"  {i.instance}: {'; '.join(i.methods) or 'not projected'}" for i in insts]
    lines.append("  ! = predicted not to fit in that GPU's memory at the run's batch size")
    for p in r.projections:
        w = p.fits_with if p.instance in {i.instance for i in insts} and p.data_parallel == 1 else None
        if w:
            lines.append(f"    {term(p.model)} on {term(p.instance)}: " + (
                f"fits at micro-batch {w['micro_batch']} with gradient accumulation x{w['grad_accum']} (the same "
                f"batch of {w['batch']}; estimated from its predicted peak)" if w["micro_batch"] else
                f"does not fit even at micro-batch 1 (its fixed part, {w['fixed_mb']:.0f} MB, exceeds the GPU)"))
    names = {i.instance for i in insts}
    across = [p for p in r.projections_data_parallel if p.instance in names]
    if across:
        lines.append("across N GPUs (data_parallel): epoch_ms [range] (comm_ms: all-reduce not hidden) = hours")
        lines += [f"  {p.instance} x{p.data_parallel} {p.model}: " + (
            f"{_n(p.epoch_ms)} ms [{_n(p.epoch_ms_range[0])}-{_n(p.epoch_ms_range[1])}] (comm_ms {_n(p.comm_ms)}) "
            f"= {_hours3(p.hours)}, global batch {p.global_batch}; {p.method}" if p.epoch_ms is not None
            else str(p.method)) for p in across]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# the sweep comparison (analysis/compare.py): compare.json, compare.md and the console table
# --------------------------------------------------------------------------------------------------


def _pct(x: Any) -> str:
    return "–" if x is None else f"{x:+.1%}"


_SHORT = {ParamKey.BATCH_SIZE: "bs", "data.name": "data", "data.n_bars": "bars", ParamKey.TRAINER_PRECISION: "prec",
          ParamKey.TRAINER_COMPILE: "compile"}


def match_text(e: dict[str, Any], keys: list[str] | None = None) -> str:
    """``bs=230 data=...``: the match values of a comparison (only ``keys`` when given)."""
    items = [(k, v) for k, v in e["match"].items() if keys is None or k in keys]
    return " ".join(f"{_SHORT.get(k, k)}={str(v).split('.')[-1] if k == ParamKey.TRAINER_PRECISION else v}"
                    for k, v in items)


def varying_keys(r: dict[str, Any]) -> list[str]:
    """Match keys whose value differs between the comparisons (the others go in the header)."""
    entries = r["comparisons"] + r["unmatched"]
    return [k for k in r["settings"]["match"] if len({str(e["match"].get(k)) for e in entries}) > 1]


def comparison_label(e: dict[str, Any], keys: list[str]) -> str:
    """The model and the match values that differ between comparisons: a row label."""
    return (e["model"] + " " + match_text(e, keys)).strip()


def comparison_console(r: dict[str, Any], folder: Path | None = None) -> str:
    s = r["settings"]
    keys = varying_keys(r)
    common = [k for k in s["match"] if k not in keys]
    entries = r["comparisons"] + r["unmatched"]
    lines = [f"compare {term(r[ReportKey.SWEEP_A])} (a) -> {term(r[ReportKey.SWEEP_B])} (b) · threshold ±{s['threshold']:.0%} · alpha "
             f"{s['alpha']:g} · {s['confidence']:.0%} intervals"]
    if entries and common:
        lines.append("matched on model and " + term(match_text(entries[0], common)))
    w = max([len(term(comparison_label(e, keys))) for e in entries] + [5])
    hdr = (f"{'model':{w}s} {'unit':5s} {'n a/b':>9s} {'a ms':>9s} {'b ms':>9s} {'change':>8s} {'interval':>18s} "
           f"{'p':>8s}  verdict")
    lines += [hdr, "-" * len(hdr)]
    for e in r["comparisons"]:
        ci = e["change_ci"]
        cis = "–" if not ci else f"[{ci[0]:+.1%}, {ci[1]:+.1%}]"
        p = e["mannwhitney"]["p"] if e["mannwhitney"] else None
        v = e["verdict"].upper() if e["verdict"] != "no significant change" else e["verdict"]
        lines.append(f"{term(comparison_label(e, keys)):{w}s} {e['unit']:5s} {e['n_a']:>4d}/{e['n_b']:<4d} "
                     f"{_n(e['median_a_ms']):>9s} {_n(e['median_b_ms']):>9s} {_pct(e['change']):>8s} {cis:>18s} "
                     f"{'–' if p is None else format(p, '.2g'):>8s}  {v}")
    for u in r["unmatched"]:
        lines.append(f"{term(comparison_label(u, keys)):{w}s} unmatched: only in {term(u['only_in'])} ({u['runs']} run(s))")
    if not r["comparisons"]:
        lines.append("no model/config was measured in both sweeps: nothing to compare (see compare.match)")
    sm = r["summary"]
    lines.append(f"\n{sm['slower']} slower, {sm['faster']} faster, {sm['no significant change']} without a "
                 "significant change")
    if folder is not None:
        lines.append(f"report: {folder / 'compare.md'}")
    return "\n".join(lines)


def comparison_markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    out = [f"# Sweep comparison: {md_text(r[ReportKey.SWEEP_A])} → {md_text(r[ReportKey.SWEEP_B])}\n",
           f"Generated {r['generated_at']} from `{md_code(r['tracking_uri'])}` (experiment `{md_code(r['experiment'])}`). "
           f"Runs matched by model and {', '.join(f'`{md_code(m)}`' for m in s['match'])}. Change = median(b) / median(a) - 1 with a "
           f"{s['confidence']:.0%} bootstrap interval; two-sided Mann-Whitney U; verdict at ±{s['threshold']:.0%} "
           f"and alpha {s['alpha']:g}.\n",
           "| model | match | unit | n a / b | a median ms | b median ms | change | interval | p | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for e in r["comparisons"]:
        ci = e["change_ci"]
        p = e["mannwhitney"]["p"] if e["mannwhitney"] else None
        out.append(f"| {md_cell(e['model'])} | {md_cell(match_text(e))} | {e['unit']} | {e['n_a']} / {e['n_b']} | "
                   f"{_n(e['median_a_ms'])} | {_n(e['median_b_ms'])} | {_pct(e['change'])} | "
                   f"{'–' if not ci else f'{ci[0]:+.1%} … {ci[1]:+.1%}'} | {'–' if p is None else f'{p:.2g}'} | "
                   f"**{e['verdict']}** |")
    out.append("")
    for e in r["comparisons"]:
        out.append(f"- **{md_text(e['model'])}** ({md_text(match_text(e))}): {md_text(e['detail'])}.")
        out += [f"  - {md_text(n)}" for n in e["notes"]]
        for side in ("a", "b"):
            x = e[side]
            out.append(f"  - {side}: {x['runs']} run(s) on {md_text(', '.join(x['devices']))}, commit "
                       f"{md_text(', '.join(x['git_commits']))}, {x['epochs_used']} epochs ({x['outliers_removed']} outliers "
                       "removed)")
    if r["unmatched"]:
        out.append("\n## Unmatched\n")
        out += [f"- {md_text(u['model'])} ({md_text(match_text(u))}): only in {md_text(u['only_in'])}"
                for u in r["unmatched"]]
    return "\n".join(out) + "\n"


def write_comparison(r: dict[str, Any], folder: Path, plots: Iterable[Path] = ()) -> list[Path]:
    """compare.json and compare.md into ``folder``; ``plots``: the PNGs already written there."""
    folder.mkdir(parents=True, exist_ok=True)
    r["plots"] = [Path(p).name for p in plots]
    md = atomic_write_text(folder / "compare.md", comparison_markdown(r))
    return [write_json(r, folder / "compare.json"), md]
