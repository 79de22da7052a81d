"""The analysis over a large sweep: 100 runs x 500 epochs in a temporary sqlite store (target < 10 s).

Times ``run_analysis`` end to end with the default settings and the intervals that hold under
autocorrelation (docs/report-schema.md: batch means, across-run intervals, a circular block bootstrap of the
median and p95 with 2,000 resamples; plots; logging the report back to MLflow): reading every run (one
epochs.json download each), statistics, decision, report files. Epoch times are AR(1) series (lag-one
correlation 0.5), so the block bootstrap works with realistic block lengths. Each run's validation loss is
a noisy exponential approach to a plateau beyond its measured epochs (a different rate per run), so the
plan's learning-curve extrapolation (three families fitted per run, the range from parametric draws) is part
of the timed analysis, as it is for a real sweep's curves. Writing the store is setup and is not timed.

``analysis.curve_range_coverage``: how honest the extrapolated epochs' range is, not only how fast: the share
of noisy curves (the test suite's curves, tests/analysis/test_curves.py: exponential approaches with a known
plateau epoch by the threshold rule, 40 noise draws each) whose 5-95% range holds the true plateau epoch.
``analysis.curve_range_coverage_refit`` puts beside it the range the analysis used before (each family refitted
to block-resampled residuals, ``bootstrap`` refits per curve) on the same curves, for the full suite only
(about 70x the CPU time); the figure to compare is coverage at a similar width (``details.median_log_width``).
"""

from __future__ import annotations

import json
import math
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
        # still improving at the last epoch (no early stop): extrapolated, as test_curves' slow approach (1/300)
        b = rng.uniform(1 / 400, 1 / 200)
        val = 0.3 + 0.3 * np.exp(-b * np.arange(1, t.size + 1)) + rng.normal(0.0, 0.01, t.size)
        series = {"warmup_epochs": 5, "epoch_time_ms": t.tolist(), "loss": np.linspace(1, 0.5, t.size).tolist(),
                  "val_loss": val.tolist(),
                  "grad_norm": np.full(t.size, 0.4).tolist(), "peak_vram_mb": np.full(t.size, 900.0).tolist()}
        p = root / "epochs.json"
        p.write_text(json.dumps(series))
        c.log_artifact(run.info.run_id, str(p))
        c.set_terminated(run.info.run_id, "FINISHED")
    return uri


#: the test suite's noisy curves with a known plateau (tests/analysis/test_curves.py): c + a exp(-b x) + noise
#: over n epochs -> (c, a, b, n, noise)
COVERAGE_CURVES = {"b=0.03, 50 epochs, noise 0.003": (0.5, 1.0, 0.03, 50, 0.003),
                   "b=0.03, 50 epochs, noise 0.01": (0.5, 1.0, 0.03, 50, 0.01),
                   "b=1/300, 500 epochs, noise 0.01": (0.3, 0.3, 1 / 300, 500, 0.01),
                   "b=0.02, 60 epochs, noise 0.002": (0.0, 10.0, 0.02, 60, 0.002)}


def _plateau_epoch(b: float, threshold: float) -> int:
    """The first e with f(e) - f(e+1) < threshold (f(1) - c) for f = c + a exp(-b x)."""
    return math.floor(1 + math.log((1 - math.exp(-b)) / threshold) / b) + 1


