"""The training recipe's precision rules, once: what ``auto`` resolves on a device, and where TF32 exists.

Used by both sides of the torch boundary: the run (:mod:`trainbench.measure.precision`, with the capability
torch reports) and the projection (:mod:`trainbench.analysis.projection.kernel_model`, with the capability the GPU
catalogue states), so that a projection projects what a run on that GPU would train with.

``auto`` picks what a team would train with on the device:

- a CUDA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell: native bf16 tensor cores):
  ``bf16`` autocast (no GradScaler needed: bf16 has fp32's exponent range);
- capability 7.x (V100 7.0, Turing T4/RTX 20xx 7.5: fast fp16 tensor cores, no native bf16): ``fp16``
  autocast with a GradScaler;
- an older GPU (no tensor cores) or a CPU: ``fp32`` (autocast on a CPU rarely speeds training up and bf16
  matmuls there are often slower than fp32).

TF32 (fp32 matmuls and convolutions on tensor cores) exists from capability 8.0.

No torch: the capability is an argument (``None`` for a CPU), so that any GPU can be resolved without one.
"""

from __future__ import annotations

from trainbench.core.enums import ValueEnum

#: Lowest compute capability with native bf16 and TF32 tensor cores (Ampere).
BF16_MIN_CAPABILITY = (8, 0)
#: Lowest compute capability with fp16 tensor cores (Volta).
FP16_MIN_CAPABILITY = (7, 0)


class Precision(ValueEnum):
    """``trainer.precision``: the autocast precision of a run's forward passes."""

    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class ProjectionPrecision(ValueEnum):
    """``projection.precision``: the precision projections are made at (``tf32``: fp32 with TF32 on)."""

    auto = "auto"
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"


def parse_capability(text: str | None) -> tuple[int, int] | None:
    """``"8.6"`` as ``(8, 6)``; None for a missing or unreadable capability."""
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _cap_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def auto_precision(device_type: str, capability: tuple[int, int] | None) -> tuple[str, str]:
    """(fp32 | bf16 | fp16, why): what ``trainer.precision=auto`` resolves on a device of this type
    (``cuda``, ``cpu``, ...) and compute capability."""
    if device_type != "cuda" or capability is None:
        return "fp32", f"auto on {device_type}: fp32 (autocast rarely speeds up training on a CPU)"
    cap = _cap_text(capability)
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return "bf16", f"auto on a GPU of capability {cap} (>= 8.0: native bf16 tensor cores): bf16 autocast"
    if tuple(capability) >= FP16_MIN_CAPABILITY:
        return "fp16", (f"auto on a GPU of capability {cap} (7.x: fast fp16 tensor cores, no native bf16): "
                        "fp16 autocast with a GradScaler")
    return "fp32", f"auto on a GPU of capability {cap} (< 7.0: no tensor cores): fp32"


def resolve_precision(requested: str, device_type: str, capability: tuple[int, int] | None) -> tuple[str, str]:
    """(fp32 | bf16 | fp16, why) for ``trainer.precision`` on a device of this type and capability: ``auto``
    as :func:`auto_precision`, an explicit precision as given."""
    if requested != Precision.auto:
        return str(requested), f"explicit trainer.precision={requested}"
    return auto_precision(device_type, capability)


def has_tf32(device_type: str, capability: tuple[int, int] | None) -> bool:
    """Does a device of this type and capability have TF32 tensor cores?"""
    return device_type == "cuda" and capability is not None and tuple(capability) >= BF16_MIN_CAPABILITY


def resolve_tf32(enabled: bool, device_type: str, capability: tuple[int, int] | None) -> tuple[bool, str]:
    """(TF32 on?, why) for ``trainer.tf32`` on a device of this type and capability."""
    if not enabled:
        return False, "trainer.tf32=false"
    if device_type != "cuda" or capability is None:
        return False, f"no TF32 on {device_type}"
    if has_tf32(device_type, capability):
        return True, f"capability {_cap_text(capability)} has TF32 tensor cores"
    return False, f"capability {_cap_text(capability)} has no TF32 (needs >= 8.0)"
