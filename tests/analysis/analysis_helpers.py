"""Write training runs exactly as the run contract (docs/run-contract.md) says, straight through MlflowClient."""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from trainbench import CONF_DIR
from trainbench.core.vocab import Artifact, DataInfo, Outcome, ParamKey, Series, Summary, Tag, data_tag

_STATUS = {Outcome.COMPLETED: "FINISHED", Outcome.OOM: "FAILED", Outcome.DIVERGED: "FAILED", Outcome.FAILED: "FAILED",
           Outcome.INTERRUPTED: "KILLED", Outcome.STALE: None}


class Store:
    """A temporary sqlite MLflow store with one experiment."""

    def __init__(self, root: Path, experiment: str = "trainbench"):
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.uri = f"sqlite:///{root}/mlflow.db"
        self.experiment = experiment
        self.client = MlflowClient(tracking_uri=self.uri)
        self.exp_id = self.client.create_experiment(experiment, artifact_location=str(root / "artifacts"))

    def new_experiment(self, name: str) -> Store:
        """The same store with another (empty) experiment: isolation for sweep=latest or empty cases."""
        other = copy.copy(self)
        other.experiment = name
        other.exp_id = self.client.create_experiment(name, artifact_location=str(self.root / "artifacts" / name))
        return other

    def add_run(self, model: str, epoch_ms: Any, *, sweep_id: str = "s1",
                device: str = "NVIDIA GeForce RTX 3050 Ti Laptop GPU",
                outcome: str = Outcome.COMPLETED, warmup: int = 0, target_epochs: int = 1000, loss: Any = None,
                grad_norm: Any = None, epochs_json: bool = True, history: bool = False,
                power_w: float | None = None, gpu_power_w: float | None = None, batch_size: int = 230,
                extra_metrics: dict[str, float] | None = None, job: str = "0",
                extra_params: dict[str, str] | None = None, extra_tags: dict[str, str] | None = None,
                extra_series: dict[str, Any] | None = None) -> str:
        """One training job. ``epoch_ms``: per-epoch times, warmup included. ``outcome`` 'stale' leaves
        the run RUNNING (a killed job)."""
        c = self.client
        t = np.asarray(epoch_ms, dtype=float)
        n = t.size
        loss = np.linspace(1.0, 0.5, n) if loss is None else np.asarray(loss, dtype=float)
        grad = np.full(n, 0.5) if grad_norm is None else np.asarray(grad_norm, dtype=float)
        gpu = device != "cpu"
        mem_key = Series.PEAK_VRAM_MB if gpu else Series.PEAK_HOST_MB
        run = c.create_run(self.exp_id, run_name=f"{job}_{model}", tags={
            Tag.KIND: "train", Tag.MODEL: model, Tag.DATA: "6e_ohlcv_1m", Tag.SWEEP_ID: sweep_id, Tag.JOB: job,
            Tag.DEVICE: device, Tag.OUTCOME: outcome, Tag.GIT_COMMIT: "abc123", Tag.GIT_DIRTY: "false",
            Tag.MEMORY_KIND: "vram" if gpu else "host", Tag.TRAINER_PROFILE: "default",
            data_tag(DataInfo.SYNTHETIC): "true", **(extra_tags or {})})
        rid = run.info.run_id
        params = {"model.name": model, ParamKey.BATCH_SIZE: batch_size, ParamKey.TARGET_EPOCHS: target_epochs,
                  "trainer.epochs": max(0, n - warmup), ParamKey.WARMUP_EPOCHS: warmup, "trainer.seed": 0,
                  "hardware.power_w": power_w, "hardware.price_per_kwh": 0.15, "data.name": "6e_ohlcv_1m",
                  **(extra_params or {})}
        ts = int(time.time() * 1000)
        measured = t[warmup:]
        summary: dict[str, float] = {Summary.EPOCHS_MEASURED: float(measured.size), Summary.HARNESS_OVERHEAD_PCT: 0.5}
        if measured.size:
            summary.update({Summary.EPOCH_TIME_MS_MEAN: float(measured.mean()),
                            Summary.EPOCH_TIME_MS_STD: float(measured.std(ddof=1)) if measured.size > 1 else 0.0,
                            Summary.EPOCH_TIME_MS_P50: float(np.median(measured)),
                            Summary.EPOCH_TIME_MS_P95: float(np.percentile(measured, 95)),
                            Summary.EPOCH_TIME_MS_P99: float(np.percentile(measured, 99)),
                            f"{mem_key}_max": 812.0})
        if gpu_power_w is not None:
            summary[Summary.GPU_POWER_W_MEAN] = gpu_power_w
        summary.update(extra_metrics or {})
        series = {Series.EPOCH_TIME_MS: t, "loss": loss, Series.GRAD_NORM: grad, Series.SAMPLES_PER_S: 230 / (t / 1000),
                  mem_key: np.full(n, 800.0), "loss_td": loss * 0.9,
                  **{k: np.asarray(v, dtype=float) for k, v in (extra_series or {}).items()}}
        metrics = [Metric(k, v, ts, 0) for k, v in summary.items()]
        if history:
            metrics += [Metric(k, float(v[i]), ts, i) for k, v in series.items() for i in range(n)]
        c.log_batch(rid, metrics=metrics[:1000], params=[Param(k, str(v)) for k, v in params.items()],
                    tags=[RunTag("mlflow.note.content", "test run")])
        for i in range(1000, len(metrics), 1000):
            c.log_batch(rid, metrics=metrics[i:i + 1000])
        with tempfile.TemporaryDirectory() as tmp:
            cfg_dir = Path(tmp) / "config"
            cfg_dir.mkdir()
            (cfg_dir / "config.yaml").write_text(f"model:\n  name: {model}\n")
            (cfg_dir / "overrides.yaml").write_text(f"- model={model}\n")
            c.log_artifacts(rid, str(cfg_dir), "config")
            (Path(tmp) / Artifact.ENVIRONMENT).write_text(json.dumps({"python": "3.11"}))
            c.log_artifact(rid, str(Path(tmp) / Artifact.ENVIRONMENT))
            if epochs_json:
                obj = {"warmup_epochs": warmup, **{k: [float(x) for x in v] for k, v in series.items()}}
                (Path(tmp) / Artifact.EPOCHS).write_text(json.dumps(obj))  # NaN/Infinity as Python writes them
                c.log_artifact(rid, str(Path(tmp) / Artifact.EPOCHS))
        if _STATUS[outcome]:
            c.set_terminated(rid, _STATUS[outcome])
        return rid


