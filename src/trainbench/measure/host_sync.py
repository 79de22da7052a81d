"""No host sync inside an epoch: a context in which trainbench's own code may not read a tensor on the host.

Inside :func:`forbid_host_syncs`, a ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool()``,
``float()``, ``int()`` on a tensor called from trainbench's own code raises :class:`HostSyncError`; on
CUDA it also turns on ``torch.cuda.set_sync_debug_mode("error")``, which catches every synchronising op
(``nonzero``, boolean-mask indexing, ...) wherever it is called.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import trainbench

_PACKAGE_DIR = str(Path(trainbench.__file__).resolve().parent)  # the installed package's folder


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
        @functools.wraps(orig)  # keeps the method's name: watch_host_syncs tells reads apart by it
        def checked(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            where = frame.f_code.co_filename
            if where.startswith(roots) and where != __file__:
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
# every host read of an epoch, wherever it is written (the conformance check)
# --------------------------------------------------------------------------------------------------

#: Ops whose result the host must wait for on a GPU: a value read back (``.item()``, ``float(t)``, ``bool(t)``,
#: ``f"{t:.4f}"``), or an output whose size depends on the data (the host needs it to allocate).
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive",
            "is_nonzero", "equal")
#: The torch functions whose sync op is the caller's own read (any other torch function's is its internal
#: check, such as ``F.one_hot``'s range check on a CPU, which CUDA does not make).
READ_FUNCTIONS = frozenset({
    "item", "__float__", "__int__", "__bool__", "__index__", "__complex__", "__format__", "__repr__", "__str__",
    "tolist", "numpy", "__array__", "equal", "is_nonzero", "nonzero", "argwhere", "where", "masked_select",
    "unique", "unique_consecutive", "_unique2", "__getitem__", "allclose", "isclose"})
#: Tensor methods that hand a tensor's values to the host without an op the dispatcher sees on a CPU.
_HOST_METHODS = ("tolist", "numpy", "__array__", "cpu")
#: torch's own glue between the caller and the op: skipped when looking for who asked for the read.
_GLUE = ("_tensor.py", "_ops.py", "_compile.py", "eval_frame.py", "_python_dispatch.py", "overrides.py",
         "_jit_internal.py")
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _caller(depth: int) -> tuple[str, int] | None:
    """(file, line) of the code that asked for a host read, skipping torch's glue and this module; None when
    that code is torch's own (an optimiser's CPU step counter, a library's internals)."""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if name == __file__ or (name.startswith(_TORCH_DIR) and name.endswith(_GLUE)):
            f = f.f_back
            continue
        return None if name.startswith(_TORCH_DIR) else (name, f.f_lineno)
    return None


def _is_cpu(device: Any) -> bool:
    return isinstance(device, str) and device.split(":")[0].strip() == "cpu"


@contextlib.contextmanager
def watch_host_syncs() -> Iterator[list[str]]:
    """Record every host read inside the block, from whichever code asks for it (the model's module, a
    helper it imports, a library), except torch's own internals; yields ``"file:line what"`` entries.

    What it sees, also on a CPU where nothing is a transfer: ops the host has to wait for (:data:`SYNC_OPS`:
    ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``/``if t:``, ``f"{t:.4f}"`` and ``str.format`` of a 0-d
    tensor, ``torch.nonzero``/``torch.where(cond)``, boolean-mask indexing, ``torch.unique``, ``torch.equal``)
    through a ``TorchDispatchMode``; and ``.tolist()``, ``.numpy()``, ``np.asarray(t)``/``np.array(t)``
    (``__array__``), ``.cpu()`` and ``.to("cpu")`` (the device written as a string) as method calls.
    What it cannot see on a CPU: ``.to(device)`` or ``.copy_()`` into a CPU tensor where the device is a
    ``torch.device`` object (on a CPU run it equals the run's own device), reads inside torch's own code
    (``torch.multinomial``'s checks, ``clip_grad_norm_`` with ``error_if_nonfinite=True``), and anything in C
    extensions. On a GPU, the CUDA sync debug mode (:func:`forbid_host_syncs`) catches every one of those.
    """
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    found: list[str] = []

    class _Calls(TorchFunctionMode):
        """The torch function the caller called (the outermost one): a sync op inside another function is
        that function's own check (``F.one_hot`` reads its classes' range on a CPU, not on CUDA)."""

        def __init__(self) -> None:
            super().__init__()
            self.outer: str | None = None

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            if self.outer is not None:
                return func(*args, **(kwargs or {}))
            self.outer = getattr(func, "__name__", "")
            try:
                return func(*args, **(kwargs or {}))
            finally:
                self.outer = None

    calls = _Calls()

    def asked_for(name: str) -> bool:
        return calls.outer is None or calls.outer in READ_FUNCTIONS

    def note(what: str, depth: int) -> None:
        where = _caller(depth)
        entry = None if where is None else f"{Path(where[0]).name}:{where[1]} {what}"
        if entry is not None and (not found or found[-1] != entry):  # a method seen twice on its way in
            found.append(entry)

    class _Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            name = func.__name__.split(".")[0]
            if name in SYNC_OPS and asked_for(name):
                note(f"aten.{name}", 2)
            elif name == "index" and asked_for(name) and any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                                         for i in (args[1] if len(args) > 1 else ()) or ()):
                note("boolean-mask indexing (aten.nonzero)", 2)
            return func(*args, **(kwargs or {}))

    originals = {name: getattr(torch.Tensor, name) for name in (*_HOST_METHODS, "to")}

    def wrap(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def watched(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if name != "to" or any(_is_cpu(a) for a in (*args, kwargs.get("device"))):
                note(f"Tensor.{name}" + ('("cpu")' if name == "to" else ""), 2)
            return orig(self, *args, **kwargs)

        return watched

    for name, orig in originals.items():
        setattr(torch.Tensor, name, wrap(name, orig))
    try:
        with calls, _Watch():
            yield found
    finally:
        for name, orig in originals.items():
            setattr(torch.Tensor, name, orig)
