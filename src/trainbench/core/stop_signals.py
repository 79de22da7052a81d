"""Stop signals (SIGINT, SIGTERM) between a sweep and its jobs.

A sweep that runs its jobs in its own process (``sweep/jobs.py``) installs a handler that ends the running job
itself and stops the sweep. A job (``train.py``) otherwise puts its own SIGTERM handler in place; it keeps one
marked here instead, so that a signal the job notes after its epochs and passes on once its run has ended
(``train._Phases.pass_on_stop``) still reaches the sweep, which then starts no further job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MARK = "ends_the_running_job"


def ends_the_running_job(handler: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    """Mark ``handler`` (a decorator): it ends the running job itself, so a job keeps it."""
    setattr(handler, _MARK, True)
    return handler


def job_keeps(handler: Any) -> bool:
    """Whether ``handler`` (as ``signal.getsignal`` gives it) is one a job keeps."""
    return bool(getattr(handler, _MARK, False))
