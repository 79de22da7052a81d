"""FLOP and byte formulas for the ATen ops ``torch.utils.flop_counter`` does not count, CPU and CUDA alike.

``torch.utils.flop_counter`` (torch 2.13) counts matmuls, convolutions and the CUDA attention kernels
(flash, efficient, cuDNN, forward and backward). It has no formula for:

- recurrent layers: ``mkldnn_rnn_layer`` / ``mkldnn_rnn_layer_backward`` (a CPU LSTM, one layer and one
  direction per call), ``_cudnn_rnn`` / ``_cudnn_rnn_backward`` (CUDA, every layer and direction in one
  call) and the composite ``lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` ops (which reach a dispatch mode
  only where a backend registers them directly);
- the CPU flash attention ``_scaled_dot_product_flash_attention_for_cpu`` and its backward, and
  ``_scaled_dot_product_fused_attention_overrideable`` (the out-of-tree backends' SDPA) and its backward.
  The math SDPA decomposes into ``bmm`` and ``softmax``, which the counter already counts.

:data:`FORMULAS` maps each to a formula in ``flop_counter``'s convention (tensor arguments arrive as shapes,
``out_shape`` as a keyword), so that ``FlopCounterMode(custom_mapping=FORMULAS)`` counts them; the
workload profile (:mod:`trainbench.measure.workload`) uses the same formulas.

**Recurrent layers** (per layer and direction; ``T`` steps, ``B`` batch rows, input size ``I``, hidden
size ``H``, ``G`` gates: 4 for LSTM, 3 for GRU, 1 for a plain RNN; ``E`` elementwise FLOPs per hidden unit
and step, :data:`GATE_ELEMENTWISE`):

- forward: the input projection of every step as one GEMM, ``2·T·B·I·G·H`` (independent of the
  recurrence, as cuDNN and oneDNN compute it), then ``T`` dependent steps of ``2·B·H·G·H`` (the recurrent
  GEMM) ``+ B·E·H`` (gates) each: ``2·T·B·(I + H)·G·H + T·B·E·H`` in all;
- backward: ``T`` dependent steps of ``2·B·G·H·H + 2·B·E·H`` (the gradient of the previous hidden state and
  the gates' backward), then three GEMMs over all steps (input gradient ``2·T·B·G·H·I``, input-weight
  gradient ``2·T·B·G·H·I``, recurrent-weight gradient ``2·T·B·G·H·H``) and, with biases, the bias gradient
  (a reduction of ``T·B·G·H`` adds): about twice the forward.

:func:`rnn_op_work` returns that split (the independent kernels and the dependent chain with its per-step
FLOPs and bytes), which the workload profile records as ``kernels`` and ``chains``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

#: cuDNN's RNN mode numbers, as ``mkldnn_rnn_layer`` and ``_cudnn_rnn`` take them.
RNN_MODES = {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}

#: Elementwise FLOPs per hidden unit and time step of one forward step (with biases, without), counting an
#: add, a multiply and an activation (sigmoid, tanh, relu) as one FLOP each:
#: - LSTM, 21 with biases: 4 gates x 3 adds (input GEMM + recurrent GEMM + b_ih + b_hh), 5 activations
#:   (3 sigmoids, 2 tanh), c = f*c + i*g (3), h = o*tanh(c) (1); 13 without (the 8 bias adds).
#: - GRU, 17 with biases: r and z, 2 x 3 adds; n = tanh(x W_n + b_in + r*(h W_n + b_hn)), 4; 3 activations;
#:   h' = (1 - z)*n + z*h, 4. 11 without (r and z lose 4 bias adds, n loses 2).
#: - plain RNN, 4 with biases (3 adds, 1 activation), 2 without.
GATE_ELEMENTWISE = {"lstm": (21, 13), "gru": (17, 11), "rnn_tanh": (4, 2), "rnn_relu": (4, 2)}


@dataclass(frozen=True)
class Piece:
    """One kernel's (or one chain step's) work: FLOPs and bytes read + written."""

    flops: int
    bytes: int


@dataclass(frozen=True)
class RnnWork:
    """The work of a recurrent op: independent kernels plus ``chains`` dependent chains of ``steps`` steps."""

    what: str  # lstm | gru | rnn_tanh | rnn_relu, with "_backward" for a backward op
    kernels: tuple[Piece, ...]
    chains: int
    steps: int
    step: Piece

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels) + self.chains * self.steps * self.step.flops

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in self.kernels) + self.chains * self.steps * self.step.bytes


def _elementwise(mode: str, bias: bool) -> int:
    with_bias, without = GATE_ELEMENTWISE[mode]
    return with_bias if bias else without


def rnn_layer_forward(mode: str, steps: int, rows: int, n_in: int, hidden: int, bias: bool, elem_size: int,
                      train: bool = True, state: int | None = None) -> tuple[Piece, Piece]:
    """(input-projection GEMM, one recurrent step) of one layer and direction, forward. ``rows`` = T·B (the
    rows of a packed sequence); ``state`` = the recurrent state's size (``proj_size`` when projected, else
    ``hidden``)."""
    g, e = GATES[mode], _elementwise(mode, bias)
    hr = state or hidden
    b = max(1, math.ceil(rows / max(steps, 1)))  # batch rows per step (the first, fullest, step if packed)
    gemm = Piece(2 * rows * n_in * g * hidden, elem_size * (rows * n_in + g * hidden * n_in + rows * g * hidden))
    flops = 2 * b * hr * g * hidden + b * e * hidden + (2 * b * hidden * hr if hr != hidden else 0)
    cell = 2 * b * hidden if mode == "lstm" else 0  # read c_{t-1}, write c_t
    moved = (g * hidden * hr + (2 * g * hidden if bias else 0) + b * g * hidden + 2 * b * hr + cell
             + (b * g * hidden if train else 0))  # W_hh, biases, x-gates, h in/out, c, saved gates
    return gemm, Piece(flops, elem_size * moved)


def rnn_layer_backward(mode: str, steps: int, rows: int, n_in: int, hidden: int, bias: bool, elem_size: int,
                       state: int | None = None) -> tuple[tuple[Piece, ...], Piece]:
    """(the GEMMs over all steps, one dependent step) of one layer and direction, backward."""
    g, e = GATES[mode], _elementwise(mode, bias)
    hr = state or hidden
    b = max(1, math.ceil(rows / max(steps, 1)))
    flops = 2 * b * g * hidden * hr + 2 * b * e * hidden
    cell = 3 * b * hidden if mode == "lstm" else 0  # read c_{t-1}, dc in, dc out
    moved = g * hidden * hr + b * g * hidden + 3 * b * hr + cell + b * g * hidden  # W_hh, saved gates, dy/dh, dgates
    step = Piece(flops, elem_size * moved)
    gh = g * hidden
    kernels = [
        Piece(2 * rows * gh * n_in, elem_size * (rows * gh + gh * n_in + rows * n_in)),  # d input
        Piece(2 * rows * gh * n_in, elem_size * (rows * gh + rows * n_in + gh * n_in)),  # d W_ih
        Piece(2 * rows * gh * hr, elem_size * (rows * gh + rows * hr + gh * hr)),  # d W_hh
    ]
    if bias:
        kernels.append(Piece(rows * gh, elem_size * (rows * gh + 2 * gh)))  # d b_ih, d b_hh (one reduction)
    return tuple(kernels), step


def _elem_size_of(x: Any) -> int:
    return x.element_size() if isinstance(x, torch.Tensor) else 4


def _steps_rows(input_shape: Sequence[int], batch_sizes: Sequence[int] | None, batch_first: bool) -> tuple[int, int]:
    if batch_sizes is not None and len(batch_sizes) > 0:  # a packed sequence: input is (sum of batch sizes, I)
        return len(batch_sizes), int(input_shape[0])
    t = int(input_shape[1] if batch_first else input_shape[0])
    return t, int(input_shape[0]) * int(input_shape[1])


def mkldnn_rnn_work(args: Sequence[Any], backward: bool) -> RnnWork:
    """The work of one ``mkldnn_rnn_layer`` (forward) or ``mkldnn_rnn_layer_backward`` call (tensors or
    shapes in ``args``, in the op's schema order)."""
    if not backward:
        x, w_hh = args[0], args[2]
        batch_sizes, mode, hidden, bias, batch_first, train = args[8], args[9], args[10], args[12], args[14], args[15]
    else:
        x, w_hh = args[0], args[2]
        mode, hidden, bias, train, batch_sizes, batch_first = args[14], args[15], args[17], args[18], args[20], args[21]
    shape = _shape(x)
    name = RNN_MODES[int(mode)]
    del batch_first  # the caller (at::native's mkldnn LSTM) hands the input time-major whatever the flag says
    steps, rows = _steps_rows(shape, batch_sizes, False)
    n_in, hr = int(shape[-1]), int(_shape(w_hh)[1])
    es = _elem_size_of(x)
    if not backward:
        gemm, step = rnn_layer_forward(name, steps, rows, n_in, int(hidden), bool(bias), es, bool(train), hr)
        return RnnWork(name, (gemm,), 1, steps, step)
    kernels, step = rnn_layer_backward(name, steps, rows, n_in, int(hidden), bool(bias), es, hr)
    return RnnWork(f"{name}_backward", kernels, 1, steps, step)


def cudnn_rnn_work(args: Sequence[Any], kwargs: dict[str, Any], backward: bool) -> RnnWork:
    """The work of one ``_cudnn_rnn`` or ``_cudnn_rnn_backward`` call: every layer and direction."""
    names = (["input", "weight", "weight_stride0", "weight_buf", "hx", "cx"]
             + (["output", "grad_output", "grad_hy", "grad_cy"] if backward else [])
             + ["mode", "hidden_size", "proj_size", "num_layers", "batch_first", "dropout", "train", "bidirectional",
                "batch_sizes"])
    a = dict(zip(names, args, strict=False))
    a.update({k: v for k, v in kwargs.items() if k in names})
    shape = _shape(a["input"])
    name = RNN_MODES[int(a["mode"])]
    hidden, proj = int(a["hidden_size"]), int(a["proj_size"] or 0)
    layers, dirs = int(a["num_layers"]), 2 if a["bidirectional"] else 1
    steps, rows = _steps_rows(shape, a["batch_sizes"], bool(a["batch_first"]))
    weights = a["weight"] or []
    per_layer = len(weights) // max(1, layers * dirs)
    bias = per_layer >= 4
    hr = proj or hidden
    es = _elem_size_of(a["input"])
    kernels: list[Piece] = []
    step_f = step_b = 0
    for layer in range(layers):
        n_in = int(shape[-1]) if layer == 0 else hr * dirs
        for _ in range(dirs):
            if backward:
                ks, st = rnn_layer_backward(name, steps, rows, n_in, hidden, bias, es, hr)
                kernels.extend(ks)
            else:
                gemm, st = rnn_layer_forward(name, steps, rows, n_in, hidden, bias, es, bool(a["train"]), hr)
                kernels.append(gemm)
            step_f, step_b = step_f + st.flops, step_b + st.bytes
    chains = layers * dirs  # every layer and direction: one dependent chain of T steps (per-chain mean step)
    return RnnWork(name + ("_backward" if backward else ""), tuple(kernels), chains, steps,
                   Piece(step_f // chains, step_b // chains))


def composite_rnn_work(mode: str, args: Sequence[Any]) -> RnnWork:
    """The forward work of the composite ``lstm``/``gru``/``rnn_tanh``/``rnn_relu`` ops (``.input`` or
    ``.data`` overload, told apart by the fourth argument: ``has_biases`` for ``.input``)."""
    if not isinstance(args[3], bool):  # .data: (data, batch_sizes, hx, params, has_biases, ...)
        x, batch_sizes, params, bias, layers, train, bidir = args[0], args[1], args[3], args[4], args[5], args[7], args[8]
        batch_first = False
        bs = list(batch_sizes.tolist()) if isinstance(batch_sizes, torch.Tensor) else [0] * int(batch_sizes[0])
    else:
        x, params, bias, layers, train, bidir, batch_first = args[0], args[2], args[3], args[4], args[6], args[7], args[8]
        bs = None
    shape = _shape(x)
    steps, rows = _steps_rows(shape, bs, bool(batch_first))
    dirs = 2 if bidir else 1
    w_ih = _shape(params[0])
    hidden = int(w_ih[0]) // GATES[mode]
    w_hh = _shape(params[1])
    hr = int(w_hh[1])
    es = _elem_size_of(x)
    kernels, sf, sb = [], 0, 0
    for layer in range(int(layers)):
        n_in = int(shape[-1]) if layer == 0 else hr * dirs
        for _ in range(dirs):
            gemm, st = rnn_layer_forward(mode, steps, rows, n_in, hidden, bool(bias), es, bool(train), hr)
            kernels.append(gemm)
            sf, sb = sf + st.flops, sb + st.bytes
    chains = int(layers) * dirs
    return RnnWork(mode, tuple(kernels), chains, steps, Piece(sf // chains, sb // chains))


def _shape(x: Any) -> tuple[int, ...]:
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    return tuple(int(d) for d in x)


# --------------------------------------------------------------------------------------------------
# the work of an op call (tensors), and the FLOP formulas in flop_counter's convention (shapes)
# --------------------------------------------------------------------------------------------------


def rnn_op_work(packet: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> RnnWork | None:
    """The :class:`RnnWork` of a recurrent op call, or None for any other op."""
    if packet is aten.mkldnn_rnn_layer:
        return mkldnn_rnn_work(args, backward=False)
    if packet is aten.mkldnn_rnn_layer_backward:
        return mkldnn_rnn_work(args, backward=True)
    if packet is aten._cudnn_rnn:
        return cudnn_rnn_work(args, kwargs, backward=False)
    if packet is aten._cudnn_rnn_backward:
        return cudnn_rnn_work(args, kwargs, backward=True)
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        if packet is getattr(aten, mode):
            return composite_rnn_work(mode, args)
    return None


def _rnn_formula(packet: Any) -> Callable[..., int]:
    def formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        work = rnn_op_work(packet, args, kwargs)
        return 0 if work is None else work.flops
    return formula


def _sdpa_cpu_flop(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``_scaled_dot_product_flash_attention_for_cpu`` and the overrideable fused SDPA: 4·B·H·L·S·D
    (``QK^T`` and ``PV``; a causal mask is counted in full, as torch counts the CUDA kernels)."""
    return int(sdpa_flop_count(query, key, value))


def _sdpa_cpu_backward_flop(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None,
                            **kwargs: Any) -> int:
    """The backward of the CPU flash attention and the overrideable fused SDPA, as torch counts the CUDA
    kernels' backward: the scores recomputed plus four GEMMs, 10·B·H·L·S·D for D = Dv."""
    return int(sdpa_backward_flop_count(grad_out, query, key, value))


#: FLOP formulas for ``FlopCounterMode(custom_mapping=...)`` (shape convention; :func:`count_flops`).
FORMULAS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flop,
    aten._scaled_dot_product_fused_attention_overrideable: _sdpa_cpu_flop,
    aten._scaled_dot_product_fused_attention_overrideable_backward: _sdpa_cpu_backward_flop,
    **{p: _rnn_formula(p) for p in (aten.mkldnn_rnn_layer, aten.mkldnn_rnn_layer_backward, aten._cudnn_rnn,
                                    aten._cudnn_rnn_backward, aten.lstm, aten.gru, aten.rnn_tanh, aten.rnn_relu)},
}


def flop_mapping() -> dict[Any, Callable[..., int]]:
    """The formulas torch's counter lacks, for ``FlopCounterMode(custom_mapping=flop_mapping())``; an op
    torch counts itself keeps torch's formula."""
    from torch.utils.flop_counter import flop_registry

    return {k: v for k, v in FORMULAS.items() if k not in flop_registry}
