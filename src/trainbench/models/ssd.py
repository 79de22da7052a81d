"""The SSD scan of Mamba-2 (state-space duality), in plain PyTorch.

:func:`ssd_scan` computes the selective state-space recurrence chunk-wise: inside a chunk as a masked,
decay-weighted "attention" matrix product, between chunks as a pass of the chunk-end states (Dao & Gu,
2024, "Transformers are SSMs"). :func:`ssd_recurrent` is the step-by-step recurrence it replaces, kept
as the benchmark's baseline (``benchmarks/bench_ssd.py``). The pure-PyTorch scan is also the reference that
``mamba_ssm``'s fused kernel is tested against; which of the two a run uses is the model's choice
(``model.kernel``, :func:`trainbench.models.mamba2.resolve_kernel`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): ``out[i, j] = a[j+1] + ... + a[i]`` for j <= i, -inf above the diagonal.

    Summed directly (a masked cumsum), not as a difference of cumsums, so long spans stay exact.
    """
    t = a.shape[-1]
    rows = a.unsqueeze(-1).expand(*a.shape, t)  # [i, j] = a[i]
    strict = torch.ones(t, t, dtype=torch.bool, device=a.device).tril(-1)
    out = rows.masked_fill(~strict, 0).cumsum(-2)
    return out.masked_fill(~strict.logical_or(torch.eye(t, dtype=torch.bool, device=a.device)), -math.inf)


