"""The analysis over a large sweep: 100 runs x 500 epochs in a temporary sqlite store (target < 10 s).

Times ``run_analysis`` end to end with the default settings and the intervals that hold under
autocorrelation (docs/report-schema.md: batch means, across-run intervals, a circular block bootstrap of the
median and p95 with 2,000 resamples; plots; logging the report back to MLflow): reading every run (one
epochs.json download each), statistics, decision, report files. Epoch times are AR(1) series (lag-one
correlation 0.5), so the block bootstrap works with realistic block lengths. Writing the store is setup and
is not timed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import Result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

def _write_store(root: Path, runs: int, epochs: int, models: list[str]) -> str:
    """``runs`` synthetic train runs of ``epochs`` epochs each, spread over ``models`` in turn."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    uri = f"sqlite:///{root}/mlflow.db"
    c = MlflowClient(tracking_uri=uri)
    exp = c.create_experiment("trainbench", artifact_location=str(root / "artifacts"))
    rng = np.random.default_rng(0)
    for i in range(runs):
        model = models[i % len(models)]
        e = rng.normal(0.0, 0.3 * np.sqrt(1 - 0.5**2), epochs + 5)
        t = np.empty(epochs + 5)
        t[0] = rng.normal(0.0, 0.3)
        for j in range(1, t.size):  # AR(1), lag-one correlation 0.5, sd 0.3 ms
            t[j] = 0.5 * t[j - 1] + e[j]
        t += 10.0 * (1 + models.index(model))
        run = c.create_run(exp, run_name=f"{i}_{model}", tags={
            "kind": "train", "model": model, "sweep_id": "bench", "job": str(i), "device": "NVIDIA H200",
            "outcome": "completed", "memory_kind": "vram"})
        m = t[5:]
        summary = {"epoch_time_ms_mean": m.mean(), "epoch_time_ms_p50": np.median(m), "peak_vram_mb_max": 900.0,
                   "epochs_measured": float(epochs)}
        c.log_batch(run.info.run_id, metrics=[Metric(k, float(v), 0, 0) for k, v in summary.items()],
                    params=[Param("model.target_epochs", "1000"), Param("trainer.warmup_epochs", "5"),
                            Param("hardware.power_w", "700")])
        series = {"warmup_epochs": 5, "epoch_time_ms": t.tolist(), "loss": np.linspace(1, 0.5, t.size).tolist(),
                  "grad_norm": np.full(t.size, 0.4).tolist(), "peak_vram_mb": np.full(t.size, 900.0).tolist()}
        p = root / "epochs.json"
        p.write_text(json.dumps(series))
        c.log_artifact(run.info.run_id, str(p))
        c.set_terminated(run.info.run_id, "FINISHED")
    return uri


def run(quick: bool) -> list[Result]:
    from omegaconf import OmegaConf

    from trainbench.analysis.pipeline import run_analysis
    from trainbench.config.analyze import AnalyzeConfig, CloudInstanceConfig, validate_analyze

    runs, epochs = (20, 100) if quick else (100, 500)
    with tempfile.TemporaryDirectory(prefix="tb-bench-analysis-") as tmp:
        root = Path(tmp)
        cfg = OmegaConf.structured(AnalyzeConfig)
        # the runs cover the decision's plan (the registered models), as a default sweep's do
        models = list(cfg.decision.plan)
        cfg.tracking.uri = _write_store(root, runs, epochs, models)
        cfg.paths.root = tmp
        cfg.decision.catalogue = [CloudInstanceConfig("g4dn.xlarge", "t4", usd_per_hour=0.526)]
        cfg = validate_analyze(cfg)
        t0 = time.perf_counter()
        report, _ = run_analysis(cfg, log=lambda *_: None)
        seconds = time.perf_counter() - t0
    assert len(report["runs"]) == runs
    e = report["models"][models[0]]["epoch_time_ms"]
    assert e["ci95_mean_basis"] == "runs" and "circular block" in e["bootstrap"]["method"]
    from trainbench.measure.hardware import hardware_label

    return [Result("analysis.seconds", seconds, "s", target="< 10 s", device=hardware_label("cpu"),
                   details={"runs": runs, "epochs_per_run": epochs, "models": len(models),
                            "bootstrap_resamples": cfg.analysis.bootstrap_resamples,
                            "intervals": "across-run (log scale) + circular block bootstrap",
                            "block_bootstrap_epochs_per_model": e["bootstrap"]["epochs"]})]


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(r.as_dict())