def _refit_range(y: np.ndarray, rule, rng: np.random.Generator, block: int = 5):
    """The range as the analysis drew it before its parametric draws: today's gates and fits, then each family
    (drawn by its Akaike weight) refitted to its fit plus block-resampled residuals ``rule.bootstrap`` times."""
    from trainbench.analysis.plan import curves as C

    est = C.extrapolate(y, rule, rng)
    if est.epochs is None:
        return None
    x = np.arange(1, y.size + 1, dtype=float)
    fits = {k: f for k in C.FAMILIES if (f := C._fit(k, x, y)) is not None}
    aic = {k: C._aic(sse, y.size, len(p)) for k, (p, sse, _) in fits.items()}
    w = {k: math.exp(-(a - min(aic.values())) / 2) for k, a in aic.items()}
    names = list(w)
    probs = np.array([w[k] for k in names]) / sum(w.values())
    fitted = {k: C.FAMILIES[k](x, *fits[k][0]) for k in names}
    stops = []
    for _ in range(rule.bootstrap):
        k = names[int(rng.choice(len(names), p=probs))]
        starts = rng.integers(0, max(1, y.size - block + 1), size=-(-y.size // block))
        idx = (starts[:, None] + np.arange(block)[None, :]).ravel()[: y.size]
        r = C._fit(k, x, fitted[k] + (y - fitted[k])[idx])
        if r is not None:
            stops.append(C.stop_epochs(C.FAMILIES[k], r[0][None, :], rule.threshold, rule.max_epochs)[0])
    arr = np.minimum(np.asarray(stops), rule.max_epochs)
    return [int(np.floor(np.percentile(arr, 5))), int(np.ceil(np.percentile(arr, 95)))] if arr.size else None


def _coverage(method: str, seeds: int) -> Result:
    """The share of the curves' 5-95% ranges that hold their true plateau epoch, and the ranges' median width."""
    from trainbench.analysis.plan.curves import CurveRule, extrapolate
    from trainbench.measure.hardware import hardware_label

    rule = CurveRule()
    per, widths, covered, total = {}, [], 0, 0
    t0 = time.process_time()
    for name, (c, a, b, n, noise) in COVERAGE_CURVES.items():
        truth, hits, used = _plateau_epoch(b, rule.threshold), 0, 0
        for s in range(seeds):
            y = c + a * np.exp(-b * np.arange(1, n + 1)) + np.random.default_rng(1000 + s).normal(0, noise, n)
            rng = np.random.default_rng(s)
            rng_range = extrapolate(y, rule, rng).epochs_range if method == "parametric" else _refit_range(y, rule, rng)
            if rng_range is None:
                continue
            used += 1
            hits += rng_range[0] <= truth <= rng_range[1]
            widths.append(math.log(rng_range[1] / max(rng_range[0], 1)))
        per[name] = {"true_epoch": truth, "covered": hits, "ranges": used}
        covered, total = covered + hits, total + used
    name = "analysis.curve_range_coverage" + ("" if method == "parametric" else "_refit")
    return Result(name, 100 * covered / max(total, 1), "%", target="~90% (a 5-95% range)",
                  device=hardware_label("cpu"),
                  details={"method": method, "per_curve": per, "seeds": seeds, "bootstrap": rule.bootstrap,
                           "median_log_width": round(float(np.median(widths)), 3) if widths else None,
                           "cpu_s": round(time.process_time() - t0, 1)})


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
        cfg.decision.offers = "none"  # one priced instance, as the baselines were measured (not the ~30 offers)
        cfg = validate_analyze(cfg)
        t0, c0 = time.perf_counter(), time.process_time()
        report, _ = run_analysis(cfg, log=lambda *_: None)
        seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    assert len(report["runs"]) == runs
    e = report["models"][models[0]]["epoch_time_ms"]
    assert e["ci95_mean_basis"] == "runs" and "circular block" in e["bootstrap"]["method"]
    from trainbench.measure.hardware import hardware_label

    # the curves' path the analysis took per model (extrapolated: the three families fitted to every run)
    basis = {k: (m.get("plan") or {}).get("epochs_basis") for k, m in report["models"].items()}
    coverage = [_coverage("parametric", 10 if quick else 40)]
    if quick:
        coverage.append(Result("analysis.curve_range_coverage_refit", float("nan"), "%", device=hardware_label("cpu"),
                               details={"skipped": "--quick: the refits take ~70x the parametric draws' CPU time"}))
    else:
        coverage.append(_coverage("refit", 10))
    return [*coverage, Result("analysis.seconds", seconds, "s", target="< 10 s", device=hardware_label("cpu"),
                              details={"runs": runs, "epochs_per_run": epochs, "models": len(models),
                            "bootstrap_resamples": cfg.analysis.bootstrap_resamples,
                            "intervals": "across-run (log scale) + circular block bootstrap",
                            "block_bootstrap_epochs_per_model": e["bootstrap"]["epochs"],
                            "plan_epochs_basis": basis,
                            "cpu_s": round(cpu_s, 2)})]  # this process's CPU seconds (all its threads)


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(r.as_dict())
