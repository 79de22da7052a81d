"""Epoch timing that waits for the device: an epoch is timed only once all of its device work has finished.

On CUDA an epoch is timed with CUDA events recorded on the current stream, after synchronising the
device before the start; the end event is synchronised before the time is read, so the figure covers
all of the epoch's device work. On CPU, ``time.perf_counter_ns``. Wall time (perf_counter) is taken
on both, after the synchronisation, so the two can be compared.

:func:`sync_selftest` is the check that an unsynchronised timer would fail: a device op of known
duration must be timed as at least that duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EpochTimer:
    """``start()`` / ``stop() -> ms``. ``stop`` returns only after the device has finished."""

    def __init__(self, device: torch.device, sync: Callable[[], None] | None = None) -> None:
        """``sync`` waits for a non-CUDA asynchronous device (tests pass a fake one)."""
        self.device = device
        self.sync = sync
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._start_ev = torch.cuda.Event(enable_timing=True)
            self._end_ev = torch.cuda.Event(enable_timing=True)
        self._t0 = 0
        self.last_wall_ms = 0.0

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)  # nothing queued before the epoch counts in it
            self._start_ev.record()
        elif self.sync is not None:
            self.sync()
        self._t0 = time.perf_counter_ns()

    def stop(self) -> float:
        """Milliseconds of the epoch, device work included."""
        if self.cuda:
            self._end_ev.record()
            self._end_ev.synchronize()
            self.last_wall_ms = (time.perf_counter_ns() - self._t0) / 1e6
            return float(self._start_ev.elapsed_time(self._end_ev))
        if self.sync is not None:
            self.sync()
        self.last_wall_ms = (time.perf_counter_ns() - self._t0) / 1e6
        return self.last_wall_ms


@dataclass
class SelfTestResult:
    expected_ms: float
    measured_ms: float
    unsynchronised_ms: float

    @property
    def ok(self) -> bool:
        return self.measured_ms >= 0.95 * self.expected_ms


def sync_selftest(sleep: Callable[[float], None], timer: EpochTimer, expected_ms: float,
                  naive_clock: Callable[[], float] = time.perf_counter) -> SelfTestResult:
    """Time ``sleep(expected_ms)`` (an asynchronous device op) with ``timer`` and with a naive clock.

    A synchronised timer reads at least ``expected_ms``; a timer that does not wait for the device
    reads the launch cost only (near zero). On CUDA, ``sleep`` is ``torch.cuda._sleep`` calibrated to
    milliseconds; tests pass a fake asynchronous device.
    """
    timer.start()
    sleep(expected_ms)
    measured = timer.stop()
    synchronize(timer.device)
    if timer.sync is not None:
        timer.sync()
    t0 = naive_clock()
    sleep(expected_ms)
    naive = (naive_clock() - t0) * 1e3
    synchronize(timer.device)
    if timer.sync is not None:
        timer.sync()
    return SelfTestResult(expected_ms, measured, naive)


def cuda_sleep_fn(device: torch.device) -> Callable[[float], None]:
    """A calibrated ``torch.cuda._sleep`` taking milliseconds (GPU only)."""
    torch.cuda.synchronize(device)
    cycles = 50_000_000
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(cycles)
    e.record()
    e.synchronize()
    cycles_per_ms = cycles / max(s.elapsed_time(e), 1e-3)
    return lambda ms: torch.cuda._sleep(int(ms * cycles_per_ms))
