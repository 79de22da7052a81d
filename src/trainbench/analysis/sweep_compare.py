"""Compare two sweeps: did a change (driver, code, GPU, package) make training faster or slower?

    python analyze.py compare=<sweep_a>,<sweep_b>          a = baseline, b = candidate
    python analyze.py compare=previous,latest compare.threshold=0.03 compare.alpha=0.01

Runs are matched by model and by the params in ``compare.match`` (default: batch size, data name and size,
precision, compile): each (model, those values) found in both sweeps is one comparison; the rest are
listed as unmatched. Only completed runs count; warmup epochs are dropped and outliers removed per run
with the analysis' rule (``analysis.outliers``), exactly as the sweep analysis does (stats.py).

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

Writes ``reports/compare_<a>_vs_<b>/`` (compare.json, compare.md, compare.png) and logs it to MLflow as
a run tagged ``kind=compare``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from trainbench.analysis.runs import AnalysisError, RunRecord, connect, find_runs, known_sweeps, load_runs
from trainbench.analysis.stats import outlier_mask

SCHEMA_VERSION = 1
VERDICTS = ("faster", "slower", "no significant change")


def compare_argv(argv: list[str]) -> list[str]:
    """``compare=a,b`` (which Hydra would read as a sweep over two values) -> ``compare.sweeps=['a','b']``."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "compare":
            value = value.strip().strip("'\"").strip("[]")
            names = [v.strip().strip("'\"") for v in value.split(",") if v.strip()]
            arg = "compare.sweeps=[" + ",".join(f"'{n}'" for n in names) + "]"
        out.append(arg)
    return out


# --------------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------------


def kept_epochs(rec: RunRecord, analysis: Any) -> tuple[np.ndarray, int]:
    """(epoch times after warmup with outliers and non-finite values removed, number removed)."""
    t = rec.measured("epoch_time_ms")
    finite = t[np.isfinite(t)]
    mask = outlier_mask(finite, getattr(analysis.outliers, "value", analysis.outliers), analysis.iqr_k,
                        analysis.mad_z)
    return finite[~mask], int(mask.sum() + (t.size - finite.size))


def match_key(rec: RunRecord, match: list[str]) -> tuple[str, ...]:
    return (rec.model, *(str(rec.params.get(k, "–")) for k in match))


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def ratio_interval(a: np.ndarray, b: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator,
                   max_samples: int) -> tuple[tuple[float, float] | None, str]:
    """(low, high) of median(b) / median(a) by bootstrap (BCa, percentile if BCa degenerates), and the method."""
    from scipy import stats as st

    if a.size < 2 or b.size < 2:
        return None, "none"
    if a.size > max_samples:
        a = rng.choice(a, size=max_samples, replace=False)
    if b.size > max_samples:
        b = rng.choice(b, size=max_samples, replace=False)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        r = float(np.median(b) / np.median(a))
        return (r, r), "exact"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = st.bootstrap((a, b), _ratio_of_medians, n_resamples=resamples, confidence_level=confidence,
                                   method=method, vectorized=True, paired=False, rng=rng)
            except Exception:  # noqa: BLE001 - degenerate jackknife and friends: try the next method
                continue
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return (lo, hi), method
    return None, "none"


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
    from scipy import stats as st

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    out: dict[str, Any] = {"n_a": int(a.size), "n_b": int(b.size)}
    if a.size == 0 or b.size == 0:
        out.update(median_a_ms=None, median_b_ms=None, ratio=None, change=None, ci=None, change_ci=None,
                   ci_method="none", mannwhitney=None, verdict="no significant change", detail="no samples")
        return out
    ma, mb = float(np.median(a)), float(np.median(b))
    ratio = mb / ma
    ci, method = ratio_interval(a, b, 1 - cfg.alpha, cfg.resamples, rng, cfg.max_samples)
    mw = None
    p = None
    if a.size >= 2 and b.size >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = st.mannwhitneyu(a, b, alternative="two-sided")
        p = float(res.pvalue) if math.isfinite(res.pvalue) else 1.0
        # U of the first sample counts pairs with a > b (ties 1/2): P(b > a) = 1 - U / (n_a n_b)
        mw = {"u": float(res.statistic), "p": p, "prob_b_slower": 1 - float(res.statistic) / (a.size * b.size)}
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
        kept, n_removed = kept_epochs(r, analysis)
        removed += n_removed
        if kept.size:
            epochs.append(kept)
            medians.append(float(np.median(kept)))
            runs.append(r.run_id)
    pooled = np.concatenate(epochs) if epochs else np.empty(0)
    return {"epochs": pooled, "run_medians": np.array(medians), "outliers_removed": removed, "run_ids": runs,
            "devices": sorted({r.device for r in recs}),
            "git_commits": sorted({r.tags.get("git_commit", "unknown")[:12] for r in recs}),
            "data_sha256": sorted({r.tags.get("data_sha256", "unknown")[:12] for r in recs})}


