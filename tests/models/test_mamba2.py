"""Mamba-2: the chunked SSD scan against a plain recurrence, causality, gradients, a learning step, build.

The scan tests draw fresh random inputs on every run (their own generator, seeded from the OS), so
repeated runs probe different inputs; a failure prints the seed to reproduce it.
"""

from __future__ import annotations

import secrets

import pytest
import torch

from helpers import models
from trainbench.config import ConfigError
from trainbench.data.memory import make_market_data
from trainbench.models.base import BuildContext, ModelDataError, param_groups
from trainbench.models.mamba2 import Mamba2Config, Mamba2Net, build, resolve_kernel, ssd_scan

CPU = BuildContext(device=torch.device("cpu"))
TINY = {**models.TINY["mamba2"], "n_layers": 2, "batch_size": 16}


def loop_scan(x, dt, A, B, C):
    """h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_tᵀ, y_t = C_t h_t, one step at a time (float64)."""
    b, length, h, p = x.shape
    n = B.shape[-1]
    hstate = torch.zeros(b, h, n, p, dtype=torch.float64)
    out = torch.empty(b, length, h, p, dtype=torch.float64)
    for t in range(length):
        for k in range(h):
            bk = B[:, t, k if B.shape[2] > 1 else 0]  # (b, n)
            ck = C[:, t, k if C.shape[2] > 1 else 0]
            decay = torch.exp(dt[:, t, k] * A[k])  # (b,)
            hstate[:, k] = decay[:, None, None] * hstate[:, k] + \
                dt[:, t, k, None, None] * bk[:, :, None] * x[:, t, k, None, :]
            out[:, t, k] = torch.einsum("bn,bnp->bp", ck, hstate[:, k])
    return out


def random_inputs(gen, b, length, h, p, n, groups, dtype):
    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)
    x = r(b, length, h, p)
    dt = torch.nn.functional.softplus(r(b, length, h) - 2.0)  # positive, ~0.02-1
    A = -torch.empty(h, dtype=torch.float64).uniform_(0.5, 8.0, generator=gen)
    B, C = r(b, length, groups, n), r(b, length, groups, n)
    return [t.to(dtype) for t in (x, dt, A, B, C)]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("length,chunk", [(1, 8), (5, 8), (16, 8), (37, 8), (64, 16), (50, 64), (128, 32)])
@pytest.mark.parametrize("groups", [1, 3])
def test_ssd_scan_matches_recurrence(dtype, tol, length, chunk, groups):
    seed = secrets.randbits(63)
    gen = torch.Generator().manual_seed(seed)
    x, dt, A, B, C = random_inputs(gen, 2, length, 3, 4, 5, groups, dtype)
    y = ssd_scan(x, dt, A, B, C, chunk)
    assert y.shape == x.shape and y.dtype == dtype
    ref = loop_scan(*(t.double() for t in (x, dt, A, B, C)))
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < tol, f"relative error {err:.3g} >= {tol} (length {length}, chunk {chunk}, seed {seed})"


def test_ssd_scan_half_inputs_keep_dtype_and_stay_close():
    gen = torch.Generator().manual_seed(secrets.randbits(63))
    x, dt, A, B, C = random_inputs(gen, 2, 40, 2, 4, 6, 1, torch.float64)
    ref = loop_scan(x, dt, A, B, C)
    y = ssd_scan(x.bfloat16(), dt.bfloat16(), A.float(), B.bfloat16(), C.bfloat16(), 16)
    assert y.dtype == torch.bfloat16
    assert ((y.double() - ref).norm() / ref.norm()).item() < 3e-2  # bf16 has ~3 significant digits


def test_ssd_scan_is_causal():
    gen = torch.Generator().manual_seed(secrets.randbits(63))
    x, dt, A, B, C = random_inputs(gen, 1, 45, 2, 3, 4, 1, torch.float64)
    y = ssd_scan(x, dt, A, B, C, 8)
    t = 20
    for tensor in (x, dt, B, C):
        tensor2 = tensor.clone()
        tensor2[:, t] = tensor2[:, t] + 1.0
        args = [tensor2 if a is tensor else a for a in (x, dt, A, B, C)]
        y2 = ssd_scan(*args, 8)
        assert torch.allclose(y2[:, :t], y[:, :t], rtol=0, atol=1e-13)
        assert not torch.allclose(y2[:, t:], y[:, t:])


