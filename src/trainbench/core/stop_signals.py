"""Stop signals (SIGINT, SIGTERM): noted where a handler raising would cut a write in two, and passed on
between a sweep and its jobs.

* :class:`NotedStops` replaces the stop signals' handlers with one that notes them: a job (``train.py``) holds
  them this way while its run opens and from the end of its epoch loop until its run has ended, so that a
  signal can never leave a run half-opened or cut the recording of what was measured. A noted signal raises
  KeyboardInterrupt only where stopping is safe (:meth:`NotedStops.interruptible`), and is passed on
  afterwards to the handler it would have reached.
* A sweep that runs its jobs in its own process (``sweep/jobs.py``) installs a handler that ends the running
  job itself and stops the sweep. A job otherwise puts its own SIGTERM handler in place; it keeps one marked
  here (:func:`ends_the_running_job`) instead, so that a signal the job noted and passes on once its run has
  ended still reaches the sweep, which then starts no further job.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_MARK = "ends_the_running_job"


def ends_the_running_job(handler: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    """Mark ``handler`` (a decorator): it ends the running job itself, so a job keeps it."""
    setattr(handler, _MARK, True)
    return handler


def job_keeps(handler: Any) -> bool:
    """Whether ``handler`` (as ``signal.getsignal`` gives it) is one a job keeps."""
    return bool(getattr(handler, _MARK, False))


class NotedStops:
    """Stop signals noted instead of handled, from :meth:`start` to :meth:`restore` (main thread only:
    elsewhere nothing is replaced and nothing is noted).

    A noted signal raises KeyboardInterrupt at once only inside :meth:`interruptible` (work that may stop:
    an optional phase, a wait) or, with ``second_stops``, at a second signal (a run opening against a store
    that does not answer still stops at a second Ctrl-C). ``on_note`` is called with each signal noted.
    After :meth:`restore`, :meth:`deliver` passes the first noted signal to the handler it replaced
    (``signal.default_int_handler`` or train.py's raise KeyboardInterrupt; a sweep's also stops the sweep).
    As a context manager: ``start()`` on entry, ``restore()`` on exit."""

    def __init__(self, second_stops: bool = False, on_note: Callable[[int], None] | None = None) -> None:
        self.noted: list[int] = []
        self.second_stops = second_stops
        self._on_note = on_note
        self._replaced: dict[int, Any] = {}
        self._previous: dict[int, Any] = {}
        self._interruptible = False

    def start(self, signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> NotedStops:
        """Note ``signals`` from now on (a signal already noted here is left as it is)."""
        with contextlib.suppress(ValueError):  # not the main thread: nothing to note
            for s in signals:
                if s not in self._replaced:
                    self._replaced[s] = self._previous[s] = signal.signal(s, self._note)
        return self

    def _note(self, signum: int, frame: Any) -> None:
        self.noted.append(signum)
        if self._on_note is not None:
            self._on_note(signum)
        if self._interruptible or (self.second_stops and len(self.noted) > 1):
            raise KeyboardInterrupt(f"signal {signum}")

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Within the block a stop signal noted also raises KeyboardInterrupt."""
        before, self._interruptible = self._interruptible, True
        try:
            yield
        finally:
            self._interruptible = before

    def restore(self) -> None:
        """Put back the handlers :meth:`start` replaced."""
        replaced, self._replaced = self._replaced, {}
        for s, h in replaced.items():
            signal.signal(s, h)

    def deliver(self) -> None:
        """Pass the first noted signal to the handler it replaced (call after :meth:`restore`); it may raise."""
        handler = self._previous.get(self.noted[0]) if self.noted else None
        if callable(handler):
            handler(self.noted[0], None)

    def __enter__(self) -> NotedStops:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.restore()
