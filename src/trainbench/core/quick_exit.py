"""A command's exit without Python's last garbage collections over everything it imported.

When the interpreter exits it clears every module and collects the garbage several times: with torch,
``torch._dynamo`` (imported by any optimizer), SciPy and MLflow loaded that walks millions of objects and
takes seconds after the work is done (about 2 s of a 12 s debug run on a 2-core CPU, measured with
``python -c "import trainbench.train"`` against the same with this hook). The memory is the OS's to free
once the process ends, so at exit the objects that exist are frozen (:func:`gc.freeze`, the permanent
generation the collector skips) instead of walked. Everything a command must do on its way out still runs:
its ``finally`` blocks, the ``atexit`` handlers registered before this one (they run after it, in reverse
order: logging's flush among them) and the ones registered after (before it). What this gives up is
Python's collecting of objects that only a reference cycle keeps alive at exit (their ``__del__`` is not
called then, as Python itself never promises at exit): a file must be closed, not left to the collector;
trainbench's own are written in ``with`` blocks.
"""

from __future__ import annotations

import atexit
import gc

_installed = False


def skip_final_collections() -> None:
    """Register :func:`gc.freeze` to run at exit (once per process)."""
    global _installed
    if not _installed:
        atexit.register(gc.freeze)
        _installed = True
