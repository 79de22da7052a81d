"""PNG plots of the sweep analysis and of the sweep comparison (matplotlib, Agg backend: no display needed).

Logged text (model names, instances, sweep ids) is data: every text object is drawn as plain text (no math
text, no TeX: a ``$`` is a dollar sign), with control characters shown as escapes, and matplotlib's own warnings
(a glyph missing from the font names the glyph) reach the log escaped, never the terminal raw. A figure that
fails to draw is left out with a warning: a plot never costs the report. A file that cannot be written (a full
disk) is raised: the report folder is then written whole or not at all (report.write_folder).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.report.report import atomic_write, comparison_label, instance_label, varying_keys
from trainbench.analysis.report_types import LOCAL, Instance, Report, Source
from trainbench.core.safe_text import term
from trainbench.core.vocab import ReportKey

log = logging.getLogger("trainbench")
#: Every text object drawn as plain text: logged names may hold `$`, `\\` or TeX.
_PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}


def _t(value: Any) -> str:
    """Logged text as a plot shows it: control characters as visible escapes."""
    return term(value)


def _draw(name: str, make: Callable[[], Any], path: Path) -> Path | None:
    """``make()``'s figure saved to ``path`` as plain text, or None: no figure, or it failed to draw (a warning
    says why). Matplotlib's warnings are logged escaped. An OSError (the file cannot be written) is raised."""
    import matplotlib

    fig = None
    with warnings.catch_warnings(record=True) as caught, matplotlib.rc_context(_PLAIN_TEXT):
        warnings.simplefilter("always")
        try:
            fig = make()
            return None if fig is None else _save(fig, path)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - a plot is never worth the report
            log.warning("plot %s left out: it failed to draw (%s: %s)", name, type(e).__name__, term(e)[:300])
            return None
        finally:
            if fig is not None:
                _pyplot().close(fig)
            for w in caught:
                log.warning("plot %s: %s", name, term(w.message)[:300])


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=90, format=path.suffix.lstrip(".") or "png"))
    return path


def write_plots(report: Report, recs: list[Any], folder: Path) -> list[Path]:
    """The sweep analysis' PNGs into ``folder`` (made if missing): epoch-time histograms, loss curves, the
    projected timeline, hours against cost per instance, costs. Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    used = {x.run_id for x in report.runs if x.used_for_timing}
    timed = [r for r in recs if r.run_id in used]
    figs = [("epoch_times.png", lambda: _epoch_times(report, timed)),
            ("loss_curves.png", lambda: _loss_curves(report, timed)), ("timeline.png", lambda: _timeline(report)),
            ("instances.png", lambda: _instances(report)), ("costs.png", lambda: _costs(report))]
    return [p for name, make in figs if (p := _draw(name, make, folder / name)) is not None]


def _measured(report: Report) -> list[str]:
    return [m for m, e in report.models.items() if e.source == Source.MEASURED]


def _epoch_times(report: Report, timed: list[Any]) -> Any:
    """One histogram of epoch times per measured model, with its mean and p95."""
    models = _measured(report)
    if not models:
        return None
    fig, axes = _pyplot().subplots(1, len(models), figsize=(3.2 * len(models), 3.2), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        data = [r.measured() for r in timed if r.model == m]
        data = np.concatenate(data) if data else np.empty(0)
        data = data[np.isfinite(data)]
        ax.hist(data, bins=min(50, max(5, data.size // 10)), color="tab:blue", alpha=0.8)
        e = report.models[m].epoch_time_ms
        for k, style in (("mean", "-"), ("p95", "--")):
            if getattr(e, k) is not None:
                ax.axvline(getattr(e, k), color="k", ls=style, lw=1, label=k)
        ax.set_title(_t(m))
        ax.set_xlabel("epoch time (ms)")
        ax.legend(fontsize=7)
    return fig


def _loss_curves(report: Report, timed: list[Any]) -> Any:
    """The loss curves of the timed runs, warmup included."""
    models = _measured(report)
    if not models:
        return None
    fig, ax = _pyplot().subplots(figsize=(6, 3.5))
    for i, m in enumerate(models):
        for j, r in enumerate(x for x in timed if x.model == m):
            loss = r.series.get("loss")
            if loss is not None and loss.size:
                ax.plot(np.arange(loss.size), loss, color=f"C{i}", lw=0.8, alpha=0.7, label=_t(m) if j == 0 else None)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_title("loss curves (warmup included)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return fig


def _timeline(report: Report) -> Any:
    """The timeline of what the decision rests on: the local instance's rows of the table (or, where the
    decision fell back to the measured device, the measured hours), each model's share of the total on a linear
    axis (a log axis would misstate the shares of stacked segments), with the conservative total and the
    thresholds."""
    d = report.decision
    if d.on_local:
        hours = [(p.model, p.hours) for p in report.projections if p.instance == LOCAL and p.hours is not None]
    else:
        hours = [(m, report.models[m].projection.hours) for m in d.models_in_total if report.models[m].projection]
    if not hours:
        return None
    fig, ax = _pyplot().subplots(figsize=(6, 2.8))
    left = 0.0
    for i, (m, h) in enumerate(hours):
        ax.barh(0, h, left=left, color=f"C{i}", label=_t(m))
        left += h
    cons = d.total_hours_conservative or left
    ax.barh(1, cons, color="grey", alpha=0.6, label="conservative")
    th = d.thresholds_hours
    if max(left, cons) >= 0.2 * th["local_max"]:  # thresholds on the axis only when they are in range
        ax.axvline(th["local_max"], color="green", ls="--", label=f"{th['local_max']:g} h")
        ax.axvline(th["cloud_min"], color="red", ls="--", label=f"{th['cloud_min']:g} h")
    ax.set_yticks([0, 1], ["hours", "conservative"])
    ax.set_xlabel("hours (linear)")
    ax.set_xlim(left=0)
    ax.set_title(_t(f"timeline, {d.basis}: {d.recommendation}")[:90], fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    return fig


#: The plots show at most this many instances: the local one, then the cheapest (report.md lists them all).
PLOT_INSTANCES = 12


def _cheapest(inst: list[Instance]) -> tuple[list[Instance], str]:
    """At most PLOT_INSTANCES of the priced instances: the local one first, then the cheapest; and the title's
    note when some were left out."""
    if len(inst) <= PLOT_INSTANCES:
        return inst, ""
    local = [i for i in inst if i.instance == LOCAL]
    rest = sorted((i for i in inst if i.instance != LOCAL), key=lambda i: i.usd)
    return local + rest[:PLOT_INSTANCES - len(local)], f" ({PLOT_INSTANCES} cheapest of {len(inst)})"


def _instances(report: Report) -> Any:
    """Hours against cost per instance: the range as error bars, the thresholds' lines."""
    inst, note = _cheapest([i for i in report.instances if i.wall_hours is not None
                            and i.usd is not None])
    if not inst:
        return None
    fig, ax = _pyplot().subplots(figsize=(6.5, 4))
    for k, i in enumerate(inst):
        lo, hi = i.wall_hours_range
        ulo, uhi = i.usd_range
        ax.errorbar(i.wall_hours, i.usd, xerr=[[i.wall_hours - lo], [hi - i.wall_hours]],
                    yerr=[[i.usd - ulo], [uhi - i.usd]], fmt="o", color=f"C{k}", capsize=3,
                    label=_t(f"{instance_label(i)} ({i.gpu}{'' if i.gpus == 1 else ' x' + str(i.gpus)})"
                             + ("" if i.complete else " partial") + (" NO FIT" if i.fits_all is False else "")))
    th = report.decision.thresholds_hours
    ax.axvline(th["local_max"], color="green", ls="--", lw=1, label=f"{th['local_max']:g} h")
    ax.axvline(th["cloud_min"], color="red", ls="--", lw=1, label=f"{th['cloud_min']:g} h")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("projected wall hours of the plan (range)")
    ax.set_ylabel("USD")
    ax.set_title("hours vs cost per instance (projected)" + note, fontsize=9)
    ax.legend(fontsize=6, loc="best")
    return fig


