"""The FLOP formulas torch's counter lacks (recurrent layers, CPU flash attention), each against a hand count,
CPU and CUDA variants alike; and the autocast policy read from torch's own lists."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import flop_registry, shape_wrapper

from trainbench.measure import autocast_policy
from trainbench.measure.flops import count_flops
from trainbench.measure.op_formulas import (
    FORMULAS,
    cudnn_rnn_work,
    flop_mapping,
    mkldnn_rnn_work,
    rnn_op_work,
)

aten = torch.ops.aten
T, B, NI, H = 7, 3, 5, 6  # steps, batch rows, input size, hidden size


def lstm_forward_hand(t, b, n_in, h):
    """One LSTM layer: 4 gates x (input + recurrent) GEMMs per step, 2*NI*4H + 2*H*4H FLOPs per row, plus the gates'
    21 elementwise FLOPs per hidden unit (12 adds, 5 activations, c update 3, h 1)."""
    return t * b * (2 * n_in * 4 * h + 2 * h * 4 * h + 21 * h)


def lstm_backward_hand(t, b, n_in, h):
    """dX, dW_ih (2*T*B*4H*NI each), dW_hh (2*T*B*4H*H), the bias gradient (T*B*4H adds), and per step dh_prev
    (2*B*4H*H) with the gates' backward (2 x 21 per hidden unit)."""
    return (4 * t * b * 4 * h * n_in + 2 * t * b * 4 * h * h + t * b * 4 * h
            + t * (2 * b * 4 * h * h + 2 * 21 * b * h))


def test_a_cpu_lstm_layer_forward_and_backward_against_the_hand_count():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(NI, H, num_layers=2, batch_first=True)
    x = torch.randn(B, T, NI, requires_grad=True)
    fwd = count_flops(lambda: lstm(x))
    hand = lstm_forward_hand(T, B, NI, H) + lstm_forward_hand(T, B, H, H)  # layer 2 reads layer 1's H outputs
    assert fwd.by_op == {"mkldnn_rnn_layer": hand} and fwd.total == hand
    both = count_flops(lambda: lstm(x)[0].sum().backward())
    bwd = lstm_backward_hand(T, B, NI, H) + lstm_backward_hand(T, B, H, H)
    assert both.by_op["mkldnn_rnn_layer_backward"] == bwd and both.total == hand + bwd
    assert 1.9 < bwd / hand < 2.2  # backward ~ 2 x forward


def test_the_cuda_lstm_books_what_the_cpu_one_books():
    """_cudnn_rnn does every layer in one call: the same total as mkldnn_rnn_layer per layer, one chain per
    layer and direction, T steps each."""
    w = [torch.Size([4 * H, NI]), torch.Size([4 * H, H]), torch.Size([4 * H]), torch.Size([4 * H]),
         torch.Size([4 * H, 2 * H]), torch.Size([4 * H, H]), torch.Size([4 * H]), torch.Size([4 * H])] * 1
    w = w[:4] * 2 + w[4:] * 2  # 2 layers x 2 directions, layer 2 reads both directions (2H)
    args = (torch.Size([T, B, NI]), w, 4, None, torch.Size([4, B, H]), torch.Size([4, B, H]), 2, H, 0, 2, False,
            0.0, True, True, [], None)
    work = cudnn_rnn_work(args, {}, backward=False)
    hand = 2 * lstm_forward_hand(T, B, NI, H) + 2 * lstm_forward_hand(T, B, 2 * H, H)
    assert work.flops == hand and (work.chains, work.steps, work.what) == (4, T, "lstm")
    assert FORMULAS[aten._cudnn_rnn](*args) == hand
    bargs = args[:6] + (torch.Size([T, B, 2 * H]), None, None, None) + args[6:] + (torch.Size([9]), [True] * 4)
    bwork = cudnn_rnn_work(bargs, {}, backward=True)
    assert bwork.flops == 2 * lstm_backward_hand(T, B, NI, H) + 2 * lstm_backward_hand(T, B, 2 * H, H)
    assert bwork.what == "lstm_backward" and bwork.steps == T
    # the composite op (where a backend dispatches it) books the same forward
    params = [torch.Size([4 * H, NI]), torch.Size([4 * H, H]), torch.Size([4 * H]), torch.Size([4 * H])]
    comp = rnn_op_work(aten.lstm, (torch.Size([T, B, NI]), [None, None], params, True, 1, 0.0, True, False, False), {})
    assert comp.flops == lstm_forward_hand(T, B, NI, H)


