"""The Temporal Fusion Transformer's building blocks (Lim et al., 2021), which models/tft.py assembles.

Each block is the paper's: :class:`GLU` (a gate that lets a block switch itself off),
:class:`GateAddNorm` (gated skip connection), :class:`GatedResidualNetwork` (GRN, with an optional
context), :class:`VariableSelectionNetwork` (softmax weights over input variables: TFT's variable
importance), :class:`StaticCovariateEncoder` (four contexts from the static embedding) and
:class:`InterpretableMultiHeadAttention` (heads share one value projection and are averaged);
:func:`run_lstm` runs the LSTM encoder and decoder in float32 under CPU fp16 autocast.

Where the paper leaves a choice open, the blocks follow the references (pytorch-forecasting and Google's
code; a step at Google's volatility size was timed against pytorch-forecasting's to choose):

- the GRN that turns a selection network's V*d inputs into V weights has inner width min(hidden, V) and
  an interpolation + LayerNorm skip (:class:`InterpolationNorm`), as pytorch-forecasting
  (``model.selection_weights=compact``, the default); Google's code uses width hidden and a linear skip
  (``full``), ~10 GFLOP more per step of 64 windows at that size;
- a single variable (the static instrument) is gated and normalised, not put through a selection network
  (pytorch-forecasting; with one variable the selection weight is 1 anyway);
- the per-variable GRNs of a selection network are one grouped matmul (:class:`GroupedLinear`,
  independent weights per variable): the same function as one GRN per variable, in a handful of kernels
  instead of dozens; the variables' embeddings (:class:`RealEmbedding`) are written once in that
  (V, ..., d) layout, never concatenated or copied.

Every ``forward`` gives its tensor shapes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class GroupedLinear(nn.Module):
    """``groups`` independent linear maps side by side (one per variable of a selection network).

    Groups lead the layout, (G, ..., in), so that the product is one batched matmul with no copies.
    """

    def __init__(self, in_features: int, out_features: int, groups: int, bias: bool = True) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default range
        self.weight = nn.Parameter(torch.empty(groups, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(groups, 1, out_features).uniform_(-bound, bound)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(G, ..., in) -> (G, ..., out)."""
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        y = torch.bmm(flat, self.weight) if self.bias is None else torch.baddbmm(self.bias, flat, self.weight)
        return y.view(*x.shape[:-1], -1)


class GroupedLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate scale and shift per group; (G, ..., dim) layout."""

    def __init__(self, dim: int, groups: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(groups, dim))
        self.bias = nn.Parameter(torch.zeros(groups, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(G, ..., dim) -> (G, ..., dim)."""
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return torch.addcmul(self.bias.view(shape), F.layer_norm(x, x.shape[-1:]), self.weight.view(shape))


def _linear(i: int, o: int, groups: int | None, bias: bool = True) -> nn.Module:
    return nn.Linear(i, o, bias=bias) if groups is None else GroupedLinear(i, o, groups, bias=bias)


def _norm(d: int, groups: int | None) -> nn.Module:
    return nn.LayerNorm(d) if groups is None else GroupedLayerNorm(d, groups)