def noisy(mean_ms: float, n: int, rel_sd: float = 0.01, seed: int = 0) -> np.ndarray:
    """``n`` positive epoch times around ``mean_ms`` (normal, relative sd ``rel_sd``)."""
    rng = np.random.default_rng(seed)
    return np.abs(rng.normal(mean_ms, rel_sd * mean_ms, n))


#: The xdist group of the tests that read the session's ``reference_tft_step`` (conftest.py): one worker
#: profiles the reference-size TFT for all of them.
REFERENCE_TFT = "reference_tft_step"

#: The instances the analysis tests price on (test numbers, as quoted prices; the decision's own offers come from
#: decision.offers): a T4, an L4, an A10G, a V100 and 8-GPU A100 and H100 boxes.
TEST_CATALOGUE = ("decision.catalogue=["
                  "{name: g4dn.xlarge, gpu: t4, gpus: 1, usd_per_hour: 0.526, price_date: test},"
                  "{name: g6.xlarge, gpu: l4, gpus: 1, usd_per_hour: 0.8048, price_date: test},"
                  "{name: g5.xlarge, gpu: a10g, gpus: 1, usd_per_hour: 1.006, price_date: test},"
                  "{name: p3.2xlarge, gpu: v100_16gb, gpus: 1, usd_per_hour: 3.06, price_date: test},"
                  "{name: p4d.24xlarge, gpu: a100_40gb, gpus: 8, usd_per_hour: 32.77, price_date: test},"
                  "{name: p5.48xlarge, gpu: h100_sxm, gpus: 8, usd_per_hour: 98.32, price_date: test}]")


def analyze_cfg(store: Store, tmp: Path, overrides: list[str] | None = None) -> Any:
    """analyze.py's validated config, composed with Hydra against ``store``."""
    from hydra import compose, initialize_config_dir

    from trainbench.compose import register_configs
    from trainbench.config.analyze import validate_analyze

    register_configs(include_models=False)
    conf = CONF_DIR
    ov = [f"tracking.uri={store.uri}", f"tracking.experiment={store.experiment}", f"paths.root={tmp}",
          "analysis.bootstrap_resamples=200", "analysis.plots=false", "analysis.log_to_mlflow=false",
          # the tests of the decision before the training plan: configured epochs, the conservative rule
          # (tests/analysis/test_plan.py sets the plan's own settings)
          "decision.epochs=config", "decision.recommend_by=conservative",
          # the tests' cloud instances: quoted prices (decision.catalogue), not the packaged offers, which a
          # refresh changes (tests/analysis/test_offers.py tests those)
          "decision.offers=none", TEST_CATALOGUE, *(overrides or [])]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="analyze", overrides=ov)
    return validate_analyze(cfg)


def report_from_store(store, tmp_path, *overrides):
    """report.json (as a dict) of the runs in ``store``, built in-process with ``analyze.py``'s overrides."""
    from trainbench.analysis.fields import to_json
    from trainbench.analysis.pipeline import build_report
    from trainbench.analysis.report.record import tracking_uri
    from trainbench.analysis.runs import experiment_speeds, find_runs, load_runs, open_experiment

    cfg = analyze_cfg(store, tmp_path, list(overrides))
    uri = tracking_uri(cfg)
    client, exp = open_experiment(cfg.tracking, uri)
    sweep_id, runs = find_runs(client, exp, str(cfg.sweep))
    return to_json(build_report(cfg, load_runs(client, runs, 4), sweep_id, uri, experiment_speeds(client, exp)))


def _filled(cls: Any, given: dict[str, Any]) -> Any:
    """``cls`` with the given fields, every other field without a default ``None``: a rule's input in a test."""
    import dataclasses

    required = {f.name: None for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return cls(**{**required, **given})


def plan_of(**fields: Any) -> Any:
    """A model's plan with the given fields (every other without a default ``None``)."""
    from trainbench.analysis.report_types import Plan

    return _filled(Plan, fields)


def entry_of(**fields: Any) -> Any:
    """A model's typed entry (``models.<m>``) with the given fields; ``plan``, ``projection`` and
    ``epoch_time_ms`` as dicts of their own given fields."""
    from trainbench.analysis.report_types import ModelEntry, ModelProjection, Plan
    from trainbench.analysis.statistics.timing import EpochTime

    plan, proj = fields.pop("plan", None), fields.pop("projection", None)
    epoch = fields.pop(Series.EPOCH_TIME_MS, None)
    e = ModelEntry(**fields)
    e.epoch_time_ms = None if epoch is None else _filled(EpochTime, epoch)
    e.plan = None if plan is None else _filled(Plan, plan)
    e.projection = None if proj is None else _filled(ModelProjection, proj)
    return e