def _usable(recs: list[RunRecord]) -> tuple[list[RunRecord], Counter]:
    usable, skipped = [], Counter()
    for r in recs:
        if r.outcome != "completed":
            skipped[f"outcome {r.outcome}"] += 1
        elif r.measured("epoch_time_ms").size == 0:
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
        if sa["data_sha256"] != sb["data_sha256"] and "unknown" not in sa["data_sha256"] + sb["data_sha256"]:
            notes.append("the data files differ in content (data_sha256): this is not the same data")
        for s, g in ((sa, ga), (sb, gb)):
            s["runs"] = len(g)
            s["epochs_used"] = int(s["epochs"].size)
            s["median_ms"] = float(np.median(s["epochs"])) if s["epochs"].size else None
        entry.update({
            "unit": unit,
            "a": {k: sa[k] for k in ("runs", "epochs_used", "outliers_removed", "median_ms", "devices", "git_commits",
                                     "data_sha256", "run_ids")},
            "b": {k: sb[k] for k in ("runs", "epochs_used", "outliers_removed", "median_ms", "devices", "git_commits",
                                     "data_sha256", "run_ids")},
            **stats, "notes": notes})
        comparisons.append(entry)
    verdicts = Counter(x["verdict"] for x in comparisons)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "compare",
        "sweep_a": sweep_a,
        "sweep_b": sweep_b,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tracking_uri": uri,
        "experiment": cfg.tracking.experiment,
        "settings": {"match": match, "threshold": c.threshold, "alpha": c.alpha, "confidence": 1 - c.alpha,
                     "unit": c.unit, "min_runs": c.min_runs, "resamples": c.resamples,
                     "outliers": getattr(a_cfg.outliers, "value", a_cfg.outliers), "seed": a_cfg.seed},
        "comparisons": comparisons,
        "unmatched": unmatched,
        "skipped_runs": {sweep_a: dict(skip_a), sweep_b: dict(skip_b)},
        "summary": {v: verdicts.get(v, 0) for v in VERDICTS},
    }


# --------------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------------


def _pct(x: Any) -> str:
    return "–" if x is None else f"{x:+.1%}"


_SHORT = {"model.batch_size": "bs", "data.name": "data", "data.n_bars": "bars", "trainer.precision": "prec",
          "trainer.compile": "compile"}


def _key(e: dict[str, Any], keys: list[str] | None = None) -> str:
    """``bs=230 data=...``: the match values of a comparison (only ``keys`` when given)."""
    items = [(k, v) for k, v in e["match"].items() if keys is None or k in keys]
    return " ".join(f"{_SHORT.get(k, k)}={str(v).split('.')[-1] if k == 'trainer.precision' else v}"
                    for k, v in items)


def varying_keys(r: dict[str, Any]) -> list[str]:
    """Match keys whose value differs between the comparisons (the others go in the header)."""
    entries = r["comparisons"] + r["unmatched"]
    return [k for k in r["settings"]["match"] if len({str(e["match"].get(k)) for e in entries}) > 1]


def _label(e: dict[str, Any], keys: list[str]) -> str:
    return (e["model"] + " " + _key(e, keys)).strip()


