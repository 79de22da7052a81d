"""The memory predictor: live-storage counting, exact parameter/gradient/AdamW accounting, every model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from helpers.data import data_for
from helpers.models import build_model
from trainbench.core.vocab import Outcome, Series, Summary
from trainbench.measure.harness import run_epochs
from trainbench.measure.predict import (
    BLOCK,
    LiveBytes,
    Predictor,
    check_step_outputs,
    cublas_workspace_bytes,
    round_block,
)
from trainbench.models.base import BuildContext, TrainableBase, clip_and_step, make_optimizer
from trainbench.models.registry import REGISTRY

CPU = torch.device("cpu")


def test_round_block_and_workspace(monkeypatch):
    assert [round_block(n) for n in (0, 1, 512, 513, 4096)] == [0, 512, 512, 1024, 4096]
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert cublas_workspace_bytes() == 4096 * 1024 * 2 + 16 * 1024 * 8
    assert cublas_workspace_bytes((9, 0)) == 4096 * 1024 * 8
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert cublas_workspace_bytes((8, 6)) == 16 * 1024 * 8


def test_live_bytes_counts_allocations_once_and_frees_them():
    with FakeTensorMode(), LiveBytes(CPU) as live:
        a = torch.empty(1000)  # 4000 B -> 4096
        assert live.current == 4096
        v = a[10:20].view(2, 5)  # a view: no new storage
        a.add_(1)  # in place: no new storage
        b = a * 2
        assert live.current == 8192 and live.peak == 8192
        del a, b
        assert live.current == 4096  # v keeps a's storage alive
        del v
        assert live.current == 0 and live.peak == 8192


class MLP(TrainableBase):
    """A plain MLP with data on the device: the predictor's parts can be written down by hand."""

    def __init__(self, d: int = 48, h: int = 200, n: int = 1000) -> None:
        torch.manual_seed(0)
        self.ctx = BuildContext(CPU)
        self.module = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        self.optimizer = make_optimizer(self.module, 1e-3)
        self.x, self.y = torch.randn(n, d), torch.randn(n)
        self.batch_size, self.samples_per_epoch = 32, n
        self.gen = self.ctx.generator()

    def memory_step(self, batch_size: int):
        def step():
            idx = torch.randint(0, self.x.shape[0], (batch_size,), generator=self.gen)
            loss = ((self.module(self.x[idx]).squeeze(-1) - self.y[idx]) ** 2).mean()
            loss.backward()
            return {"loss": loss.detach(), Series.GRAD_NORM: clip_and_step(self.module, self.optimizer, 1.0)}
        return step


class BareNormMLP(MLP):
    """A step that returns only its gradient norm, not the dict every model's step returns."""

    def memory_step(self, batch_size: int):
        step = super().memory_step(batch_size)
        return lambda: step()[Series.GRAD_NORM]


def test_a_step_of_another_shape_is_refused_naming_the_model():
    with pytest.raises(TypeError, match=r"BareNormMLP.memory_step\(batch_size\)\(\) returned a tensor of shape \(\)"):
        Predictor(BareNormMLP(), target="cpu").predict(8)
    with pytest.raises(TypeError, match=r"returned \{'loss': 'a tensor of shape \(3,\)'\}"):
        check_step_outputs({"loss": torch.zeros(3)}, "m")
    ok = {"loss": torch.zeros(()), Series.GRAD_NORM: torch.ones(()), "q_mean": torch.ones(())}
    assert check_step_outputs(ok, "m") is ok


def test_parameters_gradients_and_adamw_state_are_exact_on_an_mlp():
    m = MLP()
    params = list(m.module.parameters())
    p_bytes = sum(round_block(p.numel() * 4) for p in params)  # fp32, one 512-B-rounded block each
    adamw = 2 * p_bytes + len(params) * BLOCK  # exp_avg + exp_avg_sq per tensor, a 0-d fp32 step on device
    data = round_block(m.x.numel() * 4) + round_block(m.y.numel() * 4)
    before = [p.detach().clone() for p in params]
    gen_state = m.gen.get_state()

    pred = Predictor(m)
    small, large = pred.predict(8), pred.predict(512)
    for p in (small, large):
        assert p.params_bytes == p_bytes
        assert p.grads_bytes == p_bytes
        assert p.optimizer_bytes == adamw
        assert p.resident_bytes == data + p_bytes
        assert p.peak_bytes >= p.workspace_bytes + p.resident_bytes + p.grads_bytes + p.optimizer_bytes
    # activations grow with the batch: at least the two (B, h) hidden layers kept for backward
    assert large.peak_bytes - small.peak_bytes >= 2 * (512 - 8) * 200 * 4
    assert large.activations_bytes > small.activations_bytes > 0
    assert large.reserved_bytes > large.peak_bytes
    # the trainable itself was not touched: parameters, optimiser state, random stream
    assert all(torch.equal(a, b) for a, b in zip(before, m.module.parameters(), strict=True))
    assert not m.optimizer.state and all(p.grad is None for p in params)
    assert torch.equal(m.gen.get_state(), gen_state)
    assert not any(isinstance(p, torch._subclasses.fake_tensor.FakeTensor) for p in m.module.parameters())


