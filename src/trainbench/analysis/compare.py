"""Compare two sweeps: did a change (driver, code, GPU, package) make training faster or slower?

    python analyze.py compare=<sweep_a>,<sweep_b>          a = baseline, b = candidate
    python analyze.py compare=previous,latest compare.threshold=0.03 compare.alpha=0.01

Runs are matched by model and by the params in ``compare.match`` (default: batch size, data name and size,
precision, compile): each (model, those values) found in both sweeps is one comparison; the rest are
listed as unmatched. Only completed runs count; each run's epochs are those the sweep analysis keeps
(``stats.kept_epochs``: warmup, contaminated and non-finite epochs dropped, outliers removed per run with
``analysis.outliers``).

Per comparison:

* the samples: with ``compare.unit=run`` each run's median epoch time is one sample (independent
  samples, the honest unit); with ``epoch`` every kept epoch is one (``auto``: runs when both sides have
  ``compare.min_runs``). Epochs of one run are autocorrelated and a run-to-run offset cannot be seen from
  one run per side, so epoch-level p-values are optimistic: that is what the threshold guards against.
* the change: ratio of medians b / a, with a (1 - alpha) BCa bootstrap interval (scipy.stats.bootstrap,
  the two sides resampled independently; seeded by ``analysis.seed``).
* the test: two-sided Mann-Whitney U (scipy.stats.mannwhitneyu), with P(b > a) as the effect size.
* the verdict: ``slower`` when p < alpha, the interval lies above 1 and the change is at least
  ``compare.threshold``; ``faster`` likewise below; otherwise ``no significant change`` (``detail`` says
  whether it is equivalent within the threshold, significant but smaller, or inconclusive).

Writes ``reports/compare_<a>_vs_<b>/`` (compare.json, compare.md: analysis/report/report.py; compare.png:
analysis/report/plots.py) and logs it to MLflow as a run tagged ``kind=compare`` (analysis/report/record.py).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.report.plots import write_comparison_plot
from trainbench.analysis.report.record import log_comparison, tracking_uri
from trainbench.analysis.report.report import (
    comparison_console,
    report_dir,
    safe_name,
    writable_folder,
    write_comparison,
    write_folder,
)
from trainbench.analysis.runs import RunRecord, find_runs, known_sweeps, load_runs, open_experiment
from trainbench.analysis.statistics.stats import kept_epochs, mann_whitney, ratio_interval
from trainbench.core.errors import AnalysisError
from trainbench.core.vocab import DataInfo, Outcome, ReportKey, Series, Tag, data_tag

SCHEMA_VERSION = 1
VERDICTS = ("faster", "slower", "no significant change")


# --------------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------------


def match_key(rec: RunRecord, match: list[str]) -> tuple[str, ...]:
    return (rec.model, *(str(rec.params.get(k, "–")) for k in match))


def verdict(p: float | None, ratio: float, ci: tuple[float, float] | None, alpha: float,
            threshold: float) -> tuple[str, str]:
    """(verdict, detail) from the test, the interval and the threshold (see the module docstring)."""
    change = ratio - 1
    if p is None or ci is None:
        return "no significant change", "too few samples for a test and an interval"
    sig = p < alpha and (ci[0] > 1 or ci[1] < 1)
    if sig and change >= threshold and ci[0] > 1:
        return "slower", f"{change:+.1%}, significant (p={p:.2g}) and beyond the ±{threshold:.0%} threshold"
    if sig and change <= -threshold and ci[1] < 1:
        return "faster", f"{change:+.1%}, significant (p={p:.2g}) and beyond the ±{threshold:.0%} threshold"
    if sig:
        return "no significant change", (f"significant (p={p:.2g}) but {change:+.1%} is within the "
                                         f"±{threshold:.0%} threshold")
    if ci[0] - 1 >= -threshold and ci[1] - 1 <= threshold:
        return "no significant change", (f"equivalent: the whole interval [{ci[0] - 1:+.1%}, {ci[1] - 1:+.1%}] "
                                         f"lies within ±{threshold:.0%} (p={p:.2g})")
    return "no significant change", (f"inconclusive: not significant (p={p:.2g}) but the interval "
                                     f"[{ci[0] - 1:+.1%}, {ci[1] - 1:+.1%}] reaches beyond ±{threshold:.0%}; "
                                     "more runs or epochs would tell")


def compare_samples(a: np.ndarray, b: np.ndarray, cfg: Any, rng: np.random.Generator) -> dict[str, Any]:
    """The statistics of one comparison from its two samples (epoch times or per-run medians, ms)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    out: dict[str, Any] = {"n_a": int(a.size), "n_b": int(b.size)}
    if a.size == 0 or b.size == 0:
        out.update(median_a_ms=None, median_b_ms=None, ratio=None, change=None, ci=None, change_ci=None,
                   ci_method="none", mannwhitney=None, verdict="no significant change", detail="no samples")
        return out
    ma, mb = float(np.median(a)), float(np.median(b))
    ratio = mb / ma
    ci, method = ratio_interval(a, b, 1 - cfg.alpha, cfg.resamples, rng, cfg.max_samples)
    mw = mann_whitney(a, b)
    p = mw["p"] if mw else None
    v, detail = verdict(p, ratio, ci, cfg.alpha, cfg.threshold)
    out.update(median_a_ms=ma, median_b_ms=mb, ratio=ratio, change=ratio - 1, ci=list(ci) if ci else None,
               change_ci=[ci[0] - 1, ci[1] - 1] if ci else None, ci_method=method, mannwhitney=mw, verdict=v,
               detail=detail)
    return out


