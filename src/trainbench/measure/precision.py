"""The training recipe per device: ``trainer.precision=auto`` and ``trainer.tf32`` resolved and recorded.

``auto`` picks what a team would train with on the device the run finds:

- a CUDA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell: native bf16 tensor cores):
  ``bf16`` autocast (no GradScaler needed: bf16 has fp32's exponent range);
- capability 7.x (V100 7.0, Turing T4/RTX 20xx 7.5: fast fp16 tensor cores, no native bf16): ``fp16``
  autocast with a GradScaler (:meth:`trainbench.models.base.BuildContext.grad_scaler`);
- an older GPU (no tensor cores) or a CPU: ``fp32`` (autocast on a CPU rarely speeds training up and bf16
  matmuls there are often slower than fp32).

``trainer.tf32=true`` lets fp32 matmuls and convolutions use TF32 tensor cores where they exist
(capability >= 8.0); elsewhere it has nothing to turn on. An explicit ``trainer.precision`` is used as
given. The run records ``trainer.precision_resolved``, ``trainer.precision_reason``,
``trainer.tf32_resolved`` and ``trainer.tf32_reason`` as params. The functions take the capability as an
argument so that tests can resolve for any GPU without one.

:func:`fast_path_warnings` says which of the recipe's switches (``trainer.precision``, ``compile``,
``optimizer_impl``) are slow or mismeasured on the device the run found.
"""

from __future__ import annotations

from typing import Any

import torch

#: Lowest compute capability with native bf16 and TF32 tensor cores (Ampere).
BF16_MIN_CAPABILITY = (8, 0)
#: Lowest compute capability with fp16 tensor cores (Volta).
FP16_MIN_CAPABILITY = (7, 0)


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The CUDA compute capability of ``device``; None for a CPU (or any non-CUDA device)."""
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def resolve_precision(requested: str, device_type: str, capability: tuple[int, int] | None) -> tuple[str, str]:
    """(fp32 | bf16 | fp16, why) for ``trainer.precision`` on a device of this type and capability."""
    requested = getattr(requested, "value", requested)
    if requested != "auto":
        return str(requested), f"explicit trainer.precision={requested}"
    if device_type != "cuda" or capability is None:
        return "fp32", f"auto on {device_type}: fp32 (autocast rarely speeds up training on a CPU)"
    cap = f"{capability[0]}.{capability[1]}"
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return "bf16", f"auto on a GPU of capability {cap} (>= 8.0: native bf16 tensor cores): bf16 autocast"
    if tuple(capability) >= FP16_MIN_CAPABILITY:
        return "fp16", (f"auto on a GPU of capability {cap} (7.x: fast fp16 tensor cores, no native bf16): "
                        "fp16 autocast with a GradScaler")
    return "fp32", f"auto on a GPU of capability {cap} (< 7.0: no tensor cores): fp32"


def resolve_tf32(enabled: bool, device_type: str, capability: tuple[int, int] | None) -> tuple[bool, str]:
    """(TF32 on?, why) for ``trainer.tf32`` on a device of this type and capability."""
    if not enabled:
        return False, "trainer.tf32=false"
    if device_type != "cuda" or capability is None:
        return False, f"no TF32 on {device_type}"
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return True, f"capability {capability[0]}.{capability[1]} has TF32 tensor cores"
    return False, f"capability {capability[0]}.{capability[1]} has no TF32 (needs >= 8.0)"


def apply_tf32(on: bool) -> None:
    """Allow (or forbid) TF32 in fp32 matmuls (cuBLAS) and convolutions (cuDNN) for this process."""
    torch.backends.cuda.matmul.allow_tf32 = bool(on)
    torch.backends.cudnn.allow_tf32 = bool(on)


def fast_path_warnings(trainer: Any, device: torch.device) -> list[str]:
    """Warnings for ``trainer.precision`` / ``compile`` / ``optimizer_impl`` on ``device``."""
    out = []
    precision = getattr(trainer.precision, "value", trainer.precision)
    impl = getattr(trainer.optimizer_impl, "value", trainer.optimizer_impl)
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
