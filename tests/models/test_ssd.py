"""The chunked SSD scan against a plain recurrence, its dtypes, causality, shape checks, and the fused kernel.

The scan tests draw fresh random inputs on every run (their own generator, seeded from the OS), so
repeated runs probe different inputs; a failure prints the seed to reproduce it.
"""

from __future__ import annotations

import secrets

import pytest
import torch

from trainbench.models.ssd import ssd_recurrent, ssd_scan


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

def test_ssd_recurrent_matches_the_loop():
    gen = torch.Generator().manual_seed(secrets.randbits(63))
    x, dt, A, B, C = random_inputs(gen, 2, 20, 3, 4, 5, 3, torch.float64)
    assert torch.allclose(ssd_recurrent(x, dt, A, B, C), loop_scan(x, dt, A, B, C), rtol=1e-10, atol=1e-12)


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

