"""Memory fitting: the batch-size search against a fake allocator, batch plans, budgets, `auto` on a CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainbench.compose import compose_run
from trainbench.config.run import ModelConfig, TrainerConfig, validate
from trainbench.config.shared import HardwareConfig
from trainbench.core.errors import ConfigError
from trainbench.core.vocab import ParamKey, Series, Summary, Tag
from trainbench.measure import fit
from trainbench.measure.harness import is_oom
from trainbench.models.base import BuildContext, TrainableBase, accumulate, clip_and_step, make_optimizer

CPU = torch.device("cpu")


class FakeAllocator:
    """Raises torch.OutOfMemoryError when a step at ``batch_size`` needs more than ``capacity`` bytes."""

    def __init__(self, capacity: int, fixed: int = 1000, per_sample: int = 37) -> None:
        self.capacity, self.fixed, self.per_sample = capacity, fixed, per_sample
        self.live = 0
        self.calls: list[int] = []

    def step(self, batch_size: int) -> None:
        self.calls.append(batch_size)
        need = self.fixed + self.per_sample * batch_size
        if need > self.capacity:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {need} bytes")
        self.live = need
        self.live = 0  # freed at the end of the step

    def largest(self) -> int:
        return (self.capacity - self.fixed) // self.per_sample

    def probe(self, batch_size: int) -> bool:
        try:
            self.step(batch_size)
            return True
        except Exception as e:
            if not is_oom(e):
                raise
            return False


@pytest.mark.parametrize("capacity", [1000 + 37 * n for n in (1, 2, 3, 31, 32, 33, 100, 229, 230, 1000, 4097)])
@pytest.mark.parametrize("start", [1, 32, 64])
def test_search_finds_the_exact_largest_fitting_size(capacity, start):
    alloc = FakeAllocator(capacity + 5)
    r = fit.search_batch_size(alloc.probe, max_batch=100_000, start=start)
    assert r.batch_size == alloc.largest()
    assert [p.batch_size for p in r.probes] == alloc.calls
    assert any(p.batch_size == r.batch_size and p.fits for p in r.probes)
    assert any(p.batch_size == r.batch_size + 1 and not p.fits for p in r.probes)
    assert len(r.probes) <= 2 * max(r.batch_size, start).bit_length() + 2  # logarithmic, not linear


def test_search_stops_at_the_cap_and_fails_when_nothing_fits():
    alloc = FakeAllocator(10**9)
    r = fit.search_batch_size(alloc.probe, max_batch=300, start=32)
    assert r.batch_size == 300 and alloc.calls == [32, 64, 128, 256, 300]
    with pytest.raises(fit.DoesNotFit):
        fit.search_batch_size(FakeAllocator(10).probe, max_batch=64, start=8)


def test_search_propagates_errors_that_are_not_out_of_memory():
    def probe(b):
        raise ValueError("a bug, not a memory limit")

    with pytest.raises(ValueError):
        fit.search_batch_size(probe, 64)


@pytest.mark.parametrize(("micro", "accum", "effective", "want"), [
    (230, 1, None, (230, 1, 230)),
    (32, 4, None, (32, 4, 128)),
    (64, 1, 230, (58, 4, 230)),  # ceil(230/64) = 4 micro-batches of 57-58
    (512, 1, 230, (230, 1, 230)),
    (1, 1, 7, (1, 7, 7)),
])
def test_plan_batches(micro, accum, effective, want):
    p = fit.plan_batches(micro, accum, effective)
    assert (p.micro, p.accum, p.optimiser) == want
    assert p.micro <= micro


def test_budget_source_and_no_cap_on_cpu():
    assert fit.budget_mb(3000, 4096, CPU) == (3000.0, "hardware.vram_budget_mb")
    assert fit.budget_mb(None, 4096, CPU) == (4096.0, "hardware.vram_mb")
    assert fit.budget_mb(None, None, CPU) == (None, "none")
    assert fit.apply_budget(CPU, 4096) == {}


def test_grad_accum_and_effective_batch_together_is_a_config_error():
    with pytest.raises(ConfigError, match="grad_accum"):
        validate(compose_run(["model=dqn", "trainer.grad_accum=2", "trainer.effective_batch=230"]))
    obj = validate(compose_run(["model=tft", "model.batch_size=auto", "model.max_batch_size=512",
                                "trainer.effective_batch=230"]))
    assert obj.model.max_batch_size == 512 and obj.trainer.effective_batch == 230


# ---- `auto` on a CPU: the predictor answers, and says so ---------------------------------------------


class MLPTrainable(TrainableBase):
    def __init__(self, batch_size: int, ctx: BuildContext, n: int = 2048, d: int = 256, h: int = 1024) -> None:
        torch.manual_seed(0)
        self.ctx = ctx
        self.module = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, 1))
        self.opt = make_optimizer(self.module, 1e-3)
        self.x, self.y = torch.randn(n, d), torch.randn(n)
        self.batch_size, self.samples_per_epoch, self.batch_limit = batch_size, n, n
        self.gen = ctx.generator()

    def memory_step(self, batch_size: int):
        def step():
            idx = torch.randperm(self.x.shape[0], generator=self.gen)[:batch_size]
            x, y = self.x[idx], self.y[idx]
            loss, _ = accumulate(lambda sl: (((self.module(x[sl]).squeeze(-1) - y[sl]) ** 2).mean(), {}),
                                 batch_size, self.ctx.grad_accum)
            return {"loss": loss, Series.GRAD_NORM: clip_and_step(self.module, self.opt, 1.0)}
        return step


def _build(batch, accum):
    return MLPTrainable(batch, BuildContext(CPU, grad_accum=accum))


@pytest.mark.slow
def test_auto_on_cpu_is_a_labelled_prediction_within_the_budget():
    hw = HardwareConfig(name="tiny", vram_mb=40)
    r = fit.resolve(ModelConfig(name="mlp", batch_size="auto"), TrainerConfig(), hw, CPU, _build)
    assert r.source == "predicted" and r.wants_prediction
    b = r.plan.micro
    assert 1 < b < 2048 and r.plan.accum == 1
    limit = 40 * (1 - r.margin)
    probes = {p.batch_size: p for p in r.search.probes}
    assert probes[b].fits and probes[b].peak_mb <= limit
    assert not probes[b + 1].fits and probes[b + 1].peak_mb > limit
    t = _build(b, 1)
    r.predict(t)
    assert r.predicted_fits is True
    assert r.tags()[Tag.BATCH_SIZE_SOURCE] == "predicted" and r.tags()[Tag.PREDICTED_BATCH_SIZE] == str(b)
    assert "PREDICTION" in r.summary_line("mlp", "tiny") and str(b) in r.summary_line("mlp", "tiny")
    assert r.params()["auto_batch.probes"] == len(r.search.probes)
    assert r.metrics()[Summary.PREDICTED_PEAK_VRAM_RESERVED_MB] <= limit


@pytest.mark.slow
def test_auto_with_effective_batch_derives_micro_batches_and_accumulation():
    hw = HardwareConfig(name="tiny", vram_mb=40)
    tr = TrainerConfig(effective_batch=1500)
    r = fit.resolve(ModelConfig(name="mlp", batch_size="auto"), tr, hw, CPU, _build)
    assert r.plan.optimiser == 1500 and r.plan.accum >= 2 and r.plan.micro * r.plan.accum >= 1500
    assert r.plan.micro <= r.search.batch_size


def test_auto_on_a_cpu_without_a_budget_says_how_to_give_one():
    with pytest.raises(ConfigError, match="hardware.vram_budget_mb"):
        fit.resolve(ModelConfig(name="mlp", batch_size="auto"), TrainerConfig(), HardwareConfig(), CPU, _build)


def test_fixed_batch_on_cpu_with_a_card_in_view_predicts_whether_it_fits():
    r = fit.resolve(ModelConfig(name="mlp", batch_size=64), TrainerConfig(), HardwareConfig(vram_mb=4096), CPU,
                    _build)
    assert r.source == "config" and r.plan.micro == 64
    r.predict(_build(64, 1))
    assert r.predicted_fits is True and r.tags()[Tag.PREDICTED_FITS] == "true"
    r = fit.resolve(ModelConfig(name="mlp", batch_size=64), TrainerConfig(), HardwareConfig(), CPU, _build)
    assert not r.wants_prediction  # default CPU runs do not pay for a prediction


# ---- GPU ---------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@gpu
def test_budget_is_enforced_on_the_gpu():
    dev = torch.device("cuda")
    fit.free_device(dev)
    try:
        rec = fit.apply_budget(dev, 256)
        assert rec[Tag.VRAM_BUDGET_MB] == 256 and rec[Tag.VRAM_TOTAL_MB] > 256 and 0 < rec[ParamKey.VRAM_FRACTION] < 1
        small = torch.empty(64 * 2**20, dtype=torch.uint8, device=dev)  # 64 MB: within the budget
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(512 * 2**20, dtype=torch.uint8, device=dev)  # 512 MB: past it
        del small
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
        fit.free_device(dev)


@pytest.mark.gpu
@gpu
def test_measured_auto_search_trains_within_the_budget():
    dev = torch.device("cuda")
    budget = 512

    def build(batch, accum):
        t = MLPTrainable(batch, BuildContext(dev, grad_accum=accum), n=65536, d=512, h=4096)
        t.module.to(dev)
        t.opt = make_optimizer(t.module, 1e-3)
        t.x, t.y = t.x.to(dev), t.y.to(dev)
        t.gen = BuildContext(dev).generator()
        return t

    try:
        r = fit.resolve(ModelConfig(name="mlp", batch_size="auto", max_batch_size=65536), TrainerConfig(),
                        HardwareConfig(vram_budget_mb=budget), dev, build)
        assert r.source == "measured" and 1 <= r.plan.micro < 65536
        assert any(not p.fits for p in r.search.probes)  # the budget bound it, not the cap
        fit.free_device(dev)
        t = build(r.plan.micro, 1)
        step = t.memory_step(r.plan.micro)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_reserved(dev) / 2**20 <= budget
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
        fit.free_device(dev)
