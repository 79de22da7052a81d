"""Stop signals (SIGINT, SIGTERM): noted where a handler raising would cut a write in two, and passed on
between a sweep and its jobs.

* :class:`NotedStops` replaces the stop signals' handlers with one that notes them: a job (``train.py``) holds
  them this way while its run opens and from the end of its epoch loop until its run has ended, so that a
  signal can never leave a run half-opened or cut the recording of what was measured. A noted signal raises
  KeyboardInterrupt only where stopping is safe (:meth:`NotedStops.interruptible`), and is passed on
  afterwards to the handler it would have reached.
* A sweep that runs its jobs in its own process (``sweep/jobs.py``) installs a handler that ends the running
  job itself and stops the sweep. A job otherwise puts its own SIGTERM handler in place
  (:func:`interrupt_on_stop_signals`); it keeps one marked here (:func:`ends_the_running_job`) instead, so that a
  signal the job noted and passes on once its run has ended still reaches the sweep, which then starts no
  further job.
* :class:`RunStops` is one training job's handling of them from its start to its run's end, in the order the
  job meets them: :meth:`~RunStops.start`, :meth:`~RunStops.opening` / :meth:`~RunStops.opened`,
  :meth:`~RunStops.note_after_loop`, :meth:`~RunStops.interruptible`, :meth:`~RunStops.pass_on`.
"""

from __future__ import annotations

import contextlib
import os
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
        if not self.noted:
            return
        handler = self._previous.get(self.noted[0])
        if callable(handler):
            handler(self.noted[0], None)
        elif handler == signal.SIG_DFL:  # no handler was set: the signal's default action (it ends the process)
            signal.raise_signal(self.noted[0])

    def __enter__(self) -> NotedStops:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.restore()


@contextlib.contextmanager
def held_during_write() -> Iterator[None]:
    """A stop signal landing in a write to the store is held until the write is done, then reaches its
    handler (which may raise KeyboardInterrupt there, after the write, as it would have in it).

    A KeyboardInterrupt raised inside SQLAlchemy's transaction leaves that SQLite connection holding the
    store's write lock until the collector frees the traceback that keeps it: every later write of the run
    (its last epochs, its outcome) then waits out SQLite's busy timeout, again and again (minutes, measured
    on a run stopped in a sweep). A second signal stops at once, as when a run opens. SIGUSR2 is held where
    it stops the job (submitit's time limit). Main thread only: elsewhere nothing is held. The signal is
    passed on whether the write succeeded or raised (a raised error then becomes the KeyboardInterrupt's
    context): a stop is never lost."""
    stops = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGUSR2) is to_interrupt:
        stops.append(signal.SIGUSR2)
    held = NotedStops(second_stops=True).start(stops)
    try:
        yield
    finally:
        held.restore()
        held.deliver()


def to_interrupt(signum: int, frame: Any) -> None:
    """A job's own stop handler: the signal interrupts it like Ctrl-C (its run ends ``interrupted``)."""
    raise KeyboardInterrupt(f"signal {signum}")


def interrupt_on_stop_signals() -> None:
    """SIGTERM (and submitit's time-limit signal, SIGUSR2) interrupt the job like Ctrl-C: its run ends as
    ``interrupted``. A sweep's handler that ends the job itself is kept (:func:`job_keeps`: a signal noted
    after the epochs then still stops the sweep). Only in the main thread (some launchers run jobs in another)."""
    with contextlib.suppress(ValueError):  # ValueError: not the main thread
        if not job_keeps(signal.getsignal(signal.SIGTERM)):
            signal.signal(signal.SIGTERM, to_interrupt)
        if os.environ.get("SUBMITIT_EXECUTOR"):  # submitit's time-limit/preemption signal: end as interrupted
            signal.signal(signal.SIGUSR2, to_interrupt)


class RunStops:
    """One training job's stop signals (``trainbench.train``), from its start to its run's end.

    :meth:`start`: the job's own handlers (:func:`interrupt_on_stop_signals`). :meth:`opening`: while the
    store is reached and the run opens (a new store's migration, which a signal would leave half-made) a
    signal is held, and :meth:`opened` raises it once the run is open, so that the run ends ``interrupted``,
    not running. :meth:`note_after_loop`: from the end of the epoch loop a signal is noted (``signal`` says
    which), never raised except inside :meth:`interruptible`; :meth:`pass_on` hands it, once the run has ended,
    to the handler it would have reached."""

    def __init__(self) -> None:
        #: The first stop signal noted after the epoch loop (or that stopped an optional phase), else None.
        self.signal: str | None = None
        self._opening = NotedStops(second_stops=True)
        self._after = NotedStops(on_note=self._noted)

    def _noted(self, signum: int) -> None:
        self.signal = self.signal or f"signal {signum}"

    def start(self) -> None:
        """The job's own stop handlers (:func:`interrupt_on_stop_signals`)."""
        interrupt_on_stop_signals()

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """Signals held while the run opens (a second one still stops it: a store that does not answer). A
        failure to open: a signal held meanwhile still reaches its handler (a sweep's stops the sweep), and the
        failure stays the error."""
        try:
            with self._opening:
                yield
        except BaseException:
            with contextlib.suppress(KeyboardInterrupt):
                self._opening.deliver()
            raise

    def opened(self) -> None:
        """The run is open: a signal held while it opened reaches its handler now (the job's raises
        KeyboardInterrupt, and the run ends ``interrupted``)."""
        self._opening.deliver()

    def note_after_loop(self) -> None:
        """From here on (the epoch loop has ended; the harness calls this) a stop signal (SIGINT, SIGTERM, and
        submitit's SIGUSR2 where it stops the job) no longer raises wherever it lands, which could cut the
        recording of what was measured: it is noted, interrupts an optional phase under way
        (:meth:`interruptible`), skips the phases still to come, and :meth:`pass_on` hands it, once the run
        has ended, to the handler it would have reached. Main thread only."""
        stops = [signal.SIGINT, signal.SIGTERM]
        if signal.getsignal(signal.SIGUSR2) is to_interrupt:
            stops.append(signal.SIGUSR2)
        self._after.start(stops)

    def interruptible(self) -> contextlib.AbstractContextManager[None]:
        """Within the block a stop signal noted after the epoch loop also raises KeyboardInterrupt: an optional
        phase stops, the end's wait for a store that is away stops at Ctrl-C (never the end's writes before that
        wait)."""
        return self._after.interruptible()

    def pass_on(self) -> None:
        """The run has ended: the handlers :meth:`note_after_loop` replaced are back, and the first stop signal
        noted is passed to its own (a sweep's stops the sweep; the job's own would raise KeyboardInterrupt,
        which this run, already ended, has no use for)."""
        self._after.restore()
        with contextlib.suppress(KeyboardInterrupt):
            self._after.deliver()
