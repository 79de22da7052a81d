"""What ``torch.autocast`` on CUDA does to an ATen op: ``lower`` (runs in bf16/fp16), ``fp32`` or ``promote``.

The lists are torch's own: the ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``,
``AT_FORALL_FP32_SET_OPT_DTYPE`` and ``AT_FORALL_PROMOTE`` macros of ``ATen/autocast_mode.h``, read from the
installed torch's headers (``torch/include``), so that they follow the torch that runs. Where the headers are
not installed, :data:`FALLBACK` (the same lists, from torch 2.13's header, checked against the installed
header by ``tests/measure/test_op_formulas.py``) stands in.

Beyond the header:

- cuDNN's RNNs have their own autocast wrapper (``ATen/cudnn/AutocastRNN.cpp``: weights and inputs cast to
  half), so ``_cudnn_rnn`` and the CPU LSTM that stands for it (``mkldnn_rnn_layer``) are ``lower``;
- every scaled-dot-product kernel (flash, efficient, cuDNN, the CPU flash) comes from
  ``scaled_dot_product_attention``, which is ``lower``;
- a backward op takes its forward's policy (``native_layer_norm_backward`` as ``layer_norm``,
  ``_softmax_backward_data`` as ``softmax``, ``mm`` as ``mm``): it runs on what the forward saved;
- ops on no list run in the dtype of their inputs (torch's type promotion: the widest): booked ``promote``.

Op names are matched on their overload packet's name, after dropping a leading underscore, a ``native_``
prefix and a ``_forward`` / ``_backward`` / ``_backward_data`` / ``_backward_input`` suffix.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

LOWER, FP32, PROMOTE = "lower", "fp32", "promote"

#: The header's lists as of torch 2.13 (used only where the installed torch ships no headers).
FALLBACK: dict[str, frozenset[str]] = {
    LOWER: frozenset({
        "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
        "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
        "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
        "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention"}),
    FP32: frozenset({
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm",
        "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
        "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
        "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
        "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
        "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
        "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d",
        "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d",
        "_upsample_bicubic2d_aa", "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "sum", "norm"}),
    PROMOTE: frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
                        "index_put", "tensordot", "scatter_add"}),
}

_MACROS = {LOWER: ("AT_FORALL_LOWER_PRECISION_FP",), FP32: ("AT_FORALL_FP32", "AT_FORALL_FP32_SET_OPT_DTYPE"),
           PROMOTE: ("AT_FORALL_PROMOTE",)}

#: Kernels that come from a lowered op the header names under another name (see the module doc).
EXTRA_LOWER = frozenset({"_cudnn_rnn", "mkldnn_rnn_layer", "miopen_rnn", "_scaled_dot_product_efficient_attention",
                         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                         "_scaled_dot_product_fused_attention_overrideable", "_efficient_attention",
                         "_flash_attention", "_scaled_mm"})


def header_path() -> Path | None:
    """``ATen/autocast_mode.h`` of the installed torch, or None."""
    import torch

    path = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    return path if path.is_file() else None


def parse_header(text: str) -> dict[str, frozenset[str]]:
    """{policy: op names} from the text of ``ATen/autocast_mode.h`` (its ``AT_FORALL_*`` macros)."""
    out: dict[str, frozenset[str]] = {}
    for policy, macros in _MACROS.items():
        names: set[str] = set()
        for macro in macros:
            m = re.search(rf"#define {macro}\(_\)(.*?)(?:\n\s*\n|\n#)", text, re.S)
            if m is None:
                raise ValueError(f"autocast_mode.h has no {macro} list")
            names |= set(re.findall(r"_\(\s*(?:ADD_NS\()?([A-Za-z0-9_]+)", m.group(1)))
        out[policy] = frozenset(names)
    # the norms of AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE run in fp32 too
    if "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE" in text:
        out[FP32] = out[FP32] | {"norm"}
    return out


@functools.cache
def lists() -> tuple[dict[str, frozenset[str]], str]:
    """({policy: op names}, where they came from)."""
    path = header_path()
    if path is not None:
        try:
            return parse_header(path.read_text()), f"torch's {path.name}"
        except (OSError, ValueError):
            pass
    return FALLBACK, "trainbench's copy of torch 2.13's autocast_mode.h lists"


_SUFFIXES = ("_backward_data", "_backward_input", "_backward_weight", "_backward", "_forward")


def _base(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name


@functools.cache
def policy(name: str) -> str:
    """``lower``, ``fp32`` or ``promote``: what CUDA autocast does to the ATen op ``name`` (overload packet)."""
    table, _ = lists()
    candidates = []
    for n in (name, _base(name)):
        candidates += [n, n.lstrip("_"), n.removeprefix("native_"), n.lstrip("_").removeprefix("native_")]
    for n in candidates:
        if n in EXTRA_LOWER or n in table[LOWER] or n.startswith(("_scaled_dot_product_", "_efficient_attention",
                                                                   "_flash_attention")):
            return LOWER
        if n in table[FP32]:
            return FP32
    return PROMOTE
