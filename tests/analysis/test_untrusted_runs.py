"""Logged values are input (issue 31): forged runs written with MLflow's client into a scratch store are
validated with the command line's ranges and listed as invalid with the reason, never computed with; and
everything logged that reaches report.md or the console is escaped for where it goes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from analysis_helpers import analyze_cfg, noisy

from trainbench.analysis.pipeline import run_analysis
from trainbench.analysis.report.report import console_summary
from trainbench.core.vocab import Outcome, ParamKey, Series, Summary, Tag

GOOD_MS = 5.0


def _report(store, tmp_path, *overrides):
    cfg = analyze_cfg(store, tmp_path, list(overrides))
    return run_analysis(cfg, out_dir=tmp_path / "report", log=lambda *_: None)


FORGED = {  # job -> (epoch times, add_run keywords): each impossible in its own way
    "negative": (-noisy(GOOD_MS, 30, 0.01, 2), {}),
    "zero": (np.zeros(30), {}),
    "huge": (np.full(30, 1e308), {}),
    "warmup": (noisy(GOOD_MS / 100, 30, 0.01, 3), {"warmup": -2}),
    "power": (noisy(GOOD_MS, 30, 0.01, 4), {"power_w": -500.0}),
    "price": (noisy(GOOD_MS, 30, 0.01, 5), {"extra_params": {"hardware.price_per_kwh": "inf"}}),
    "target": (noisy(GOOD_MS, 30, 0.01, 6), {"target_epochs": -1000}),
    # upper bounds: values no plan, machine or tariff has
    "target_huge": (noisy(GOOD_MS, 30, 0.01, 7), {"target_epochs": 10**12}),
    "power_huge": (noisy(GOOD_MS, 30, 0.01, 8), {"power_w": 1e300}),
    "price_huge": (noisy(GOOD_MS, 30, 0.01, 9), {"extra_params": {"hardware.price_per_kwh": "1e300"}}),
    # non-numeric params, checked by the command line's own rules
    "batch0": (noisy(GOOD_MS, 30, 0.01, 10), {"batch_size": 0}),
    "batch_text": (noisy(GOOD_MS, 30, 0.01, 11), {"extra_params": {ParamKey.BATCH_SIZE: "lots"}}),
    "size_markup": (noisy(GOOD_MS, 30, 0.01, 12), {"extra_params": {ParamKey.MODEL_SIZE: "<b>big</b>"}}),
}
REASONS = {"negative": "epoch_time_ms holds 30 impossible", "zero": "epoch_time_ms holds 30 impossible",
           "huge": "epoch_time_ms holds 30 impossible", "warmup": "trainer.warmup_epochs=-2 is out of range",
           "power": "hardware.power_w=-500", "price": "hardware.price_per_kwh=inf is invalid",
           "target": "model.target_epochs=-1000 is out of range",
           "target_huge": "model.target_epochs=1000000000000 is out of range: it must be <= 1000000",
           "power_huge": "hardware.power_w=1e+300 is out of range", "price_huge": "hardware.price_per_kwh=1e+300 is out",
           "batch0": "model.batch_size=0 is invalid", "batch_text": "model.batch_size='lots' is invalid",
           "size_markup": "model.size='<b>big</b>' is invalid"}


def test_runs_with_impossible_logged_values_are_listed_invalid_never_computed_with(store, tmp_path):
    exp = store.new_experiment("forged-values")
    exp.add_run("dqn", noisy(GOOD_MS, 60, 0.01, 1), sweep_id="v", target_epochs=100, power_w=100.0)
    for job, (times, kw) in FORGED.items():
        exp.add_run("dqn", times, sweep_id="v", job=job, **{"target_epochs": 100, "power_w": 100.0, **kw})
    r, folder = _report(exp, tmp_path, "sweep=v", "decision.plan=[dqn]", "analysis.plots=true")
    rows = {x["job"]: x for x in r["runs"]}
    assert rows["0"]["used_for_timing"] and rows["0"]["excluded_reason"] is None
    for job, needle in REASONS.items():
        x = rows[job]
        assert x["outcome"] == Outcome.INVALID and not x["used_for_timing"], job
        assert x["excluded_reason"].startswith("invalid: ") and needle in x["excluded_reason"], (job, x)
    # only the valid run is computed with: its mean, its target epochs, its power, a positive cost
    m = r["models"]["dqn"]
    assert m["runs_timed"] == 1 and m[Series.EPOCH_TIME_MS]["mean"] == pytest.approx(GOOD_MS, rel=0.02)
    assert m["projection"]["target_epochs"] == 100
    d = r["decision"]
    assert d[Summary.TOTAL_HOURS] == pytest.approx(GOOD_MS * 100 / 3.6e6, rel=0.02)
    assert r["costs"]["local"]["power_w"] == 100.0 and r["costs"]["local"]["usd"] > 0
    assert (folder / "report.md").is_file() and (folder / "epoch_times.png").is_file()


def test_nan_epochs_are_dropped_with_a_note(store, tmp_path):
    exp = store.new_experiment("nan-epochs")
    t = noisy(GOOD_MS, 60, 0.01, 7)
    t[[10, 20, 30]] = np.nan
    exp.add_run("dqn", t, sweep_id="n")
    r, _ = _report(exp, tmp_path, "sweep=n", "decision.plan=[dqn]")
    (x,) = r["runs"]
    assert x["used_for_timing"] and any("3 measured epoch(s) without a epoch_time_ms (NaN) dropped" in n
                                        for n in x["notes"]), x["notes"]
    m = r["models"]["dqn"]
    assert m["samples_used"] <= 57  # the NaN epochs are not samples


def _rows_well_formed(md: str) -> None:
    for line in md.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert cells, line
    tables = re.findall(r"((?:^\|.*\n)+)", md, re.M)
    for t in tables:
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in t.splitlines()}
        assert len(widths) == 1, t


ATTACKS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "x\n# Forged heading\n| a | b |",
           "\x1b]0;pwned\x07\x1b[2J", "[click](javascript:alert(1))", "cpu\u202egnp.exe\u202c\u200f\u2066x\u2069"]


def test_logged_text_is_escaped_in_report_md_and_the_console(store, tmp_path):
    exp = store.new_experiment("forged-text")
    exp.add_run("dqn", noisy(GOOD_MS, 60, 0.01, 1), sweep_id="t", device="cpu")
    for i, attack in enumerate(ATTACKS):
        exp.add_run("dqn", noisy(GOOD_MS, 30, 0.01, 10 + i), sweep_id="t", job=attack, device=f"cpu {attack}",
                    extra_tags={Tag.ERROR: attack})
    # another sweep's forged run reaches the devices-compared table: it is escaped and named
    other = exp.add_run("dqn", noisy(GOOD_MS / 2, 30, 0.01, 30), sweep_id="elsewhere",
                        device="<script>steal()</script>\x1b[2J")
    r, folder = _report(exp, tmp_path, "sweep=t", "decision.plan=[dqn]", "analysis.device=cpu")
    md = (folder / "report.md").read_text()
    for raw in ("<script", "<img", "\x1b", "\x07", "](javascript", "\u202e", "\u202c", "\u200f", "\u2066"):
        assert raw not in md, raw
    assert "u202egnp.exe" in md  # the bidi controls shown as escapes
    assert [line for line in md.splitlines() if line.startswith("# ")] == [md.splitlines()[0]]
    assert "Forged heading" in md and "&lt;script&gt;" in md  # shown as text
    _rows_well_formed(md)
    assert other in [x["run_id"] for x in r["devices"]["runs"]] and f"`{other}` (sweep `elsewhere`" in md
    text = console_summary(r, folder)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text


def test_a_forged_run_in_another_sweep_with_impossible_values_is_not_compared(store, tmp_path):
    exp = store.new_experiment("forged-speeds")
    exp.add_run("dqn", noisy(GOOD_MS, 60, 0.01, 1), sweep_id="mine", device="cpu")
    exp.add_run("dqn", noisy(GOOD_MS / 10, 30, 0.01, 2), sweep_id="theirs", device="Tesla T4",
                extra_params={ParamKey.WARMUP_EPOCHS: "-2"})
    exp.add_run("dqn", np.full(30, 1e308), sweep_id="theirs2", device="NVIDIA H100")
    r, _ = _report(exp, tmp_path, "sweep=mine", "decision.plan=[dqn]")
    assert r["devices"]["comparisons"] == [] and r["devices"]["runs"] == []


@pytest.mark.parametrize(("warmup", "needle"), [
    (1e30, "epochs.json trainer.warmup_epochs=1e+30 is out of range"),
    (10**9, "epochs.json trainer.warmup_epochs=1000000000 is out of range"),
    (2.5, "epochs.json warmup_epochs=2.5 is not a whole number"),
    ("two", "epochs.json warmup_epochs='two' is not a whole number"),
])
def test_an_absurd_warmup_in_epochs_json_makes_the_run_invalid(store, tmp_path, warmup, needle):
    """Not "completed runs hold no per-epoch timings": the run is listed invalid with the reason."""
    import json

    from trainbench.core.vocab import WARMUP_EPOCHS_KEY, Artifact

    exp = store.new_experiment(f"warmup-{abs(hash(str(warmup)))}")
    rid = exp.add_run("dqn", noisy(GOOD_MS, 30, 0.01, 1), sweep_id="w")
    exp.client.log_text(rid, json.dumps({WARMUP_EPOCHS_KEY: warmup, Series.EPOCH_TIME_MS:
                                         list(noisy(GOOD_MS, 30, 0.01, 1))}), Artifact.EPOCHS)
    r, _ = _report(exp, tmp_path, "sweep=w", "decision.plan=[dqn]")
    (x,) = r["runs"]
    assert x["outcome"] == Outcome.INVALID and needle in x["excluded_reason"], x["excluded_reason"]
    m = r["models"]["dqn"]
    assert m["source"] == "missing" and "no per-epoch timings" not in m["missing_reason"], m["missing_reason"]