class GLU(nn.Module):
    """Gated linear unit: ``a * sigmoid(b)`` with ``[a, b] = Linear(x)``; lets a block switch itself off."""

    def __init__(self, d_in: int, d_out: int, groups: int | None = None) -> None:
        super().__init__()
        self.proj = _linear(d_in, 2 * d_out, groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., d_out)."""
        return F.glu(self.proj(x), dim=-1)


class GateAddNorm(nn.Module):
    """Gated skip connection: ``LayerNorm(skip + GLU(dropout(x)))``."""

    def __init__(self, d_in: int, d_out: int, dropout: float, groups: int | None = None) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.glu = GLU(d_in, d_out, groups)
        self.norm = _norm(d_out, groups)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        """x (..., d_in), skip (..., d_out) -> (..., d_out)."""
        return self.norm(skip + self.glu(self.drop(x)))


class InterpolationNorm(nn.Module):
    """``LayerNorm(resample(x) * 2 sigmoid(m))``: a parameter-light skip between widths.

    ``resample`` linearly interpolates the last dim from d_in to d_out points (end points aligned; the
    identity when they are equal); ``m`` is a learned gate per output (2 sigmoid(0) = 1 at the start).
    This is pytorch-forecasting's ``ResampleNorm``, its GRN skip when widths differ and its whole
    "selection" of a single variable. (..., d_in) -> (..., d_out).
    """

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.gate = nn.Parameter(torch.zeros(d_out))
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.d_in != self.d_out:
            flat = x.reshape(-1, 1, self.d_in)  # (N, 1, d_in): interpolate works on (batch, channels, length)
            x = F.interpolate(flat, self.d_out, mode="linear", align_corners=True).view(*x.shape[:-1], self.d_out)
        return self.norm(x * (2 * torch.sigmoid(self.gate)))


class GatedResidualNetwork(nn.Module):
    """GRN: ``GateAddNorm(W2 ELU(W1 x + W3 c), skip(x))``, the context ``c`` optional.

    The skip, when the input and output widths differ, is a linear projection (the Google reference) or,
    with ``interpolate_skip``, an :class:`InterpolationNorm` (pytorch-forecasting). With ``groups`` set,
    the input is (G, ..., d_in) and each group has its own weights.
    """

    def __init__(self, d_in: int, d_hidden: int, d_out: int, dropout: float,
                 d_context: int | None = None, groups: int | None = None,
                 interpolate_skip: bool = False) -> None:
        super().__init__()
        self.skip: nn.Module | None = None
        if d_in != d_out:
            self.skip = InterpolationNorm(d_in, d_out) if interpolate_skip else _linear(d_in, d_out, groups)
        self.fc1 = _linear(d_in, d_hidden, groups)
        self.context = nn.Linear(d_context, d_hidden, bias=False) if d_context else None
        self.fc2 = _linear(d_hidden, d_hidden, groups)
        self.gate = GateAddNorm(d_hidden, d_out, dropout, groups)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., d_in); context broadcastable to (..., d_context) -> (..., d_out)."""
        skip = x if self.skip is None else self.skip(x)
        h = self.fc1(x)
        if self.context is not None and context is not None:
            h = h + self.context(context)
        h = self.fc2(F.elu(h))
        return self.gate(h, skip)