def test_a_gru_layer_against_the_hand_count():
    """GRU: 3 gates; 17 elementwise FLOPs per hidden unit with biases (r, z: 2 x 3 adds; n: 4; 3 activations;
    h' = (1-z)*n + z*h: 4), 11 without."""
    w = [torch.Size([3 * H, NI]), torch.Size([3 * H, H]), torch.Size([3 * H]), torch.Size([3 * H])]
    args = (torch.Size([B, T, NI]), w, 4, None, torch.Size([1, B, H]), None, 3, H, 0, 1, True, 0.0, True, False,
            [], None)
    work = cudnn_rnn_work(args, {}, backward=False)
    assert work.flops == T * B * (2 * NI * 3 * H + 2 * H * 3 * H + 17 * H) and work.what == "gru"
    no_bias = cudnn_rnn_work((args[0], w[:2], *args[2:]), {}, backward=False)
    assert no_bias.flops == T * B * (2 * NI * 3 * H + 2 * H * 3 * H + 11 * H)
    # a packed sequence: rows = the sum of the batch sizes, steps = their number
    packed = cudnn_rnn_work((torch.Size([3 + 3 + 2 + 1, NI]), *args[1:10], False, *args[11:14], [3, 3, 2, 1], None),
                            {}, backward=False)
    assert packed.steps == 4 and packed.kernels[0].flops == 2 * 9 * NI * 3 * H


def test_the_chain_split_keeps_the_total_and_puts_the_recurrence_in_the_steps():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(NI, H)
    x = torch.randn(T, B, NI)
    h0 = torch.zeros(1, B, H)
    args = (x, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0, h0[0], h0[0], False, [], 2, H,
            1, True, False, False, True)
    work = mkldnn_rnn_work(args, backward=False)
    (gemm,) = work.kernels
    assert gemm.flops == 2 * T * B * NI * 4 * H  # the input projection of every step: one independent GEMM
    assert work.step.flops == 2 * B * H * 4 * H + 21 * B * H and work.steps == T and work.chains == 1
    assert work.flops == lstm_forward_hand(T, B, NI, H)
    # bytes per step: W_hh, both biases, the step's input gates, h in and out, c in and out, the saved gates
    assert work.step.bytes == 4 * (4 * H * H + 2 * 4 * H + B * 4 * H + 2 * B * H + 2 * B * H + B * 4 * H)


def sdpa_fwd_hand(b, h, lq, s, d, dv):
    return 2 * b * h * lq * s * d + 2 * b * h * lq * s * dv  # Q K^T, then P V


def test_cpu_flash_attention_forward_and_backward_against_the_hand_count():
    Bq, Hq, L, D = 2, 3, 16, 8
    q = torch.randn(Bq, Hq, L, D, requires_grad=True)
    fwd = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert fwd.by_op == {"_scaled_dot_product_flash_attention_for_cpu": 4 * Bq * Hq * L * L * D}
    both = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward())
    # backward: the scores recomputed (2BHLSD) and four GEMMs (dV, dP, dQ, dK: 8BHLSD)
    assert both.by_op["_scaled_dot_product_flash_attention_for_cpu_backward"] == 10 * Bq * Hq * L * L * D
    assert both.total == 14 * Bq * Hq * L * L * D


