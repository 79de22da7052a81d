"""Progress where no progress bar is drawn (SLURM logs, CI, ``nohup``, a pipe): phases and epoch lines.

Two kinds of lines go to the log (Python logging, which a Hydra job writes to its console and its
``<job dir>/<name>.log``):

* a **phase** line when a phase starts and one when it ends, with its duration: data generation or loading,
  memory prediction or batch search, warmup, measured epochs, workload profile, latency
  (:func:`phase`; the run's stages in ``trainbench.train`` and the harness use it);
* an **epoch** line at a bounded rate (:class:`EpochLog`): every ``every_epochs`` epochs or every ``every_s``
  seconds, whichever comes first, and at the last epoch, like Lightning's loggers in a non-interactive
  session. On a terminal the harness draws a bar instead and writes no epoch line.

Cost: :meth:`EpochLog.update` runs after the epoch's timer stopped, in the harness's own time (counted in
``harness_overhead_pct``); it is a comparison and a clock read per epoch, and a log line at most every
``every_epochs`` epochs or ``every_s`` seconds. Nothing is written inside the timed region.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator

log = logging.getLogger("trainbench.progress")


def interactive() -> bool:
    """True when a progress bar can be drawn: stderr is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def duration(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(round(s)), 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


@contextlib.contextmanager
def phase(name: str, detail: str = "", logger: logging.Logger | None = None,
          clock: Callable[[], float] = time.perf_counter) -> Iterator[None]:
    """Log ``phase <name>: started`` and ``phase <name>: done in <duration>`` (or ``... stopped after``)."""
    lg = logger or log
    lg.info("phase %s: started%s", name, f" ({detail})" if detail else "")
    t0 = clock()
    try:
        yield
    except BaseException as e:
        lg.info("phase %s: stopped after %s (%s)", name, duration(clock() - t0), type(e).__name__)
        raise
    lg.info("phase %s: done in %s", name, duration(clock() - t0))


class EpochLog:
    """Epoch lines at a bounded rate: call :meth:`update` once per epoch, outside the timed region."""

    def __init__(self, total: int, warmup: int, desc: str = "", every_epochs: int = 10, every_s: float = 30.0,
                 logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.warmup, self.desc = int(total), int(warmup), desc
        self.every_epochs = max(0, int(every_epochs))
        self.every_s = float(every_s)
        self.log = logger or log
        self.clock = clock
        self._t0 = self._last_t = clock()
        self._last_epoch = -1
        self.lines = 0

    def update(self, epoch: int, ms: float, loss: float = math.nan, last: bool = False) -> None:
        now = self.clock()
        due = (last or epoch + 1 >= self.total
               or (self.every_epochs and epoch - self._last_epoch >= self.every_epochs)
               or (self.every_s > 0 and now - self._last_t >= self.every_s))
        if not due:
            return
        self._last_epoch, self._last_t = epoch, now
        self.lines += 1
        what = (f"warmup {epoch + 1}/{self.warmup}" if epoch < self.warmup
                else f"measured {epoch + 1 - self.warmup}/{self.total - self.warmup}")
        self.log.info("%sepoch %d/%d (%s): %.1f ms, loss %.4g; %s elapsed", f"{self.desc}: " if self.desc else "",
                      epoch + 1, self.total, what, ms, loss, duration(now - self._t0))