def _costs(report: Report) -> Any:
    """The cost of the plan per priced instance, from the instances table (the costs block is a view of it)."""
    shown, note = _cheapest([i for i in report.instances if i.usd_per_hour is not None and i.usd is not None])
    bars = [(instance_label(i), i.usd, i.usd_conservative) for i in shown]
    if not bars:
        return None
    fig, ax = _pyplot().subplots(figsize=(max(6.0, 0.6 * len(bars)), 3.2))
    x = np.arange(len(bars))
    ax.bar(x - 0.2, [b[1] for b in bars], 0.4, label="wall hours x $/h")
    ax.bar(x + 0.2, [b[2] or 0 for b in bars], 0.4, label="conservative")
    ax.set_xticks(x, [_t(b[0]) for b in bars], fontsize=7, rotation=20, ha="right")
    ax.set_ylabel("USD")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_title("cost of the plan per instance" + note, fontsize=9)
    ax.legend(fontsize=7)
    return fig


def write_comparison_plot(r: dict[str, Any], folder: Path) -> Path | None:
    """compare.png: the change of each comparison with its interval, and the threshold band."""
    if not r["comparisons"]:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return _draw("compare.png", lambda: _comparison_figure(r), folder / "compare.png")


def _comparison_figure(r: dict[str, Any]) -> Any:
    plt = _pyplot()
    comps = r["comparisons"]
    th = r["settings"]["threshold"]
    colors = {"slower": "tab:red", "faster": "tab:green", "no significant change": "tab:grey"}
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(comps) + 1.6))
    ax.axvspan(-th * 100, th * 100, color="0.9", label=f"±{th:.0%} threshold")
    ax.axvline(0, color="k", lw=0.8)
    for i, e in enumerate(comps):
        if e["change"] is None:
            continue
        ci = e["change_ci"] or [e["change"], e["change"]]
        x = e["change"] * 100
        ax.errorbar(x, i, xerr=[[x - ci[0] * 100], [ci[1] * 100 - x]], fmt="o", capsize=4,
                    color=colors[e["verdict"]])
        ax.annotate(e["verdict"], (x, i), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7,
                    color=colors[e["verdict"]])
    keys = varying_keys(r)
    ax.set_yticks(range(len(comps)), [_t(comparison_label(e, keys))[:40] for e in comps], fontsize=8)
    ax.margins(y=0.2)
    ax.invert_yaxis()
    ax.set_xlabel(f"change of median epoch time, % ({r['settings']['confidence']:.0%} interval)")
    ax.set_title(_t(f"{r[ReportKey.SWEEP_A]} → {r[ReportKey.SWEEP_B]}"), fontsize=9)
    ax.legend(fontsize=7, loc="best")
    return fig
