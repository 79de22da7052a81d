"""No host sync inside an epoch: a context in which trainbench's own code may not read a tensor on the host.

Inside :func:`forbid_host_syncs`, a ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool()``,
``float()``, ``int()`` on a tensor called from trainbench's own code raises :class:`HostSyncError`; on
CUDA it also turns on ``torch.cuda.set_sync_debug_mode("error")``, which catches every synchronising op
(``nonzero``, boolean-mask indexing, ...) wherever it is called.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # .../src/trainbench


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