def test_every_sdpa_variant_counts_the_same_work_for_the_same_shapes():
    """CUDA (flash, efficient, cuDNN: torch's formulas), CPU flash and the overrideable fused SDPA (ours)."""
    q, k, v = torch.Size([2, 4, 32, 16]), torch.Size([2, 4, 48, 16]), torch.Size([2, 4, 48, 24])
    o = torch.Size([2, 4, 32, 24])
    fwd = sdpa_fwd_hand(2, 4, 32, 48, 16, 24)
    bwd = 2 * 2 * 4 * 32 * 48 * 16 * 3 + 2 * 2 * 4 * 32 * 48 * 24 * 2  # QK^T, dQ, dK at D; dP, dV at Dv
    table = {**flop_registry, **{k: shape_wrapper(f) for k, f in FORMULAS.items()}}
    for op in (aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
               aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_flash_attention_for_cpu,
               aten._scaled_dot_product_fused_attention_overrideable):
        assert table[op](q, k, v) == fwd, op
    for op in (aten._scaled_dot_product_flash_attention_backward,
               aten._scaled_dot_product_efficient_attention_backward,
               aten._scaled_dot_product_cudnn_attention_backward,
               aten._scaled_dot_product_flash_attention_for_cpu_backward,
               aten._scaled_dot_product_fused_attention_overrideable_backward):
        assert table[op](o, q, k, v) == bwd, op


def test_the_math_attention_path_counts_its_matmuls():
    """With dropout on a CPU, SDPA takes the math path: two bmm forward, counted by torch's own formulas."""
    q = torch.randn(2, 3, 16, 8)
    fwd = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    assert fwd.by_op == {"bmm": 4 * 2 * 3 * 16 * 16 * 8}


def test_ours_never_replace_a_formula_torch_has():
    assert not set(flop_mapping()) & set(flop_registry)
    assert aten.mkldnn_rnn_layer in flop_mapping() and aten._scaled_dot_product_flash_attention_for_cpu in flop_mapping()


# --------------------------------------------------------------------------------------------------
# autocast
# --------------------------------------------------------------------------------------------------


def test_the_autocast_lists_are_torchs_own():
    path = autocast_policy.header_path()
    if path is None:
        pytest.skip("this torch ships no headers")
    parsed = autocast_policy.parse_header(path.read_text())
    assert parsed == autocast_policy.FALLBACK  # the fallback copy is the installed torch's list
    assert "torch's" in autocast_policy.lists()[1]


@pytest.mark.parametrize(("op", "policy"), [
    ("mm", "lower"), ("addmm", "lower"), ("bmm", "lower"), ("baddbmm", "lower"), ("convolution", "lower"),
    ("convolution_backward", "lower"), ("mkldnn_rnn_layer", "lower"), ("mkldnn_rnn_layer_backward", "lower"),
    ("_cudnn_rnn", "lower"), ("_scaled_dot_product_flash_attention_for_cpu", "lower"),
    ("_scaled_dot_product_efficient_attention_backward", "lower"),
    ("_softmax", "fp32"), ("_softmax_backward_data", "fp32"), ("_log_softmax", "fp32"),
    ("native_layer_norm", "fp32"), ("native_layer_norm_backward", "fp32"), ("mse_loss", "fp32"),
    ("nll_loss_forward", "fp32"), ("exp", "fp32"), ("cumsum", "fp32"), ("sum", "fp32"),
    ("mul", "promote"), ("gelu", "promote"), ("addcmul", "promote"), ("relu", "promote")])
def test_what_cuda_autocast_does_to_an_op(op, policy):
    assert autocast_policy.policy(op) == policy


def test_the_header_parser_reads_each_list():
    text = ("#define AT_FORALL_LOWER_PRECISION_FP(_) \\\n  _(mm) \\\n  _(conv_transpose2d, input)\n\n"
            "#define AT_FORALL_FP32(_) \\\n  _(exp) \\\n  _(pow, Scalar)\n\n"
            "#define AT_FORALL_FP32_SET_OPT_DTYPE(_) \\\n  _(softmax, int)\n\n"
            "#define AT_FORALL_PROMOTE(_) \\\n  _(addcmul)\n#else\n")
    assert autocast_policy.parse_header(text) == {"lower": {"mm", "conv_transpose2d"},
                                                  "fp32": {"exp", "pow", "softmax"}, "promote": {"addcmul"}}
    with pytest.raises(ValueError, match="AT_FORALL_PROMOTE"):
        autocast_policy.parse_header(text.split("#define AT_FORALL_PROMOTE")[0])