# --------------------------------------------------------------------------------------------------
# the comparison
# --------------------------------------------------------------------------------------------------


def _side(recs: list[RunRecord], analysis: Any) -> dict[str, Any]:
    epochs, medians, removed, runs = [], [], 0, []
    for r in recs:
        ep = kept_epochs(r, analysis)
        kept = ep.kept
        removed += ep.removed
        if kept.size:
            epochs.append(kept)
            medians.append(float(np.median(kept)))
            runs.append(r.run_id)
    pooled = np.concatenate(epochs) if epochs else np.empty(0)
    return {"epochs": pooled, "run_medians": np.array(medians), "outliers_removed": removed, "run_ids": runs,
            "devices": sorted({r.device for r in recs}),
            "git_commits": sorted({r.tags.get(Tag.GIT_COMMIT, "unknown")[:12] for r in recs}),
            data_tag(DataInfo.SHA256): sorted({r.tags.get(data_tag(DataInfo.SHA256), "unknown")[:12] for r in recs})}


def _usable(recs: list[RunRecord]) -> tuple[list[RunRecord], Counter]:
    usable, skipped = [], Counter()
    for r in recs:
        if r.outcome != Outcome.COMPLETED:
            skipped[f"outcome {r.outcome}"] += 1
        elif r.measured(Series.EPOCH_TIME_MS).size == 0:
            skipped["no per-epoch timings"] += 1
        else:
            usable.append(r)
    return usable, skipped