def ssd_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
             chunk_size: int) -> torch.Tensor:
    """The SSD scan ``h_t = exp(dt_t A) h_{t-1} + dt_t (B_t ⊗ x_t)``, ``y_t = C_t · h_t``, ``h_0 = 0``.

    Shapes:
        x: (batch, length, heads, headdim)
        dt: (batch, length, heads), positive step sizes
        A: (heads,), negative
        B, C: (batch, length, heads, state); the heads dim may also be 1 (one B/C shared by every head,
            Mamba-2's ngroups=1), which saves recomputing C·B per head.
        returns y: (batch, length, heads, headdim), in x's dtype.

    Computed in chunks of ``chunk_size`` steps (any length: the tail is zero-padded, which with dt = 0
    neither decays nor feeds the state, and cut off again):

    1. inside each chunk, ``y = (C Bᵀ ∘ L) (dt x)`` with the causal decay matrix
       ``L[t, s] = exp(sum_{s<k<=t} dt_k A)``: dense matmuls instead of a sequential loop;
    2. the state each chunk leaves behind, from its own inputs only;
    3. the states passed between chunks (a masked-cumsum decay over chunk totals, (T/Q)² entries);
    4. the carried-in state read out by ``C`` with the decay from the chunk start.

    Float64 and float32 inputs are computed in their own dtype. For float16/bfloat16 the decays, the
    states and the sums are float32; only matmul operands are half (their products accumulate in
    float32). Autocast is switched off inside so the dtypes are exactly these.
    """
    b, length, h, p = x.shape
    n = B.shape[-1]
    if dt.shape != (b, length, h) or A.shape != (h,):
        raise ValueError(f"ssd_scan: dt must be {(b, length, h)} and A {(h,)}; got {tuple(dt.shape)} "
                         f"and {tuple(A.shape)}")
    g = B.shape[2]
    if B.shape != (b, length, g, n) or C.shape != B.shape or g not in (1, h):
        raise ValueError(f"ssd_scan: B and C must be (batch, length, heads or 1, state) = "
                         f"{(b, length, h, n)}; got {tuple(B.shape)} and {tuple(C.shape)}")
    dtype = x.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q = max(1, min(chunk_size, length))
    pad = (-length) % q
    hg = h // g  # heads per B/C group

    def mm(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Matmul on x's dtype (half operands accumulate in float32 inside the GEMM), result in acc."""
        return (u.to(dtype) @ v.to(dtype)).to(acc)

    with torch.autocast(x.device.type, enabled=False):
        if pad:
            x = F.pad(x, (0, 0, 0, 0, 0, pad))
            dt = F.pad(dt, (0, 0, 0, pad))
            B = F.pad(B, (0, 0, 0, 0, 0, pad))
            C = F.pad(C, (0, 0, 0, 0, 0, pad))
        c = (length + pad) // q
        # Layout: time split into (chunk, step), heads kept next to headdim so that, with one B/C
        # group, the state matmuls see all heads as one (q, heads*headdim) matrix (no copies per head).
        dt = dt.to(acc)
        a_cum = (dt * A.to(acc)).view(b, c, q, h).cumsum(2)  # (b, c, q, h); chunk-local, so bounded
        xdt = (x.to(acc) * dt.unsqueeze(-1)).view(b, c, q, h, p)
        Bg = B.view(b, c, q, g, n).transpose(2, 3)  # (b, c, g, q, n)
        Cg = C.view(b, c, q, g, n).transpose(2, 3)

        # 1. intra-chunk: y[t] = sum_{s<=t} (C_t.B_s) exp(a_cum[t] - a_cum[s]) dt_s x_s, as matmuls.
        #    exp of a difference of chunk-local cumsums (as the fused kernel does), masked before exp.
        cb = mm(Cg, Bg.transpose(-1, -2))  # (b, c, g, q, q), shared by the group's heads
        ah = a_cum.transpose(2, 3)  # (b, c, h, q)
        causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
        decay = (ah.unsqueeze(-1) - ah.unsqueeze(-2)).masked_fill(~causal, -math.inf).exp()
        scores = decay.view(b, c, g, hg, q, q) * cb.unsqueeze(3)  # (b, c, g, hg, q, q)
        xh = xdt.transpose(2, 3).reshape(b, c, g, hg, q, p)
        y = mm(scores, xh).view(b, c, h, q, p).transpose(2, 3)  # (b, c, q, h, p)

        # 2. the state each chunk ends with, from its own inputs: sum_s exp(a_cum[-1] - a_cum[s]) B_s x_s
        to_end = (a_cum[:, :, -1:] - a_cum).exp()  # (b, c, q, h)
        xe = (xdt * to_end.unsqueeze(-1)).view(b, c, q, g, hg * p).transpose(2, 3)  # (b, c, g, q, hg*p)
        states = mm(Bg.transpose(-1, -2), xe)  # (b, c, g, n, hg*p)

        # 3. states entering each chunk: S_in[z] = sum_{j<z} exp(total decay of chunks j+1..z-1) S[j]
        totals = F.pad(a_cum[:, :, -1].transpose(1, 2), (1, 0))  # (b, h, c + 1), 0 for "before chunk 0"
        carry = _segsum(totals)[..., :c, :c].exp().view(b, g, hg, c, c)  # [z, j]: decay from j to z
        prev = F.pad(states[:, :-1], (0, 0, 0, 0, 0, 0, 1, 0)).view(b, c, g, n, hg, p)  # S[z-1] for z
        s_in = torch.einsum("bgkzj,bjgnkp->bzgnkp", carry, prev).reshape(b, c, g, n, hg * p)

        # 4. carried-in state read out by C, decayed from the chunk start to each step
        y_off = mm(Cg, s_in).transpose(2, 3).reshape(b, c, q, h, p)
        y = y + y_off * a_cum.exp().unsqueeze(-1)
        y = y.reshape(b, c * q, h, p)[:, :length]
    return y.to(dtype)


def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor) -> torch.Tensor:
    """The same scan as :func:`ssd_scan`, one time step after another (same shapes; the baseline).

    O(length) dependent steps of small kernels: what the chunked form avoids.
    """
    b, length, h, p = x.shape
    state = x.new_zeros(b, h, p, B.shape[-1])
    decay = torch.exp(dt * A)  # (b, length, h)
    ys = []
    for t in range(length):
        inp = (dt[:, t, :, None] * x[:, t]).unsqueeze(-1) * B[:, t].unsqueeze(-2)  # (b, h, p, n)
        state = decay[:, t, :, None, None] * state + inp
        ys.append((state * C[:, t].unsqueeze(-2)).sum(-1))  # (b, h, p)
    return torch.stack(ys, dim=1)

