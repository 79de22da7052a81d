"""Mamba-2: causality, initialisation, gradients, a learning step, build, the choice of scan kernel.

The scan itself is tested in test_ssd.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from helpers.models import model_config
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import BuildContext, param_groups
from trainbench.models.mamba2 import Mamba2Config, Mamba2Net, build, resolve_kernel

CPU = BuildContext(device=torch.device("cpu"))


def tiny(*overrides: str) -> Mamba2Config:
    """Mamba-2 at its `tiny` size with two stacked blocks and batches of 16."""
    return model_config("mamba2", "model.n_layers=2", "model.batch_size=16", *overrides)


def test_model_encode_is_causal():
    net = Mamba2Net(5, tiny()).double().eval()
    x = torch.randn(2, 24, 5, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 15] += 1.0
    with torch.no_grad():
        h, h2 = net.encode(x), net.encode(x2)
    assert torch.allclose(h[:, :15], h2[:, :15], rtol=0, atol=1e-12)
    assert not torch.allclose(h[:, 15:], h2[:, 15:])


def test_reference_initialisation_and_no_weight_decay():
    cfg = Mamba2Config(d_model=64, headdim=16, n_layers=1)  # 8 heads
    net = Mamba2Net(10, cfg)
    blk = net.blocks[0]
    dt = torch.nn.functional.softplus(blk.dt_bias)
    assert ((dt >= 1e-3 - 1e-7) & (dt <= 0.1 + 1e-7)).all()
    a = torch.exp(blk.A_log)
    assert ((a >= 1.0) & (a <= 16.0)).all()
    assert torch.equal(blk.D.detach(), torch.ones(8))
    groups = param_groups(net, weight_decay=0.1)
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    for p in (blk.dt_bias, blk.A_log, blk.D, blk.norm.weight, blk.conv1d.bias):
        assert id(p) not in decayed
    assert id(blk.in_proj.weight) in decayed and id(blk.out_proj.weight) in decayed


def test_gradients_reach_every_parameter(market_data):
    tr = build(tiny(), market_data, CPU)
    xb, yb = tr.batch(torch.arange(16))
    tr.loss_fn(tr.module(xb), yb).backward()
    for name, p in tr.module.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"{name} has a zero gradient"


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_one_step_lowers_the_loss_on_a_fixed_batch(market_data, loss):
    tr = build(tiny(f"model.loss={loss}", "model.lr=3e-3"), market_data, CPU)
    xb, yb = tr.batch(torch.arange(16))
    with torch.no_grad():
        before = tr.loss_fn(tr.module(xb), yb)
    tr.optimizer_step(xb, yb)
    with torch.no_grad():
        after = tr.loss_fn(tr.module(xb), yb)
    assert after < before


@pytest.mark.slow
def test_train_epoch_contract(market_data):
    tr = build(tiny(), market_data, CPU)
    fs = market_data.features
    n_windows = fs.window_starts(24, horizon=1, split="train").numel()
    assert tr.n_windows == n_windows
    assert tr.samples_per_epoch == (n_windows // 16) * 16
    # targets: the return of the bar right after each window, in return-std units
    s = int(tr.starts[3])
    assert torch.isclose(tr.targets[3], fs.returns[s + 24] / fs.return_std)
    assert torch.equal(tr.batch(torch.tensor([3]))[0][0], fs.values[s:s + 24])
    out = tr.train_epoch()
    assert {"loss", Series.GRAD_NORM} <= set(out)
    assert all(v.ndim == 0 and torch.isfinite(v) for v in out.values())
    y = tr.inference(7)()
    assert y.shape == (7,)
    assert tr.info()["num_params"] == sum(p.numel() for p in tr.module.parameters())


def test_build_refuses_too_few_bars():
    data = make_market_data(300)  # two 150-bar sessions, 120 + 120 training bars
    with pytest.raises(ModelDataError, match=r"needs at least 230 training windows") as e:
        build(Mamba2Config(), data, CPU)
    assert "358 unbroken training bars" in str(e.value)  # seq_len 128 + batch 230
    assert "300 bars" in str(e.value)


def test_build_rejects_bad_config(market_data):
    with pytest.raises(ConfigError, match="model.headdim"):
        build(replace(tiny(), headdim=12), market_data, CPU)
    with pytest.raises(ConfigError, match="model.loss"):
        build(replace(tiny(), loss="l1"), market_data, CPU)


def test_out_proj_init_is_scaled_by_one_over_sqrt_n_layers():
    # Same seed, one layer vs four: block 0 draws the same numbers, so its out_proj must be exactly
    # 1/sqrt(4) = 1/2 of the one-layer model's (mamba_ssm's rescale_prenorm_residual); in_proj unscaled.
    nets = {}
    for n in (1, 4):
        torch.manual_seed(0)
        nets[n] = Mamba2Net(5, tiny(f"model.n_layers={n}"))
    one, four = nets[1].blocks[0], nets[4].blocks[0]
    torch.testing.assert_close(four.out_proj.weight, one.out_proj.weight / 2, rtol=0, atol=0)
    torch.testing.assert_close(four.in_proj.weight, one.in_proj.weight, rtol=0, atol=0)
    # the one-layer weights are PyTorch's Linear default: uniform in +-1/sqrt(fan_in)
    bound = 1 / one.d_inner ** 0.5
    w = one.out_proj.weight.abs()
    assert w.max() <= bound and w.max() > 0.9 * bound


def test_kernel_auto_resolves_to_torch_without_cuda_or_mamba_ssm(monkeypatch):
    assert resolve_kernel("auto", torch.device("cpu"))[0] == "torch"
    assert resolve_kernel("torch", torch.device("cuda")) == ("torch", "asked for (model.kernel)")
    monkeypatch.setitem(__import__("sys").modules, "mamba_ssm", None)  # makes the import fail
    kernel, reason = resolve_kernel("auto", torch.device("cuda"))
    assert kernel == "torch" and "mamba_ssm not importable" in reason


def test_kernel_auto_picks_the_fused_scan_when_mamba_ssm_imports_on_cuda(monkeypatch):
    import sys
    import types

    mods = ["mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm.ops.triton.ssd_combined"]
    for name in mods:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[mods[-1]].mamba_chunk_scan_combined = lambda *a, **k: None
    assert resolve_kernel("auto", torch.device("cuda")) == ("triton", "auto: CUDA device and mamba_ssm imports")
    assert resolve_kernel("auto", torch.device("cpu"))[0] == "torch"  # never on a CPU


def test_cpu_run_records_the_resolved_kernel(market_data):
    info = build(tiny(), market_data, CPU).info()
    assert info["kernel"] == "auto" and info["kernel_resolved"] == "torch"
    assert "cpu" in info["kernel_reason"]
    with pytest.raises(ConfigError, match="model.kernel"):
        build(replace(tiny(), kernel="cuda"), market_data, CPU)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_triton_kernel_needs_cuda(market_data):
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        build(tiny("model.kernel=triton"), market_data, CPU)


def test_small_is_the_schema():
    """The schema's defaults are the `small` size (the composed config equals them: tests/test_sizes.py)."""
    obj = Mamba2Config()
    assert obj.size == "small" and obj.target_epochs == 1000 and obj.seq_len == 128 and obj.batch_size == 230
