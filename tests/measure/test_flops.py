"""FLOP counting (the conv backward corrected) and the peak TFLOP/s of a device from the hardware profiles."""

from __future__ import annotations

import torch

from trainbench.measure.flops import count_flops, peak_tflops


def test_flop_count_of_a_linear_layer_and_a_depthwise_conv():
    lin = torch.nn.Linear(64, 32, bias=False)
    x = torch.randn(16, 64, requires_grad=True)
    fwd = count_flops(lambda: lin(x))
    assert fwd.total == 2 * 16 * 64 * 32
    both = count_flops(lambda: lin(x).sum().backward())
    assert both.total == 3 * fwd.total  # forward + grad of input + grad of weight

    conv = torch.nn.Conv1d(48, 48, 4, groups=48, padding=3, bias=False)
    u = torch.randn(8, 48, 100, requires_grad=True)
    f = count_flops(lambda: conv(u)).total
    fb = count_flops(lambda: conv(u).sum().backward())
    assert fb.total == 3 * f  # the counter alone would book the weight gradient 48x too high
    assert fb.by_op["convolution_backward"] == 2 * f


def test_peak_tflops_from_the_hardware_profiles(tmp_path):
    # per dtype; the peak of the run's precision
    assert peak_tflops("NVIDIA H200", "bf16")[0] == 989.4
    assert peak_tflops("NVIDIA H200")[0] == 67.0  # fp32 by default
    assert peak_tflops("NVIDIA GeForce RTX 3050 Ti Laptop GPU")[0] == 8.7  # at max boost (conf/hardware)
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16")[0] == 312.0
    value, why = peak_tflops("Tesla T4", "bf16")  # Turing has no bf16
    assert value is None and "lacks" in why
    value, why = peak_tflops("NVIDIA B200")
    assert value is None and "B200" in why
    (tmp_path / "x.yaml").write_text("gpu: NVIDIA L4\npeak_tflops: {fp32: 30.3, bf16: 121}\n")
    assert peak_tflops("NVIDIA L4", "bf16", tmp_path) == (121.0, "hardware=x (bf16)")
