"""`projection.precision` through analyze.py on a CPU sweep: every entry projects the precision asked for
(auto resolved per GPU), with its range from the calibration and notes on what was converted."""

import json

import numpy as np
import pytest
from analysis_helpers import report_from_store

from helpers.procs import REPO, in_process
from helpers.workloads import DQN, TFT
from trainbench.cli import analyze_command
from trainbench.core.vocab import Summary

GPUS = ["a100_80gb", "v100_16gb", "l4"]
#: What each asked precision projects on (a100_80gb, v100_16gb, l4).
EXPECTED = {"fp32": ("fp32", "fp32", "fp32"), "tf32": ("tf32", "fp32", "tf32"), "bf16": ("bf16", "fp16", "bf16"),
            "fp16": ("fp16", "fp16", "fp16"), "auto": ("bf16", "fp16", "bf16")}


@pytest.fixture(scope="module")
def cpu_sweep(store):
    exp = store.new_experiment("precision")
    rng = np.random.default_rng(0)
    exp.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(20)), sweep_id="cpu-prec", device="cpu",
                extra_metrics={**DQN, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 300.0})
    exp.add_run("tft", 9000 * (1 + 0.01 * rng.standard_normal(20)), sweep_id="cpu-prec", device="cpu",
                extra_metrics={**TFT, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 5000.0})
    return exp


@pytest.mark.slow
@pytest.mark.parametrize("asked", list(EXPECTED))
def test_every_entry_projects_the_precision_asked(cpu_sweep, tmp_path, asked):
    r = report_from_store(cpu_sweep, tmp_path, "sweep=cpu-prec", "tracking.experiment=precision",
                          "analysis.bootstrap_resamples=200", "analysis.plots=false",
                          f"project=[{','.join(GPUS)}]", f"projection.precision={asked}")
    by = {(p["instance"], p["model"]): p for p in r["projections"]}
    assert r["projection_assumptions"]["precision_asked"] == asked
    for gpu, want in zip(GPUS, EXPECTED[asked], strict=True):
        for model in ("dqn", "tft"):
            p = by[(gpu, model)]
            assert p["method"] == "roofline from cpu profile" and p["precision"] == want, (gpu, model, p)
            lo, hi = p["epoch_ms_range"]
            assert lo <= p["epoch_ms"] <= hi
            assert "held-out p10-p90" in p["range_basis"]
            assert any("old coarse profile" in n for n in p["notes"])
            if want in ("bf16", "fp16"):
                assert any(f"matmul_attention fp32->{want}" in n for n in p["notes"])
    # a reference-size TFT: the A100 ahead of the L4 at every precision
    assert by[("l4", "tft")]["epoch_ms"] > by[("a100_80gb", "tft")]["epoch_ms"]


def test_an_unknown_projection_precision_is_one_clear_error(cpu_sweep, tmp_path):
    p = in_process(analyze_command, [f"tracking.uri={cpu_sweep.uri}", "tracking.experiment=precision",
                                     "sweep=cpu-prec", f"paths.root={tmp_path}", "projection.precision=int8"],
                   cwd=REPO)
    # the value set is the config's enum: Hydra names the key, the value and the choices; bad input exits 2
    assert p.returncode == 2 and "projection.precision" in p.stderr and "int8" in p.stderr, p.stderr
    assert "auto, fp32, tf32, bf16, fp16" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").rglob("report.json"))


@pytest.mark.slow
def test_the_command_line_projects_at_tf32(cpu_sweep, tmp_path):
    p = in_process(analyze_command, [f"tracking.uri={cpu_sweep.uri}", "tracking.experiment=precision",
                                     "sweep=cpu-prec", f"paths.root={tmp_path}", "analysis.bootstrap_resamples=200",
                                     "project=a100_80gb,v100_16gb,l4", "projection.precision=tf32"], cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads((tmp_path / "reports" / "cpu-prec" / "report.json").read_text())
    got = {(e["instance"], e["model"]): e["precision"] for e in report["projections"] if e["instance"] in GPUS and e["model"] in ("dqn", "tft")}
    assert got == {(g, m): w for g, w in zip(GPUS, EXPECTED["tf32"], strict=True) for m in ("dqn", "tft")}
