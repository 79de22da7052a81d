"""A CPU run through run.py records its workload: model size, resolved precision and its reason, how the
measurement stopped, for a supervised model the validation pass per epoch, and the schema-1 workload profile
(booked as a CUDA GPU would run it) that the analysis reads back."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trainbench.analysis.runs import load_run
from trainbench.core.vocab import WORKLOAD_PROFILE_KEYS, Artifact, ParamKey, Series, StopReason, Summary, Tag

REPO = Path(__file__).resolve().parents[1]


def _train(tmp_path, *overrides):
    cmd = [sys.executable, "run.py", "debug=default", "trainer=cpu", "trainer.latency.enabled=false",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
           f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out", *overrides]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([exp.experiment_id], "tags.kind = 'train'")
    return client, run


def _profile(client, run, tmp_path):
    return json.loads(Path(client.download_artifacts(run.info.run_id, Artifact.WORKLOAD_PROFILE,
                                                     str(tmp_path))).read_text())


@pytest.mark.slow
def test_cpu_run_records_size_precision_and_the_validation_pass(default_sweep, tmp_path):
    # the session's sweep's mamba2 run (tests/conftest.py: run.py -m debug=default on a CPU, 2 epochs after 1
    # warmup epoch, exit 0)
    client = default_sweep.client
    (run,) = client.search_runs([default_sweep.exp.experiment_id], "tags.kind = 'train' and tags.model = 'mamba2'")
    params, tags = run.data.params, run.data.tags
    assert params[ParamKey.MODEL_SIZE] == "small" and tags[Tag.MODEL_SIZE] == "small" and "__small__" in run.info.run_name
    assert params[ParamKey.TRAINER_PRECISION] == "auto" and params[ParamKey.PRECISION_RESOLVED] == "fp32"
    assert "cpu" in params[ParamKey.PRECISION_REASON] and params[ParamKey.TF32_RESOLVED] == "False"
    assert tags[Tag.STOP_REASON] == StopReason.MAX_EPOCHS and params[ParamKey.TRAIN_SAMPLES] == params[ParamKey.SAMPLES_PER_EPOCH]
    for key in (Series.VAL_LOSS, Series.EVAL_TIME_MS, "loss", Series.EPOCH_TIME_MS):
        assert [h.step for h in client.get_metric_history(run.info.run_id, key)] == [0, 1, 2], key
    assert run.data.metrics[Summary.EPOCH_TOTAL_MS_MEAN] > run.data.metrics[Summary.EPOCH_TIME_MS_MEAN]

    # the workload profile: schema 1, booked as CUDA runs it, read back by the analysis as recorded
    prof = _profile(client, run, tmp_path)
    assert tuple(prof) == WORKLOAD_PROFILE_KEYS and prof["schema"] == 1
    assert prof["profiled_on"] == "cpu" and prof["precision"] == "fp32" and prof["complete"] is True
    assert prof["optimizer"] == {"measured_impl": "foreach", "booked_as": "fused"}
    classes = {k["cls"] for k in prof["kernels"]}
    assert {"matmul_attention", "conv", "scan", "optimizer", "elementwise_norm"} <= classes
    opt = [k for k in prof["kernels"] if k["cls"] == "optimizer" and k["flops"] > 1000]
    assert opt and all(k["autocast"] == "fp32" for k in opt)
    assert prof["host"]["ops"] > 0 and prof["chains"] == []  # the torch SSD scan: no dependent chain
    m = run.data.metrics  # the aggregate metrics stay for older readers
    assert m["workload.matmul_attention.fp32.flops"] == pytest.approx(
        sum(k["flops"] for k in prof["kernels"] if k["cls"] == "matmul_attention"), rel=1e-6)
    rec = load_run(client, client.get_run(run.info.run_id))
    assert rec.workload_profile == prof


@pytest.mark.slow
def test_a_tft_run_records_its_lstms_as_chains_and_its_dropout_fused(tmp_path):
    client, run = _train(tmp_path, "model=tft", "size=tiny", "trainer.epochs=1", "trainer.warmup_epochs=0")
    prof = _profile(client, run, tmp_path)
    chains = {c["what"]: c for c in prof["chains"]}
    # encoder (12 bars) and decoder (3 steps), forward and backward; one layer each
    assert {"lstm", "lstm_backward"} <= set(chains)
    assert {c["steps"] for c in prof["chains"] if c["what"] == "lstm"} == {3, 12}
    assert all(c["autocast"] == "lower" and c["flops_per_step"] > 0 for c in prof["chains"])
    assert prof["optimizer"]["booked_as"] == "fused" and prof["complete"] is True
    assert run.data.metrics[Summary.WORKLOAD_FLOPS_PER_EPOCH] > sum(
        k["flops"] for k in prof["kernels"] if k["cls"] == "matmul_attention")  # the chains' work counts too


class _Writer:
    def __init__(self):
        self.dicts, self.summaries, self.tags = {}, [], {}

    def log_dict(self, obj, name):
        self.dicts[name] = obj

    def log_summary(self, m):
        self.summaries.append(m)

    def set_tags(self, t):
        self.tags.update(t)


class _Trainer:
    def __init__(self, compile_):
        from types import SimpleNamespace

        self.profile_workload, self.compile = True, compile_
        self.memory = SimpleNamespace(predict=False)


class _Fitting:
    prediction = None


class _Tiny:
    def __init__(self):
        import torch

        self.m = torch.nn.Linear(8, 8)
        self.opt = torch.optim.AdamW(self.m.parameters(), foreach=True)
        self.x = torch.randn(4, 8)

    def train_epoch(self):
        self.m(self.x).sum().backward()
        self.opt.step()
        self.opt.zero_grad()


def test_the_train_stage_logs_the_schema_1_artifact_and_the_aggregate_metrics():
    import torch

    from trainbench.train import _workload_profile

    w = _Writer()
    _workload_profile(_Tiny(), torch.device("cpu"), _Trainer(False), w, _Fitting(), (), "bf16")
    art = w.dicts[Artifact.WORKLOAD_PROFILE]
    assert tuple(art) == WORKLOAD_PROFILE_KEYS and art["complete"] is True and art["precision"] == "bf16"
    assert art["optimizer"] == {"measured_impl": "foreach", "booked_as": "fused"}
    # forward and the weight gradient (the input needs none): 2 GEMMs of 2*4*8*8
    assert w.summaries and w.summaries[0][Summary.WORKLOAD_FLOPS_PER_EPOCH] == 2 * 2 * 4 * 8 * 8


def test_a_compiled_run_records_why_its_profile_is_incomplete_and_no_metrics():
    import torch

    from trainbench.measure.workload import INCOMPLETE_COMPILE
    from trainbench.train import _workload_profile

    w = _Writer()
    _workload_profile(_Tiny(), torch.device("cpu"), _Trainer(True), w, _Fitting(), (), "fp32")
    art = w.dicts[Artifact.WORKLOAD_PROFILE]
    assert art["complete"] is False and art["incomplete_reasons"] == [INCOMPLETE_COMPILE]
    assert art["kernels"] == [] and w.summaries == []
