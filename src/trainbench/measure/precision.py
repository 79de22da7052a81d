"""The training recipe per device: ``trainer.precision=auto`` and ``trainer.tf32`` resolved and recorded.

The rules (what ``auto`` picks on a device of a given compute capability, where TF32 exists) are
:mod:`trainbench.core.precision`'s, shared with the projection; this module gives them the device torch
found. ``trainer.tf32=true`` lets fp32 matmuls and convolutions use TF32 tensor cores where they exist
(capability >= 8.0); elsewhere it has nothing to turn on. An explicit ``trainer.precision`` is used as
given. The run records ``trainer.precision_resolved``, ``trainer.precision_reason``,
``trainer.tf32_resolved`` and ``trainer.tf32_reason`` as params.

:func:`fast_path_warnings` says which of the recipe's switches (``trainer.precision``, ``compile``,
``optimizer_impl``) are slow or mismeasured on the device the run found.
"""

from __future__ import annotations

from typing import Any

import torch

from trainbench.core.precision import resolve_precision, resolve_tf32

__all__ = ["apply_tf32", "device_capability", "fast_path_warnings", "resolve_precision", "resolve_tf32"]


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device``; None for a CPU (or any non-CUDA device)."""
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def apply_tf32(on: bool) -> None:
    """Allow (or forbid) TF32 in fp32 matmuls (cuBLAS) and convolutions (cuDNN) for this process."""
    torch.backends.cuda.matmul.allow_tf32 = bool(on)
    torch.backends.cudnn.allow_tf32 = bool(on)


def fast_path_warnings(trainer: Any, device: torch.device) -> list[str]:
    """Warnings for ``trainer.precision`` / ``compile`` / ``optimizer_impl`` on ``device``."""
    out = []
    precision, impl = trainer.precision, trainer.optimizer_impl
    if trainer.compile and trainer.warmup_epochs < 1:
        out.append("trainer.compile=true with trainer.warmup_epochs=0: the first measured epoch includes "
                   "torch.compile's compilation (tens of seconds). Set trainer.warmup_epochs>=1.")
    if device.type == "cpu" and precision == "fp16":
        out.append("trainer.precision=fp16 on a CPU: most CPUs have no fast fp16 matmul, so this is usually "
                   "far slower than fp32 (benchmarks/bench_models.py measures it). bf16 or fp32 suit CPUs.")
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        out.append("trainer.precision=bf16 on a GPU without native bf16 (pre-Ampere): it is emulated and slow.")
    if device.type == "cuda" and impl in ("foreach", "forloop"):
        out.append(f"trainer.optimizer_impl={impl} on CUDA: the fused AdamW (auto) is faster; this is a "
                   "comparison setting.")
    return out