class RealEmbedding(nn.Module):
    """One ``Linear(1, d)`` per real-valued variable: (..., V) scalars -> (V, ..., d) vectors."""

    def __init__(self, n_vars: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_vars, d) * 0.1)
        self.bias = nn.Parameter(torch.zeros(n_vars, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (V, ..., d), variables first (the layout the selection network works in)."""
        return self.embed(x, self.weight, self.bias)

    @staticmethod
    def embed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """(..., V) scalars with (V, d) weights and biases -> (V, ..., d), written once (no copies)."""
        x = x.movedim(-1, 0).unsqueeze(-1)  # (V, ..., 1)
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (weight.shape[1],)
        return torch.addcmul(bias.view(shape), x, weight.view(shape))


class VariableSelectionNetwork(nn.Module):
    """Softmax weights over V input variables (from a GRN of all of them, with optional context), applied
    to each variable's own GRN output. The weights are what TFT reports as variable importance.

    The weights GRN maps the V*d concatenated embeddings to V logits. ``weights="compact"``
    (pytorch-forecasting) gives it inner width min(d, V) and an :class:`InterpolationNorm` skip;
    ``"full"`` (Google's code) inner width d and a linear skip, about d / V times the work. A single
    variable has nothing to select: it is only gated and normalised (:class:`InterpolationNorm`, as
    pytorch-forecasting does for its one static embedding), with weight 1.
    """

    def __init__(self, n_vars: int, d: int, dropout: float, d_context: int | None = None,
                 d_var_hidden: int | None = None, weights: str = "compact") -> None:
        super().__init__()
        self.n_vars = n_vars
        if n_vars == 1:
            self.single = InterpolationNorm(d, d)
            return
        compact = weights == "compact"
        self.weights_grn = GatedResidualNetwork(n_vars * d, min(d, n_vars) if compact else d, n_vars, dropout,
                                                d_context, interpolate_skip=compact)
        self.var_grns = GatedResidualNetwork(d, d_var_hidden or d, d, dropout, groups=n_vars)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (V, ..., d), context broadcastable to (..., d) -> (selected (..., d), weights (..., V))."""
        if self.n_vars == 1:
            out = self.single(x[0])
            return out, out.new_ones(*out.shape[:-1], 1)
        w = torch.softmax(self.weights_grn(x.movedim(0, -2).flatten(-2), context), dim=-1)  # (..., V)
        return (w.movedim(-1, 0).unsqueeze(-1) * self.var_grns(x)).sum(0), w


class StaticCovariateEncoder(nn.Module):
    """Four GRNs turn the static embedding into the contexts the rest of the network is conditioned on."""

    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.selection = GatedResidualNetwork(d, d, d, dropout)
        self.enrichment = GatedResidualNetwork(d, d, d, dropout)
        self.state_h = GatedResidualNetwork(d, d, d, dropout)
        self.state_c = GatedResidualNetwork(d, d, d, dropout)

    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(B, d) -> c_selection, c_enrichment, h0, c0, each (B, d)."""
        return self.selection(s), self.enrichment(s), self.state_h(s), self.state_c(s)


class InterpretableMultiHeadAttention(nn.Module):
    """Multi-head attention whose heads share one value projection and are averaged, not concatenated.

    Averaging heads that read the same values makes the mean attention matrix the exact weights with
    which past steps enter the output, hence interpretable. Per-head query/key projections are held
    as one Linear each (the same maps, stacked). ``mask`` is True where a query may NOT look.
    Queries are the decoder steps (``attention_span=decoder``, as pytorch-forecasting) or every step
    (``all``, as the Google reference, whose encoder-step outputs no forecast uses); keys span encoder
    and decoder, masked causally.
    """

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d // heads
        self.q = nn.Linear(d, heads * self.d_head)
        self.k = nn.Linear(d, heads * self.d_head)
        self.v = nn.Linear(d, self.d_head)  # shared by all heads
        self.out = nn.Linear(self.d_head, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, q: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, Tq, d), kv (B, Tk, d), mask (Tq, Tk) bool -> (out (B, Tq, d), weights (B, Tq, Tk))."""
        b, tq, _ = q.shape
        tk = kv.shape[1]
        qh = self.q(q).view(b, tq, self.heads, self.d_head).transpose(1, 2)  # (B, H, Tq, dh)
        kh = self.k(kv).view(b, tk, self.heads, self.d_head).transpose(1, 2)  # (B, H, Tk, dh)
        v = self.v(kv).unsqueeze(1)  # (B, 1, Tk, dh)
        scores = (qh @ kh.transpose(-1, -2)) / math.sqrt(self.d_head)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)  # (B, H, Tq, Tk)
        heads_out = self.drop(attn) @ v  # (B, H, Tq, dh)
        return self.drop(self.out(heads_out.mean(1))), attn.mean(1)


def run_lstm(lstm: nn.LSTM, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``lstm(x, state)``; under CPU fp16 autocast in float32, since oneDNN has no fp16 LSTM on CPU."""
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and \
            torch.get_autocast_dtype("cpu") == torch.float16:
        with torch.autocast("cpu", enabled=False):
            out, (h, c) = lstm(x.float(), (state[0].float(), state[1].float()))
        return out, (h, c)
    return lstm(x, state)
