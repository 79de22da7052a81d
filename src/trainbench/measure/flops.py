"""FLOPs of a training step and the device's peak, for MFU = achieved FLOP/s / the peak of the run's precision.

- :func:`count_flops`: FLOPs of a callable from ``torch.utils.flop_counter.FlopCounterMode`` (matmuls,
  convolutions, attention: a lower bound of the work, elementwise ops are not counted) with the formulas
  torch lacks (:mod:`trainbench.measure.op_formulas`: LSTM/GRU layers forward and backward, CPU and CUDA,
  gate elementwise work included; the CPU flash attention and its backward), and the convolution backward
  counted as twice the forward (the counter books a grouped/depthwise conv's weight gradient as if the conv
  were dense, ``channels`` times too much).
- :func:`peak_tflops`: the device's dense peak of one dtype from ``conf/hardware/*.yaml`` (``gpu`` and
  ``peak_tflops.<dtype>``, read through the hardware schema).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainbench.config.shared import load_hardware_profiles
from trainbench.config.team import conf_dirs
from trainbench.core.gpu_names import matching_entry


@dataclass
class FlopCount:
    total: int
    by_op: dict[str, int] = field(default_factory=dict)
    note: str = ("matmul, convolution and attention FLOPs counted by torch.utils.flop_counter, recurrent layers "
                 "and CPU flash attention by trainbench.measure.op_formulas (other elementwise ops not counted: "
                 "a lower bound); conv backward = 2 x forward")


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """FLOPs of running ``fn()`` once (forward, backward and optimiser step, whatever it does)."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainbench.measure.op_formulas import flop_mapping

    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as counter:
        fn()
    counts = counter.get_flop_counts().get("Global", {})
    by_op = {str(k).replace("aten.", ""): int(v) for k, v in counts.items()}
    conv_fwd = int(counts.get(torch.ops.aten.convolution, 0))
    total = sum(int(v) for k, v in counts.items() if k is not torch.ops.aten.convolution_backward)
    if torch.ops.aten.convolution_backward in counts:
        total += 2 * conv_fwd
        by_op["convolution_backward"] = 2 * conv_fwd
    return FlopCount(total=total, by_op=by_op)


def peak_tflops(device_name: str, precision: str = "fp32", conf_dir: Path | None = None) -> tuple[float | None, str]:
    """(dense peak TFLOP/s of ``precision``, the hardware profile it came from) for a CUDA device name, or
    (None, why). A card without that dtype (bf16 on a T4) has no peak for it. The profile is the one
    :func:`trainbench.core.gpu_names.matching_entry` names (the analysis' rule: "NVIDIA H200 NVL" is not
    ``h200``)."""
    profiles = {n: hw for n, hw in load_hardware_profiles(conf_dirs("hardware") if conf_dir is None else conf_dir
                                                          ).items() if hw.gpu and hw.peak_tflops}
    name = matching_entry({n: hw.gpu for n, hw in profiles.items()}, device_name)
    if name is None:
        return None, f"no conf/hardware profile names {device_name!r} with peak_tflops"
    peaks = profiles[name].peak_tflops
    if peaks.get(precision):
        return float(peaks[precision]), f"hardware={name} ({precision})"
    return None, f"hardware={name} lists no {precision} peak (the card lacks it)"
