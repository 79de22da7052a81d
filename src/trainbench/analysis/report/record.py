"""Log the analysis back to MLflow: which store the analysis reads and writes, and one run per report folder
(``kind=analysis`` for a sweep's report, ``kind=compare`` for a comparison of two sweeps).

Neither kind is a training run: ``sweep=latest`` and the analysis never pick one up (they look for
``kind=train``).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

from trainbench.analysis.report.report import match_text
from trainbench.analysis.report_types import Report
from trainbench.analysis.words import hours_phrase
from trainbench.config.analyze import tracking_uri  # noqa: F401 - the analysis' store (re-exported)
from trainbench.core.vocab import Kind, ReportKey, Summary, Tag, change_pct, p_value, verdict_tag


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


def log_analysis(client: Any, exp_id: str, report: Report, folder: Path) -> str:
    """Log the report folder as a run tagged kind=analysis with the sweep's sweep_id, then make it read like
    the other runs in the MLflow UI (:func:`annotate_analysis_run`); returns its id."""
    d = report.decision
    tags = {Tag.KIND: Kind.ANALYSIS, Tag.SWEEP_ID: report.sweep_id, ReportKey.RECOMMENDATION: d.recommendation,
            ReportKey.CONFIDENCE: d.confidence, ReportKey.PARTIAL: str(report.partial).lower()}
    values = {Summary.TOTAL_HOURS: d.total_hours, Summary.TOTAL_HOURS_CONSERVATIVE: d.total_hours_conservative,
              Summary.LOCAL_USD: report.costs.local.usd, Summary.MODELS_MEASURED: len(report.coverage.measured),
              Summary.MODELS_MISSING: len(report.coverage.missing)}
    run_id = log_folder_run(client, exp_id, f"analysis-{report.sweep_id}", tags, values, folder)
    annotate_analysis_run(client, exp_id, run_id, report)
    return run_id


def annotate_analysis_run(client: Any, exp_id: str, run_id: str, report: Report) -> None:
    """Make the analysis run read like the others in the MLflow UI: nested under its sweep's parent run
    (when the sweep has one), the headline figures as params and metrics, MLflow's source tags and a
    description. Best effort: the report is already written and logged."""
    from mlflow.entities import Metric, Param, RunTag

    from trainbench.tracking.conventions import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE, system_tags
    from trainbench.tracking.nesting import find_sweep_run

    d = report.decision
    params = {Tag.SWEEP_ID: report.sweep_id, ReportKey.RECOMMENDATION: d.recommendation,
              ReportKey.CONFIDENCE: d.confidence, ReportKey.PARTIAL: str(report.partial).lower(),
              Tag.DEVICE: str(report.device), ReportKey.MODELS_IN_TOTAL: ",".join(d.models_in_total) or "none"}
    ts = int(time.time() * 1000)
    metrics = {Summary.TOTAL_HOURS: d.total_hours, Summary.TOTAL_HOURS_CONSERVATIVE: d.total_hours_conservative,
               Summary.CONFIDENCE_LEVEL: {"low": 0, "medium": 1, "high": 2}.get(d.confidence)}
    note = (f"Analysis of sweep `{report.sweep_id}`: **{d.recommendation}**, confidence **{d.confidence}**"
            f"{' (partial)' if report.partial else ''}\n\n- projected total: {hours_phrase(d.total_hours)}; "
            f"conservative: {hours_phrase(d.total_hours_conservative)}\n- timings from: "
            f"{report.device or 'none'}\n- the full report: `report.md` in this run's artifacts\n")
    tags = {**system_tags("analyze.py"), MLFLOW_RUN_NOTE: note}
    try:
        parent = find_sweep_run(client, exp_id, report.sweep_id) if report.sweep_id != "all" else None
        if parent:
            tags[MLFLOW_PARENT_RUN_ID] = parent
        logged = client.get_run(run_id).data.metrics  # log_analysis logs some of them already
        client.log_batch(run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()
                                          if k not in logged and v is not None and math.isfinite(v)],
                         params=[Param(k, v) for k, v in params.items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])
    except Exception as e:  # noqa: BLE001 - the report itself is logged; only the UI niceties are lost
        import logging

        logging.getLogger("trainbench").warning("could not annotate the analysis run %s: %s", run_id, e)


def metric_labels(comparisons: list[dict[str, Any]]) -> list[str]:
    """A metric/tag-safe label per comparison: the model, plus its match values when a model appears twice."""
    count = Counter(e["model"] for e in comparisons)
    out = []
    for e in comparisons:
        lab = e["model"] if count[e["model"]] == 1 else e["model"] + "_" + match_text(e).replace(" ", "_")
        out.append("".join(ch if ch.isalnum() or ch in "-_./" else "_" for ch in lab))
    return out


def log_comparison(client: Any, exp_id: str, r: dict[str, Any], folder: Path) -> str:
    """A run tagged kind=compare (sweep_a, sweep_b, verdict.<model>) with change metrics and the folder."""
    labels = metric_labels(r["comparisons"])
    tags = {Tag.KIND: Kind.COMPARE, ReportKey.SWEEP_A: r[ReportKey.SWEEP_A], ReportKey.SWEEP_B: r[ReportKey.SWEEP_B],
            **{verdict_tag(lab): e["verdict"] for lab, e in zip(labels, r["comparisons"], strict=True)}}
    values: dict[str, Any] = {}
    for lab, e in zip(labels, r["comparisons"], strict=True):
        values[change_pct(lab)] = None if e["change"] is None else 100 * e["change"]
        values[p_value(lab)] = (e["mannwhitney"] or {}).get("p")
    for v, n in r["summary"].items():
        values[f"n_{v.replace(' ', '_')}"] = n
    return log_folder_run(client, exp_id, f"compare-{r[ReportKey.SWEEP_A]}-vs-{r[ReportKey.SWEEP_B]}", tags, values, folder)
