"""Performance instruments shared by the benchmark suite, the GPU check and the tests.

- :func:`count_flops`: FLOPs of a callable from ``torch.utils.flop_counter.FlopCounterMode`` (matmuls,
  convolutions, attention: a lower bound of the work, elementwise ops are not counted), with the
  convolution backward counted as twice the forward (the counter books a grouped/depthwise conv's
  weight gradient as if the conv were dense, ``channels`` times too much).
- :func:`peak_tflops`: the device's dense peak of one dtype from ``conf/hardware/*.yaml`` (``gpu`` and
  ``peak_tflops.<dtype>``, read through the hardware schema), for MFU = achieved FLOP/s / the peak of the
  precision the run used.
- :func:`forbid_host_syncs`: a context in which a ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
  ``bool()``, ``float()``, ``int()`` on a tensor called from trainbench's own code raises
  :class:`HostSyncError`; on CUDA it also turns on ``torch.cuda.set_sync_debug_mode("error")``, which
  catches every synchronising op (``nonzero``, boolean-mask indexing, ...) wherever it is called.
- :func:`fast_path_warnings`: what to tell a user about the precision/compile switches on this device.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # .../src/trainbench


# --------------------------------------------------------------------------------------------------
# FLOPs and MFU
# --------------------------------------------------------------------------------------------------


@dataclass
class FlopCount:
    total: int
    by_op: dict[str, int] = field(default_factory=dict)
    note: str = ("matmul, convolution and attention FLOPs counted by torch.utils.flop_counter "
                 "(elementwise ops not counted: a lower bound); conv backward = 2 x forward")


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """FLOPs of running ``fn()`` once (forward, backward and optimiser step, whatever it does)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
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
    (None, why). A card without that dtype (bf16 on a T4) has no peak for it."""
    from trainbench.config.run import load_hardware_profiles

    if conf_dir is None:
        from trainbench import REPO_ROOT

        conf_dir = Path(REPO_ROOT) / "conf" / "hardware"
    for name, hw in load_hardware_profiles(conf_dir).items():
        gpu, peaks = hw.gpu, hw.peak_tflops
        if gpu and peaks and _same_gpu(gpu, device_name):
            if peaks.get(precision):
                return float(peaks[precision]), f"hardware={name} ({precision})"
            return None, f"hardware={name} lists no {precision} peak (the card lacks it)"
    return None, f"no conf/hardware profile names {device_name!r} with peak_tflops"


def _same_gpu(profile_gpu: str, device_name: str) -> bool:
    a, b = profile_gpu.lower().replace("nvidia", "").split(), device_name.lower().replace("nvidia", "").split()
    return bool(a) and all(tok in b for tok in a)


# --------------------------------------------------------------------------------------------------
# host synchronisation inside an epoch
# --------------------------------------------------------------------------------------------------


# Not a user error (trainbench.core.errors): the fast-path tests' assertion; the conformance check records
# host syncs as a failed check instead of raising it.
class HostSyncError(AssertionError):
    """Training code read a tensor on the host (or ran a synchronising op) where it must not."""


_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def forbid_host_syncs(raise_on_sync: bool = True, cuda_debug_mode: bool = True,
                      code_dirs: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """Within the block, host reads of tensors from trainbench's own code are recorded (and raise).

    ``code_dirs``: more source folders (or files) whose calls count, e.g. a plugin model's package
    (trainbench.conformance).
    Yields the list of recorded calls (``"file:line method"``; with ``raise_on_sync=False`` the block runs
    to the end and the list holds every one, CUDA sync warnings included, once the block has exited). Calls from torch's own code are not
    counted (e.g. the optimiser's step counter, a CPU tensor). On CUDA the sync debug mode catches the
    rest; without a GPU, synchronising ops that are not method calls (``nonzero``, mask indexing) are
    not seen.
    """
    found: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in _SYNC_METHODS}
    roots = (_PACKAGE_DIR, *code_dirs)

    def wrap(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def checked(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            where = frame.f_code.co_filename
            if where.startswith(roots) and not where.endswith("perf.py"):
                msg = f"{Path(where).name}:{frame.f_lineno} Tensor.{name}"
                found.append(msg)
                if raise_on_sync:
                    raise HostSyncError(f"host sync inside the epoch: {msg} (keep values on the device; the "
                                        "harness reads them once after the timer stops)")
            return orig(self, *args, **kwargs)

        return checked

    cuda = cuda_debug_mode and torch.cuda.is_available() and torch.cuda.is_initialized()
    previous = torch.cuda.get_sync_debug_mode() if cuda else 0
    for name, orig in originals.items():
        setattr(torch.Tensor, name, wrap(name, orig))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                # "error" raises at the first synchronising op; "warn" lets the block finish and count them
                torch.cuda.set_sync_debug_mode("error" if raise_on_sync else "warn")
            try:
                yield found
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode(previous)
        found.extend(f"cuda: {w.message}" for w in caught if "synchroniz" in str(w.message).lower())
    finally:
        for name, orig in originals.items():
            setattr(torch.Tensor, name, orig)


# --------------------------------------------------------------------------------------------------
# what to tell the user about the switches
# --------------------------------------------------------------------------------------------------


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
