"""What a busy machine did to a model's timing, for the report: how many epochs, what load, what it means.

The harness flags epochs measured while the machine was busy (``contaminated``; the rule, and when host load
does not contaminate a GPU-timed epoch, is in ``trainbench.measure.load``); ``analysis.contaminated``
(``auto`` by default; ``trainbench.core.contamination_policy``) decides whether their times are dropped or used.
This module reports it per model (``models.<m>.contamination`` in report.json, docs/report-schema.md; the
confidence rule it feeds is ``decision.contamination_reasons``), and explains a model left without a
timing because every epoch was dropped (``analysis.contaminated=drop``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainbench.analysis.statistics.timing import PerRun
from trainbench.core.contamination_policy import MIN_CLEAN
from trainbench.core.vocab import Series, Summary

_LOAD = (Series.CPU_OTHER_PCT, Series.CPU_STEAL_PCT, Series.HOST_WAIT_PCT, Series.GPU_OTHER_PROCESSES)


def _policy(cfg: Any) -> str:
    return str(getattr(cfg, "contaminated", "auto"))


def load_seen(runs: list[Any]) -> dict[str, float]:
    """The load during the runs' contaminated measured epochs: mean and max of each load figure."""
    out: dict[str, float] = {}
    for key in _LOAD:
        vals = []
        for r in runs:
            flags = r.measured(Series.CONTAMINATED)
            x = r.measured(key)
            if x.size and flags.size == x.size:
                vals.append(x[flags > 0.5])
        v = np.concatenate(vals) if vals else np.empty(0)
        v = v[np.isfinite(v)]
        if v.size:
            out[f"{key}_mean"] = round(float(v.mean()), 1)
            out[f"{key}_max"] = round(float(v.max()), 1)
    return out


def _load_text(load: dict[str, float]) -> str:
    parts = []
    if Series.CPU_OTHER_PCT + "_max" in load:
        parts.append(f"other processes used {load[Series.CPU_OTHER_PCT + '_mean']:.0f}% of the CPUs on average "
                     f"and up to {load[Series.CPU_OTHER_PCT + '_max']:.0f}%")
    if load.get(Series.CPU_STEAL_PCT + "_max", 0) > 0:
        parts.append(f"the hypervisor stole up to {load[Series.CPU_STEAL_PCT + '_max']:.0f}%")
    if load.get(Series.HOST_WAIT_PCT + "_max", 0) > 0:
        parts.append(f"the training thread waited for a CPU up to {load[Series.HOST_WAIT_PCT + '_max']:.0f}% "
                     "of an epoch")
    if load.get(Series.GPU_OTHER_PROCESSES + "_max", 0) > 0:
        parts.append(f"up to {load[Series.GPU_OTHER_PROCESSES + '_max']:.0f} other process(es) on the GPU")
    return "; ".join(parts) or "no load figures recorded"


def contamination_block(runs: list[Any], per_run: list[PerRun], cfg: Any) -> dict[str, Any] | None:
    """``models.<m>.contamination``: None when no measured epoch of ``runs`` was flagged, else how many, the
    load seen, whether the timing uses them, what that means and what to do."""
    flagged = sum(int(p.contaminated_epochs or 0) for p in per_run)
    if not flagged:
        return None
    measured = sum(int(p.epochs_measured or 0) for p in per_run)
    used_runs = [p.run_name for p in per_run if p.contaminated_used]
    policy = _policy(cfg)
    load = load_seen(runs)
    used = bool(used_runs)
    head = f"{flagged} of {measured} measured epochs were flagged contaminated ({_load_text(load)})"
    if used:
        meaning = (f"{head}. Too few clean epochs were left (fewer than {MIN_CLEAN} in "
                   f"{len(used_runs)} run(s)), so under analysis.contaminated={policy} the timing USES the "
                   "contaminated epochs: it is the time on this machine as busy as it was, an upper bound of the "
                   "quiet-machine time, at low confidence")
    else:
        meaning = f"{head}; they were left out and the timing rests on the clean epochs"
    advice = ("For a figure of the machine itself, measure again when it is quiet (check `uptime`, `top`), or with "
              "more epochs so that enough clean ones remain (trainer.epochs)"
              + ("; analysis.contaminated=drop refuses contaminated timings, analysis.contaminated=use uses "
                 "them always" if used else "; analysis.contaminated=use would include them"))
    return {"epochs_flagged": flagged, Summary.EPOCHS_MEASURED: measured, "policy": policy, "used": used,
            "runs_using_contaminated": used_runs, "load": load, "meaning": meaning, "advice": advice}


def why_all_dropped(runs: list[Any], policy: str) -> str | None:
    """Why completed runs hold no usable timing when every measured epoch was flagged and dropped."""
    flags = [r.measured(Series.CONTAMINATED) for r in runs]
    total = sum(int(f.size) for f in flags)
    bad = sum(int((f > 0.5).sum()) for f in flags)
    if not total or bad < total:
        return None
    load = load_seen(runs)
    return (f"measured, but all {bad} of {total} measured epochs were flagged contaminated ({_load_text(load)}) "
            f"and analysis.contaminated={policy} drops them: measure again on a quiet machine, or analyse with "
            "analysis.contaminated=auto (or use) to use them, labelled, at low confidence")


def summary_lines(report: Any) -> list[str]:
    """One line per model whose timing met contaminated epochs (console and report.md); ``report``: the typed
    report (analysis/report_types.py)."""
    out = []
    for name, m in report.models.items():
        c = m.contamination
        if c:
            flag = "BUSY MACHINE" if c["used"] else "busy machine"
            out.append(f"{name}: {flag}: {c['meaning']}. {c['advice']}.")
    return out