def console_table(r: dict[str, Any], folder: Path | None = None) -> str:
    s = r["settings"]
    keys = varying_keys(r)
    common = [k for k in s["match"] if k not in keys]
    entries = r["comparisons"] + r["unmatched"]
    lines = [f"compare {r['sweep_a']} (a) -> {r['sweep_b']} (b) · threshold ±{s['threshold']:.0%} · alpha "
             f"{s['alpha']:g} · {s['confidence']:.0%} intervals"]
    if entries and common:
        lines.append("matched on model and " + _key(entries[0], common))
    w = max([len(_label(e, keys)) for e in entries] + [5])
    hdr = (f"{'model':{w}s} {'unit':5s} {'n a/b':>9s} {'a ms':>9s} {'b ms':>9s} {'change':>8s} {'interval':>18s} "
           f"{'p':>8s}  verdict")
    lines += [hdr, "-" * len(hdr)]
    for e in r["comparisons"]:
        ci = e["change_ci"]
        cis = "–" if not ci else f"[{ci[0]:+.1%}, {ci[1]:+.1%}]"
        p = e["mannwhitney"]["p"] if e["mannwhitney"] else None
        v = e["verdict"].upper() if e["verdict"] != VERDICTS[2] else e["verdict"]
        lines.append(f"{_label(e, keys):{w}s} {e['unit']:5s} {e['n_a']:>4d}/{e['n_b']:<4d} {_n(e['median_a_ms']):>9s} "
                     f"{_n(e['median_b_ms']):>9s} {_pct(e['change']):>8s} {cis:>18s} "
                     f"{'–' if p is None else format(p, '.2g'):>8s}  {v}")
    for u in r["unmatched"]:
        lines.append(f"{_label(u, keys):{w}s} unmatched: only in {u['only_in']} ({u['runs']} run(s))")
    if not r["comparisons"]:
        lines.append("no model/config was measured in both sweeps: nothing to compare (see compare.match)")
    sm = r["summary"]
    lines.append(f"\n{sm['slower']} slower, {sm['faster']} faster, {sm['no significant change']} without a "
                 "significant change")
    if folder is not None:
        lines.append(f"report: {folder / 'compare.md'}")
    return "\n".join(lines)


def _n(x: Any) -> str:
    return "–" if x is None else f"{x:.4g}"


def markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    out = [f"# Sweep comparison: {r['sweep_a']} → {r['sweep_b']}\n",
           f"Generated {r['generated_at']} from {r['tracking_uri']} (experiment `{r['experiment']}`). Runs matched "
           f"by model and {', '.join(f'`{m}`' for m in s['match'])}. Change = median(b) / median(a) - 1 with a "
           f"{s['confidence']:.0%} bootstrap interval; two-sided Mann-Whitney U; verdict at ±{s['threshold']:.0%} "
           f"and alpha {s['alpha']:g}.\n",
           "| model | match | unit | n a / b | a median ms | b median ms | change | interval | p | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for e in r["comparisons"]:
        ci = e["change_ci"]
        p = e["mannwhitney"]["p"] if e["mannwhitney"] else None
        out.append(f"| {e['model']} | {_key(e)} | {e['unit']} | {e['n_a']} / {e['n_b']} | {_n(e['median_a_ms'])} | "
                   f"{_n(e['median_b_ms'])} | {_pct(e['change'])} | "
                   f"{'–' if not ci else f'{ci[0]:+.1%} … {ci[1]:+.1%}'} | {'–' if p is None else f'{p:.2g}'} | "
                   f"**{e['verdict']}** |")
    out.append("")
    for e in r["comparisons"]:
        out.append(f"- **{e['model']}** ({_key(e)}): {e['detail']}.")
        out += [f"  - {n}" for n in e["notes"]]
        for side in ("a", "b"):
            x = e[side]
            out.append(f"  - {side}: {x['runs']} run(s) on {', '.join(x['devices'])}, commit "
                       f"{', '.join(x['git_commits'])}, {x['epochs_used']} epochs ({x['outliers_removed']} outliers "
                       "removed)")
    if r["unmatched"]:
        out.append("\n## Unmatched\n")
        out += [f"- {u['model']} ({_key(u)}): only in {u['only_in']}" for u in r["unmatched"]]
    return "\n".join(out) + "\n"


def write_plot(r: dict[str, Any], folder: Path) -> Path | None:
    """compare.png: the change of each comparison with its interval, and the threshold band."""
    if not r["comparisons"]:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

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
    ax.set_yticks(range(len(comps)), [_label(e, keys)[:40] for e in comps], fontsize=8)
    ax.margins(y=0.2)
    ax.invert_yaxis()
    ax.set_xlabel(f"change of median epoch time, % ({r['settings']['confidence']:.0%} interval)")
    ax.set_title(f"{r['sweep_a']} → {r['sweep_b']}", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    p = folder / "compare.png"
    fig.savefig(p, dpi=90)
    plt.close(fig)
    return p


def write_comparison(r: dict[str, Any], folder: Path, plot: bool = True) -> list[Path]:
    from trainbench.analysis.report import clean

    folder.mkdir(parents=True, exist_ok=True)
    png = write_plot(r, folder) if plot else None
    r["plots"] = [png.name] if png else []
    files = [folder / "compare.json", folder / "compare.md"]
    files[0].write_text(json.dumps(clean(r), indent=2, allow_nan=False) + "\n")
    files[1].write_text(markdown(r))
    return files + ([png] if png else [])


def labels_of(comparisons: list[dict[str, Any]]) -> list[str]:
    """A metric/tag-safe label per comparison: the model, plus its match values when a model appears twice."""
    count = Counter(e["model"] for e in comparisons)
    out = []
    for e in comparisons:
        lab = e["model"] if count[e["model"]] == 1 else e["model"] + "_" + _key(e).replace(" ", "_")
        out.append("".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in lab))
    return out


def log_to_mlflow(client: Any, exp_id: str, r: dict[str, Any], folder: Path) -> str:
    """A run tagged kind=compare (sweep_a, sweep_b, verdict.<model>) with change metrics and the folder."""
    from trainbench.analysis.report import log_folder_run

    labels = labels_of(r["comparisons"])
    tags = {"kind": "compare", "sweep_a": r["sweep_a"], "sweep_b": r["sweep_b"],
            **{f"verdict.{lab}": e["verdict"] for lab, e in zip(labels, r["comparisons"], strict=True)}}
    values: dict[str, Any] = {}
    for lab, e in zip(labels, r["comparisons"], strict=True):
        values[f"change_pct.{lab}"] = None if e["change"] is None else 100 * e["change"]
        values[f"p_value.{lab}"] = (e["mannwhitney"] or {}).get("p")
    for v, n in r["summary"].items():
        values[f"n_{v.replace(' ', '_')}"] = n
    return log_folder_run(client, exp_id, f"compare-{r['sweep_a']}-vs-{r['sweep_b']}", tags, values, folder)


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
    from trainbench.analysis.pipeline import _safe, report_dir, tracking_uri

    uri = tracking_uri(cfg)
    client, exp_id = connect(uri, cfg.tracking.experiment, cfg.tracking.timeout_s)
    a, b = resolve_sweeps(client, exp_id, [str(s) for s in cfg.compare.sweeps])
    if a == b:
        raise AnalysisError(f"compare: both sides are sweep {a!r}; name two different sweeps.")
    sweep_a, runs_a = find_runs(client, exp_id, a)
    sweep_b, runs_b = find_runs(client, exp_id, b)
    recs_a = load_runs(client, runs_a, cfg.analysis.workers)
    recs_b = load_runs(client, runs_b, cfg.analysis.workers)
    report = build_comparison(cfg, recs_a, recs_b, sweep_a, sweep_b, uri)
    folder = Path(out_dir or cfg.out_dir or report_dir(cfg.paths.reports, f"compare_{_safe(sweep_a)}_vs_{_safe(sweep_b)}"))
    write_comparison(report, folder, plot=cfg.analysis.plots)
    if cfg.analysis.log_to_mlflow:
        report["mlflow_run_id"] = log_to_mlflow(client, exp_id, report, folder)
    log(console_table(report, folder))
    return report, folder