def test_ssd_scan_rejects_bad_shapes():
    x = torch.zeros(2, 10, 3, 4)
    with pytest.raises(ValueError, match="dt must be"):
        ssd_scan(x, torch.ones(2, 10, 2), -torch.ones(3), torch.zeros(2, 10, 1, 5), torch.zeros(2, 10, 1, 5), 4)
    with pytest.raises(ValueError, match="B and C"):
        ssd_scan(x, torch.ones(2, 10, 3), -torch.ones(3), torch.zeros(2, 10, 2, 5), torch.zeros(2, 10, 2, 5), 4)


def test_model_encode_is_causal():
    net = Mamba2Net(5, Mamba2Config(**TINY)).double().eval()
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
    tr = build(Mamba2Config(**TINY), market_data, CPU)
    xb, yb = tr.batch(torch.arange(16))
    tr.loss_fn(tr.module(xb), yb).backward()
    for name, p in tr.module.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"{name} has a zero gradient"


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_one_step_lowers_the_loss_on_a_fixed_batch(market_data, loss):
    tr = build(Mamba2Config(**TINY, loss=loss, lr=3e-3), market_data, CPU)
    xb, yb = tr.batch(torch.arange(16))
    with torch.no_grad():
        before = tr.loss_fn(tr.module(xb), yb)
    tr.train_step(xb, yb)
    with torch.no_grad():
        after = tr.loss_fn(tr.module(xb), yb)
    assert after < before


def test_train_epoch_contract(market_data):
    tr = build(Mamba2Config(**TINY), market_data, CPU)
    fs = market_data.features
    n_windows = fs.window_starts(24, horizon=1, split="train").numel()
    assert tr.n_windows == n_windows
    assert tr.samples_per_epoch == (n_windows // 16) * 16
    # targets: the return of the bar right after each window, in return-std units
    s = int(tr.starts[3])
    assert torch.isclose(tr.targets[3], fs.returns[s + 24] / fs.return_std)
    assert torch.equal(tr.batch(torch.tensor([3]))[0][0], fs.values[s:s + 24])
    out = tr.train_epoch()
    assert {"loss", "grad_norm"} <= set(out)
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
        build(Mamba2Config(**{**TINY, "headdim": 12}), market_data, CPU)
    with pytest.raises(ConfigError, match="model.loss"):
        build(Mamba2Config(**TINY, loss="l1"), market_data, CPU)


def test_out_proj_init_is_scaled_by_one_over_sqrt_n_layers():
    # Same seed, one layer vs four: block 0 draws the same numbers, so its out_proj must be exactly
    # 1/sqrt(4) = 1/2 of the one-layer model's (mamba_ssm's rescale_prenorm_residual); in_proj unscaled.
    nets = {}
    for n in (1, 4):
        torch.manual_seed(0)
        nets[n] = Mamba2Net(5, Mamba2Config(**{**TINY, "n_layers": n}))
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
    info = build(Mamba2Config(**TINY), market_data, CPU).info()
    assert info["kernel"] == "auto" and info["kernel_resolved"] == "torch"
    assert "cpu" in info["kernel_reason"]
    with pytest.raises(ConfigError, match="model.kernel"):
        build(Mamba2Config(**TINY, kernel="cuda"), market_data, CPU)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_triton_kernel_needs_cuda(market_data):
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        build(Mamba2Config(**TINY, kernel="triton"), market_data, CPU)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernel_matches_torch_on_gpu():
    pytest.importorskip("mamba_ssm")
    from trainbench.models.mamba2 import _triton_scan

    gen = torch.Generator().manual_seed(0)
    x, dt, A, B, C = (t.cuda() for t in random_inputs(gen, 2, 128, 4, 64, 32, 1, torch.float32))
    y = _triton_scan()(x, dt, A, B, C, 64)
    ref = ssd_scan(x, dt, A, B, C, 64)
    assert ((y - ref).norm() / ref.norm()).item() < 1e-3


def test_small_is_the_schema():
    """The schema's defaults are the `small` size (the composed config equals them: tests/test_sizes.py)."""
    obj = Mamba2Config()
    assert obj.size == "small" and obj.target_epochs == 1000 and obj.seq_len == 128 and obj.batch_size == 230
