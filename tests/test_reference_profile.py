"""The reference size, profiled without a GPU (trainbench/reference_profile.py, issue 48): a CPU-profile job
also profiles its model's reference size in a run of its own, and the analysis decides on that size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench.core.vocab import SOURCE_PROFILED, Artifact, Kind, Outcome, ParamKey, ReportKey, Summary, Tag

REPO = Path(__file__).resolve().parents[1]
#: A CPU-profile sweep kept short: two epochs on a small file, no latency, no noise scale.
SHORT = ("trainer=cpu", "trainer.epochs=2", "trainer.warmup_epochs=0", "trainer.latency.enabled=false",
         "trainer.noise_scale.enabled=false", "trainer.progress=false", "data.n_bars=2000")


def _sweep(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "run.py"), "-m", *SHORT, f"tracking.uri=sqlite:///{root}/mlflow.db",
           f"tracking.artifact_location={root}/artifacts", f"paths.data_dir={root}/data",
           f"hydra.sweep.dir={root}/multi", *args]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)


def _analyse(root: Path, out: Path, *overrides: str) -> dict:
    """report.json of the store under ``root``, analysed in-process as analyze.py would."""
    from trainbench.analysis.pipeline import run_analysis
    from trainbench.compose import compose_run
    from trainbench.config.analyze import validate_analyze

    cfg = validate_analyze(compose_run([f"tracking.uri=sqlite:///{root}/mlflow.db", "sweep=latest",
                                        "hardware=rtx3050ti_4gb", "analysis.plots=false",
                                        "analysis.log_to_mlflow=false", *overrides], root=str(out),
                                       config_name="analyze"))
    report, _ = run_analysis(cfg, out_dir=out / "report", log=lambda *_: None)
    return report


def _runs(root: Path) -> tuple[MlflowClient, list]:
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    return client, client.search_runs([exp.experiment_id], "tags.sweep_id != ''")


@pytest.fixture(scope="module")
def profiled_sweep(tmp_path_factory):
    """tft at its small size (its reference profiled beside it) and dqn (whose two sizes are one config); and a
    second sweep whose reference profile cannot fit its budget."""
    root = tmp_path_factory.mktemp("refprof")
    p = _sweep(root, "model=tft,dqn")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return root, p


@pytest.mark.slow
def test_the_job_profiles_the_reference_size_in_a_run_of_its_own(profiled_sweep) -> None:
    root, p = profiled_sweep
    client, runs = _runs(root)
    train = {r.data.tags[Tag.MODEL]: r for r in runs if r.data.tags.get(Tag.KIND) == Kind.TRAIN}
    prof = [r for r in runs if r.data.tags.get(Tag.KIND) == Kind.PROFILE]
    assert set(train) == {"tft", "dqn"} and len(prof) == 1, [r.data.tags for r in runs]
    ref = prof[0]
    t, params, m = ref.data.tags, ref.data.params, ref.data.metrics
    assert (t[Tag.MODEL], t[Tag.OUTCOME], ref.info.status) == ("tft", Outcome.PROFILED, "FINISHED")
    assert params[ParamKey.MODEL_SIZE] == "reference" and params["model.hidden"] == "160"  # the published size
    assert t[Tag.PROFILE_OF] == train["tft"].info.run_id and t[Tag.SWEEP_ID] == train["tft"].data.tags[Tag.SWEEP_ID]
    assert t[Tag.JOB] == train["tft"].data.tags[Tag.JOB]
    assert m[Summary.PREDICTED_PEAK_VRAM_MB] > 0 and m[Summary.WORKLOAD_FLOPS_PER_EPOCH] > 0
    assert int(params["model_info.train_windows"]) > 0  # the reference encoder's windows on the run's data
    arts = {a.path for a in client.list_artifacts(ref.info.run_id)}
    assert Artifact.WORKLOAD_PROFILE in arts and Artifact.EPOCHS not in arts  # nothing trained
    assert t[Tag.WORKLOAD_PROFILE_MODE].startswith("fake tensors")
    # dqn's small size is its reference config: no profile, the trained run stands for both
    assert train["dqn"].data.tags[Tag.SIZE_SAME_AS] == "reference"
    assert "reference profile: tft at size reference: profiled in" in p.stdout


@pytest.mark.slow
def test_the_analysis_decides_on_the_reference_size(profiled_sweep, tmp_path) -> None:
    root, _ = profiled_sweep
    out = _analyse(root, tmp_path, "decision.plan=[tft,dqn]")
    tft, dqn = out["models"]["tft"], out["models"]["dqn"]
    assert (tft["size"], tft["source"]) == ("reference", SOURCE_PROFILED)
    assert (dqn["size"], dqn["source"]) == ("reference", "measured") and "same workload" in dqn["size_reason"]
    assert out["models"]["tft[small]"]["in_plan"] is False  # the small run: reported, not decided on
    assert out["coverage"][SOURCE_PROFILED] == ["tft"]  # coverage.profiled
    # the team's epochs stand (the curves are 2 epochs of another size), and nobody confirmed them
    assert tft["plan"]["epochs"] == 1500 and tft["plan"]["epochs_basis"].startswith("configured")
    assert tft["plan"]["epochs_confirmed"] is False
    local = next(p for p in out["projections"] if p["instance"] == "local" and p["model"] == "tft")
    assert local["hours"] > 0 and local["method"].startswith("roofline")
    d = out["decision"]
    assert sorted(d[ReportKey.MODELS_IN_TOTAL]) == ["dqn", "tft"]
    assert "profiled on cpu without training (tft)" in d["headline"] and "1500 tft" in d["headline"]
    assert not any("size=small" in r for r in d["confidence_reasons"])
    assert d["p_over_48h"] is not None and 0.0 < d["p_over_48h"] < 1.0  # the unconfirmed epochs are spread


@pytest.mark.slow
def test_a_reference_profile_past_its_budget_leaves_the_job_completed(tmp_path) -> None:
    p = _sweep(tmp_path, "model=tft", "size=tiny", "trainer.reference_profile.budget_s=0.001")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "past its budget of 0.001 s" in p.stdout
    _, runs = _runs(tmp_path)
    prof = [r for r in runs if r.data.tags.get(Tag.KIND) == Kind.PROFILE]
    assert [r.data.tags[Tag.OUTCOME] for r in prof] in ([Outcome.FAILED], [])  # too short to open it, or failed
    out = _analyse(tmp_path, tmp_path, "decision.plan=[tft]")
    tft = out["models"]["tft"]
    assert tft["size"] == "tiny" and tft["source"] == "measured"  # projected from what exists
    assert "size=tiny" in " ".join(out["decision"]["confidence_reasons"])
    assert out["decision"]["p_within_24h"] is None and "does not train" in out["decision"]["probabilities_withheld"]