def build_comparison(cfg: Any, recs_a: list[RunRecord], recs_b: list[RunRecord], sweep_a: str, sweep_b: str,
                     uri: str = "") -> dict[str, Any]:
    """compare.json as a dict from the two sweeps' loaded runs; no I/O."""
    c, a_cfg = cfg.compare, cfg.analysis
    rng = np.random.default_rng(a_cfg.seed)
    match = list(c.match)
    use_a, skip_a = _usable(recs_a)
    use_b, skip_b = _usable(recs_b)
    groups: dict[tuple[str, ...], tuple[list[RunRecord], list[RunRecord]]] = {}
    for side, recs in ((0, use_a), (1, use_b)):
        for r in recs:
            groups.setdefault(match_key(r, match), ([], []))[side].append(r)
    comparisons, unmatched = [], []
    for key in sorted(groups):
        ga, gb = groups[key]
        entry: dict[str, Any] = {"model": key[0], "match": dict(zip(match, key[1:], strict=True))}
        if not ga or not gb:
            unmatched.append({**entry, "only_in": sweep_a if ga else sweep_b, "runs": len(ga or gb)})
            continue
        sa, sb = _side(ga, a_cfg), _side(gb, a_cfg)
        n_runs = min(len(sa["run_ids"]), len(sb["run_ids"]))
        unit = c.unit if c.unit != "auto" else ("run" if n_runs >= c.min_runs else "epoch")
        xa, xb = (sa["run_medians"], sb["run_medians"]) if unit == "run" else (sa["epochs"], sb["epochs"])
        stats = compare_samples(xa, xb, c, rng)
        notes = []
        if unit == "epoch":
            notes.append(f"samples are epochs ({len(sa['run_ids'])} vs {len(sb['run_ids'])} runs): epochs of a run "
                         "are autocorrelated, so the p-value is optimistic; the threshold guards the verdict")
        elif n_runs < c.min_runs:
            notes.append(f"only {n_runs} run(s) per side: the run-level test has little power")
        if sa["devices"] != sb["devices"]:
            notes.append(f"devices differ: {', '.join(sa['devices'])} vs {', '.join(sb['devices'])}")
        if sa[data_tag(DataInfo.SHA256)] != sb[data_tag(DataInfo.SHA256)] and "unknown" not in sa[data_tag(DataInfo.SHA256)] + sb[data_tag(DataInfo.SHA256)]:
            notes.append("the data files differ in content (data_sha256): this is not the same data")
        for s, g in ((sa, ga), (sb, gb)):
            s["runs"] = len(g)
            s["epochs_used"] = int(s["epochs"].size)
            s["median_ms"] = float(np.median(s["epochs"])) if s["epochs"].size else None
        entry.update({
            "unit": unit,
            "a": {k: sa[k] for k in ("runs", "epochs_used", "outliers_removed", "median_ms", "devices", "git_commits",
                                     data_tag(DataInfo.SHA256), "run_ids")},
            "b": {k: sb[k] for k in ("runs", "epochs_used", "outliers_removed", "median_ms", "devices", "git_commits",
                                     data_tag(DataInfo.SHA256), "run_ids")},
            **stats, "notes": notes})
        comparisons.append(entry)
    verdicts = Counter(x["verdict"] for x in comparisons)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "compare",
        ReportKey.SWEEP_A: sweep_a,
        ReportKey.SWEEP_B: sweep_b,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tracking_uri": uri,
        "experiment": cfg.tracking.experiment,
        "settings": {"match": match, "threshold": c.threshold, "alpha": c.alpha, "confidence": 1 - c.alpha,
                     "unit": c.unit, "min_runs": c.min_runs, "resamples": c.resamples,
                     "outliers": str(a_cfg.outliers), "seed": a_cfg.seed},
        "comparisons": comparisons,
        "unmatched": unmatched,
        "skipped_runs": {sweep_a: dict(skip_a), sweep_b: dict(skip_b)},
        "summary": {v: verdicts.get(v, 0) for v in VERDICTS},
    }


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def resolve_sweeps(client: Any, exp_id: str, names: list[str]) -> list[str]:
    """``latest`` and ``previous`` (the newest and second-newest sweep) to sweep ids."""
    if not any(n in ("latest", "previous") for n in names):
        return names
    sweeps = known_sweeps(client, exp_id, limit=500)
    pos = {"latest": 0, "previous": 1}
    out = []
    for n in names:
        if n in pos:
            if len(sweeps) <= pos[n]:
                raise AnalysisError(f"compare: {n!r} needs at least {pos[n] + 1} sweep(s); the experiment has "
                                    f"{len(sweeps)}.")
            n = sweeps[pos[n]]
        out.append(n)
    return out


def run_compare(cfg: Any, out_dir: str | Path | None = None, log: Any = print) -> tuple[dict[str, Any], Path]:
    """Read both sweeps, compare, write reports/compare_<a>_vs_<b>/ and log it; returns (report, folder)."""
    uri = tracking_uri(cfg)
    client, exp_id = open_experiment(cfg.tracking, uri)
    a, b = resolve_sweeps(client, exp_id, [str(s) for s in cfg.compare.sweeps])
    if a == b:
        raise AnalysisError(f"compare: both sides are sweep {a!r}; name two different sweeps.")
    sweep_a, runs_a = find_runs(client, exp_id, a)
    sweep_b, runs_b = find_runs(client, exp_id, b)
    recs_a = load_runs(client, runs_a, cfg.analysis.workers)
    recs_b = load_runs(client, runs_b, cfg.analysis.workers)
    report = build_comparison(cfg, recs_a, recs_b, sweep_a, sweep_b, uri)
    folder = Path(out_dir or cfg.out_dir
                  or report_dir(cfg.paths.reports, f"compare_{safe_name(sweep_a)}_vs_{safe_name(sweep_b)}"))
    writable_folder(folder)
    write_folder(folder, lambda tmp: write_comparison(report, tmp, [p for p in [write_comparison_plot(report, tmp)
                                                                          if cfg.analysis.plots else None] if p]))
    if cfg.analysis.log_to_mlflow:
        report["mlflow_run_id"] = log_comparison(client, exp_id, report, folder)
    log(comparison_console(report, folder))
    return report, folder