def test_peak_grows_with_the_batch_size():
    pred = Predictor(MLP())
    peaks = [pred.predict(b).peak_bytes for b in (1, 16, 128, 1024)]
    assert peaks == sorted(peaks) and peaks[-1] > peaks[0]


def _build(name: str, batch: int, device: torch.device = CPU, size: str = "tiny"):
    data = data_for(REGISTRY.get(name).data_kind, device=str(device))
    return build_model(name, f"model.batch_size={batch}", data=data, size=size, device=device), data


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
@pytest.mark.slow
def test_every_model_can_be_predicted_and_grows_with_the_batch(name):
    tr, data = _build(name, 16)
    pred = Predictor(tr, (data,))
    a, b = pred.predict(8), pred.predict(64)
    assert b.peak_bytes > a.peak_bytes > a.resident_bytes + a.workspace_bytes > 0
    assert a.params_bytes >= sum(p.numel() * 4 for p in tr.module.parameters())
    # every parameter gets a gradient; a gradient may be a view that keeps a slightly larger storage alive
    # (TFT's shared known-input embedding: its grad is a slice of the encoder+decoder steps' buffer)
    assert a.params_bytes <= a.grads_bytes <= 1.05 * a.params_bytes
    assert a.optimizer_bytes >= 2 * a.params_bytes
    out = tr.memory_step(16)()  # the real trainable still trains after its fake copy was traced
    assert check_step_outputs(out, name) is out  # every model's step: 0-d tensors, loss and grad_norm
    loss = out["loss"]
    assert torch.isfinite(loss) and not isinstance(loss, torch._subclasses.fake_tensor.FakeTensor)


# ---- GPU: predicted vs measured --------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", REGISTRY.builtin_names())
@pytest.mark.parametrize("batch", [64, 256])
def test_prediction_matches_measured_peak(name, batch):
    """Within 15% of the epoch's measured max_memory_allocated, for every model at two batch sizes."""
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    tr, data = _build(name, batch, dev, size="small")  # the tolerance is for the CPU-sized models, not tiny
    pred = Predictor(tr, (data,), capability=torch.cuda.get_device_capability(dev)).predict(tr.batch_size)
    res = run_epochs(tr, dev, epochs=2, warmup_epochs=1)
    assert res.outcome == Outcome.COMPLETED, res.error
    measured = res.summary[Summary.PEAK_VRAM_MB_MAX]
    predicted = pred.peak_bytes / 2**20
    print(f"{name} batch {batch}: predicted {predicted:.1f} MB, measured {measured:.1f} MB "
          f"({100 * (predicted - measured) / measured:+.1f}%)")
    assert abs(predicted - measured) <= 0.15 * measured


def test_a_step_whose_loops_are_sampled_predicts_the_peak_of_the_whole_step(monkeypatch):
    """PPO's step holds a rollout of environment steps and a GAE recursion, loops over identical steps: run
    two of each, the predicted peak is the whole step's."""
    import trainbench.measure.predict as predict

    model = build_model("ppo", "model.rollout_steps=6")  # 6 steps a loop: 4 left out
    sampled = Predictor(model).predict(int(model.batch_size))
    monkeypatch.setattr(predict, "PREDICT_LOOP_STEPS", 10**9)  # every step of every loop
    whole = Predictor(model).predict(int(model.batch_size))
    assert sampled.peak_bytes == whole.peak_bytes > 0
    assert (sampled.grads_bytes, sampled.optimizer_bytes) == (whole.grads_bytes, whole.optimizer_bytes)
