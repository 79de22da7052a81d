"""A deterministic sweep for the report's golden test (tests/analysis/test_golden_report.py): run records built
in-process (no MLflow), covering a measured model with curves and a noise scale, runs on 2 ranks, a model with
a workload profile projected onto the catalogue, an OOM, an estimate and a profile without training.

``python tests/analysis/golden_helpers.py`` rewrites the golden report (tests/analysis/golden_report.json) from the
current code: do that only where a change of the report is deliberate, and say which in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for analysis_helpers

from analysis_helpers import analyze_cfg  # noqa: E402

from trainbench.analysis.runs import RunRecord  # noqa: E402
from trainbench.core.vocab import Artifact, Kind, Outcome, ParamKey, Series, Status, Summary, Tag, model_info  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden_report.json"
RTX = "NVIDIA GeForce RTX 3050 Ti Laptop GPU"
#: keys that differ between two builds on the same runs (the clock, the store)
VOLATILE = ("generated_at", "tracking_uri")
#: the two reports: a partial plan (an OOM, an estimate, a profile) on the probabilities, and the measured models
#: alone on the conservative rule (its cheapest instances and rows across GPUs)
SCENARIOS = {
    "partial": ["hardware=rtx3050ti_4gb", "decision.epochs=auto", "decision.recommend_by=probability",
                "decision.plan=[tft,dqn,ppo,mamba2,tlob]", "+decision.estimates.mamba2.epoch_ms=40",
                "+decision.target_epochs.mamba2=1500"],
    "measured": ["hardware=rtx3050ti_4gb", "decision.epochs=auto", "decision.plan=[tft,dqn]", "project=[a100_40gb]"],
}
#: the same models timed on other devices of the experiment: the device comparisons
SPEEDS = [{"model": "dqn", "device": "Tesla T4", "epoch_ms": 10.0, "run_id": "other-1", Tag.SWEEP_ID: "older"},
          {"model": "dqn", "device": RTX, "epoch_ms": 12.1, "run_id": "other-2", Tag.SWEEP_ID: "older"}]


def _group(cls: str, count: float, flops: float, nbytes: float) -> dict[str, Any]:
    return {"cls": cls, "dtype": "fp32", "autocast": "lower", "count": count, "flops": flops, "bytes": nbytes}


def _profile(scale: float) -> dict[str, Any]:
    """A device-neutral workload profile (schema 1) of one epoch."""
    return {"schema": 1, "profiled_on": "cpu", "precision": "fp32", "complete": True, "incomplete_reasons": [],
            "optimizer": {"measured_impl": "foreach", "booked_as": "fused"},
            "kernels": [_group("matmul_attention", 400 * scale, 4e10 * scale, 2e8 * scale),
                        _group("elementwise_norm", 2000 * scale, 1e8 * scale, 8e8 * scale)],
            "chains": [], "host": {"ops": 3000 * scale, "syncs": 10}}


def _rec(model: str, job: int, epochs: Any, *, outcome: str = Outcome.COMPLETED, world: int = 1,
         params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
         series: dict[str, Any] | None = None, tags: dict[str, str] | None = None, profile: Any = None,
         warmup: int = 2, target: int = 400) -> RunRecord:
    t = np.asarray(epochs, dtype=float)
    n = t.size
    p = {"model.name": model, ParamKey.BATCH_SIZE: "256", ParamKey.TARGET_EPOCHS: str(target),
         ParamKey.WARMUP_EPOCHS: str(warmup), ParamKey.MODEL_SIZE: "reference", ParamKey.WORLD_SIZE: str(world),
         ParamKey.TRAINER_PRECISION: "fp32", **{k: str(v) for k, v in (params or {}).items()}}
    s = {Series.EPOCH_TIME_MS: t, "loss": np.linspace(1.0, 0.5, n), Series.GRAD_NORM: np.full(n, 0.5),
         Series.PEAK_VRAM_MB: np.full(n, 800.0), **{k: np.asarray(v, dtype=float) for k, v in (series or {}).items()}}
    m = {Summary.EPOCHS_MEASURED: float(max(0, n - warmup)), f"{Series.PEAK_VRAM_MB}_max": 812.0,
         **(metrics or {})}
    return RunRecord(run_id=f"{model}-{job}-{world}", run_name=f"{job}_{model}", model=model, device=RTX,
                     sweep_id="golden", outcome=outcome, status=Status.FINISHED if outcome == Outcome.COMPLETED else
                     Status.FAILED, start_time=1_700_000_000_000 + job, warmup_epochs=warmup, target_epochs=target,
                     params=p, tags={Tag.KIND: Kind.TRAIN, Tag.MODEL: model, Tag.JOB: str(job),
                                     Tag.MEMORY_KIND: "vram", **(tags or {})},
                     metrics=m, series=s, series_source=Artifact.EPOCHS, workload_profile=profile)


def golden_records() -> list[RunRecord]:
    """The sweep: every number fixed (seeded), so two builds on it agree to the last digit."""
    rng = np.random.default_rng(49)
    n = 110
    val = 1.0 / (1 + np.arange(n) / 6) + 0.004 * np.arange(n)  # levels off, then climbs: a best epoch
    dp = {model_info("num_params"): 2_000_000, model_info("train_windows"): 40_000,
          ParamKey.DATA_PARALLEL_SUPPORTED: "true"}
    noise = {Summary.NOISE_SCALE: 900.0, Summary.NOISE_SCALE_PAIRS: 12.0, Summary.NOISE_SCALE_REL_SE: 0.3}
    recs = [_rec("tft", j, np.abs(rng.normal(1.2e6, 2e4, n)), params=dp, metrics=noise,
                 series={Series.VAL_LOSS: val * (1 + 0.01 * j)}, profile=_profile(3.0)) for j in range(3)]
    recs.append(_rec("tft", 3, np.abs(rng.normal(6.5e5, 1e4, 20)), world=2,
                     params={**dp, ParamKey.BATCH_SIZE_PER_RANK: "256"},
                     series={Series.COMM_EXPOSED_MS: np.full(20, 3e4)}))
    recs += [_rec("dqn", 4 + j, np.abs(rng.normal(12.0, 0.5 + j, 40)), params={ParamKey.DATA_PARALLEL_SUPPORTED:
                                                                              "false"}, profile=_profile(0.01))
             for j in range(2)]
    recs.append(_rec("ppo", 6, np.abs(rng.normal(180.0, 3.0, 3)), outcome=Outcome.OOM,
                     metrics={Summary.PEAK_VRAM_MB_AT_FAILURE: 4000.0}))
    recs.append(_rec("tlob", 7, [], outcome=Outcome.PROFILED, tags={Tag.KIND: Kind.PROFILE}, profile=_profile(1.0),
                     warmup=0, metrics={Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 2500.0}))
    return recs


def golden_report(scenario: str) -> dict[str, Any]:
    """report.json of :func:`golden_records` under one of :data:`SCENARIOS`, built in-process, without its
    volatile keys, as json writes and reads it."""
    from trainbench.analysis.fields import to_json
    from trainbench.analysis.pipeline import build_report

    store = SimpleNamespace(uri="sqlite:///unused.db", experiment="trainbench")
    cfg = analyze_cfg(store, Path("/nonexistent-golden-root"), ["sweep=golden", *SCENARIOS[scenario]])  # type: ignore[arg-type]
    out = to_json(build_report(cfg, golden_records(), "golden", store.uri, [dict(s) for s in SPEEDS]))
    return json.loads(json.dumps({k: v for k, v in out.items() if k not in VOLATILE}))


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({k: golden_report(k) for k in SCENARIOS}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
