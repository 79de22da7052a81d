"""When Python's cyclic garbage collector runs in a command: not over the imports, not at exit.

Importing torch, ``torch._dynamo`` (any optimizer imports it), SciPy and MLflow creates about a million
objects that live as long as the process. The collector, triggered by the allocations, walks them again and
again while they are created (0.75 s of the 4 s of CPU that ``import trainbench.train`` costs on a 2-core
CPU: 4.0 s with the collector, 3.2 s without, three interleaved pairs), and once more, several times, when
the interpreter exits (about 2 s of a 12 s debug run).

* :func:`paused_for_imports` holds the collector while a command imports its modules, then moves what the
  imports made to the permanent generation (:func:`gc.freeze`, which the collector skips): later full
  collections, during the timed epochs too, no longer walk the imported modules. That is done once per
  process: a later job of an in-process sweep freezes nothing of the earlier job's leftovers.
* :func:`skip_final_collections` freezes what exists at exit instead of walking it: the OS frees the memory.
  Everything a command must do on its way out still runs: its ``finally`` blocks, and the ``atexit``
  handlers registered before it (they run after it, in reverse order: logging's flush among them) and after
  it. What this gives up is Python's collecting of objects that only a reference cycle keeps alive at exit
  (their ``__del__`` is not called then, as Python itself never promises at exit): a file must be closed,
  not left to the collector; trainbench's own are written in ``with`` blocks.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Iterator

_exit_hook = False
_frozen = False


@contextlib.contextmanager
def paused_for_imports(freeze: bool = True) -> Iterator[None]:
    """No collection inside the block (a command's imports). With ``freeze``, the first such block of the
    process freezes what exists after it (a job's imports, before its work); without, nothing is frozen (the
    command line's imports, before Hydra composes). The collector is on again after the block, whatever
    happened in it, if it was on before."""
    global _frozen
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze and not _frozen:
            gc.freeze()
            _frozen = True
        if was_enabled:
            gc.enable()


def skip_final_collections() -> None:
    """Register :func:`gc.freeze` to run at exit (once per process)."""
    global _exit_hook
    if not _exit_hook:
        atexit.register(gc.freeze)
        _exit_hook = True
