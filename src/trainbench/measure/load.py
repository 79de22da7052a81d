"""How busy the machine was during each epoch, sampled outside the timed region, and which epochs to distrust.

Per epoch (one ``/proc/stat`` read and ``os.times()``; psutil where there is no ``/proc``), over the
interval since the previous read (one epoch; for epochs under 0.1 s, the latest 0.1 s or more, see
:class:`LoadSampler`):

``cpu_busy_pct``
    Share of all CPUs' time that was busy (anything but idle and I/O wait), this process included.
``cpu_other_pct``
    Share of all CPUs' time used by *other* processes: busy time minus this process's own CPU time
    (user + system, all its threads). This is the competition a timing suffers from.
``cpu_steal_pct``
    Share of all CPUs' time the hypervisor gave to other virtual machines (a noisy cloud neighbour).
``host_wait_pct``
    Share of the interval's wall time the harness's own thread (the one that runs the epoch loop and, on a
    GPU, dispatches every kernel) was ready to run but waiting for a CPU: the run-queue delay of
    ``/proc/thread-self/schedstat``. This is starvation of the run itself, not load somewhere on the machine.
``gpu_other_processes``
    On CUDA, processes other than this one holding a context on the GPU (NVML; sampled by
    ``trainbench.measure.hardware``).
``contaminated``
    1 when the epoch's timing is not to be trusted by :data:`RULE` (CPU) or :data:`RULE_CUDA` (GPU), else 0.
    The run's summary counts the contaminated measured epochs (``contaminated_epochs``, ``contaminated_pct``).

When host load contaminates an epoch
------------------------------------
*An epoch timed on the CPU* is the host's own work: any other process using a sizeable share of the CPUs
(``cpu_other_pct >= OTHER_PCT``), or the hypervisor stealing time (``cpu_steal_pct >= STEAL_PCT``), competes
with it for cores, caches and memory bandwidth, so the epoch is contaminated.

*An epoch timed on a GPU* (CUDA events, from the device's first to its last operation of the epoch) is the
device's work. Other users' jobs on other cores of the host do not change it: the GPU runs the queued kernels
at its own speed whatever the host does. Host load matters only when it starves the run's own dispatch: when
the thread that launches the kernels waits for a CPU, the device may run dry and the epoch's device time
grows. So a GPU-timed epoch is contaminated when that thread spent ``host_wait_pct >= HOST_WAIT_PCT`` of the
epoch waiting for a CPU, or when another process held the GPU (``gpu_other_processes > 0``); a busy host
whose load leaves the dispatching thread running is not contamination. Where the run-queue delay cannot be
read (no ``/proc/thread-self/schedstat``), the CPU rule applies, which errs on the side of flagging.

What is done with contaminated epochs (dropped, or used and labelled) is :mod:`trainbench.core.contamination_policy`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from trainbench.core.vocab import Series, Summary, max_of, mean

#: An epoch is contaminated when, during it, other processes used at least OTHER_PCT % of all CPUs' time,
#: the hypervisor stole at least STEAL_PCT %, or another process was on the GPU.
OTHER_PCT = 10.0
STEAL_PCT = 2.0
RULE = (f"cpu_other_pct >= {OTHER_PCT:g} or cpu_steal_pct >= {STEAL_PCT:g} or gpu_other_processes > 0")
#: A GPU-timed epoch is contaminated when the dispatching thread waited for a CPU at least HOST_WAIT_PCT % of
#: the epoch, or another process was on the GPU (the CPU rule where the wait cannot be read).
HOST_WAIT_PCT = 5.0
RULE_CUDA = f"host_wait_pct >= {HOST_WAIT_PCT:g} or gpu_other_processes > 0"


def _read_run_delay_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (run-queue delay), or None."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        try:
            parts = os.read(fd, 128).split()
        finally:
            os.close(fd)
        return int(parts[1])
    except (OSError, IndexError, ValueError):
        return None


def _read_proc_stat() -> tuple[float, float, float] | None:
    """(total, idle incl. iowait, steal) CPU seconds of the whole machine, or None."""
    try:  # os.open/os.read: a third cheaper than a Python file object; the first line is the machine's total
        fd = os.open("/proc/stat", os.O_RDONLY)
        try:
            parts = os.read(fd, 512).split(b"\n", 1)[0].split()
        finally:
            os.close(fd)
    except OSError:
        return None
    if not parts or parts[0] != b"cpu":
        return None
    v = [int(x) for x in parts[1:9]]  # user nice system idle iowait irq softirq steal (guest is inside user)
    hz = _CLK_TCK
    return sum(v) / hz, (v[3] + v[4]) / hz, v[7] / hz


def _read_psutil() -> tuple[float, float, float] | None:
    try:
        import psutil

        t = psutil.cpu_times()
    except Exception:  # noqa: BLE001 - no load figures rather than a failed run
        return None
    idle = t.idle + getattr(t, "iowait", 0.0)
    steal = getattr(t, "steal", 0.0)
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return total, idle, steal


try:
    _CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _CLK_TCK = 100.0


class LoadSampler:
    """Call :meth:`sample` once per epoch, after the timer stops; the first call covers since construction.

    The machine is read at most every ``min_interval_s`` (0.1 s), and at the first epoch: an epoch shorter than
    that carries the figures of the latest completed interval, which keeps the cost (40-100 µs a read on a busy machine)
    under 0.1% of the loop whatever the epoch length.
    """

    def __init__(self, min_interval_s: float = 0.1) -> None:
        self._min_ns = int(min_interval_s * 1e9)
        self._t = time.perf_counter_ns()
        self._prev: dict[str, float] = {}
        machine = _read_proc_stat()
        self._read = _read_proc_stat if machine is not None else _read_psutil
        machine = machine or self._read()
        t = os.times()
        self._last = (machine, t.user + t.system) if machine is not None else None
        self._first = True
        self._wait = (_read_run_delay_ns(), self._t)  # the harness thread's run-queue delay, and when

    def _now(self) -> tuple[tuple[float, float, float], float] | None:
        machine = self._read()
        if machine is None:
            return None
        t = os.times()
        return machine, t.user + t.system

    def sample(self) -> dict[str, float]:
        t = time.perf_counter_ns()
        # a short epoch carries the latest interval's figures (bounded cost); the first epoch is always read,
        # so that a run never starts with epochs that have no figures at all
        if t - self._t < self._min_ns and not self._first:
            return dict(self._prev)
        delta = self._delta()
        if delta is None:  # under a clock tick since the last read: no figures yet; read again next epoch,
            return dict(self._prev)  # over the longer interval (short epochs must not all read as clean)
        self._t, self._first = t, False
        self._prev = delta
        wait = _read_run_delay_ns()
        (wait0, t0), self._wait = self._wait, (wait, t)
        if wait is not None and wait0 is not None and t > t0:
            self._prev[Series.HOST_WAIT_PCT] = min(100.0, 100.0 * (wait - wait0) / (t - t0))
        return dict(self._prev)

    def _delta(self) -> dict[str, float] | None:
        """The figures since the last read; ``{}`` where the machine cannot be read, None when less than a
        clock tick has passed (the baseline is then kept, so the next read covers the whole interval)."""
        now = self._now()
        last, self._last = self._last, now
        if now is None or last is None:
            return {}
        (total, idle, steal), own = now
        (total0, idle0, steal0), own0 = last
        dt = total - total0
        if dt <= 0:  # less than a clock tick passed: no information yet; keep the baseline
            self._last = last
            return None
        busy = dt - (idle - idle0) - (steal - steal0)
        other = max(0.0, busy - (own - own0))
        return {Series.CPU_BUSY_PCT: 100.0 * busy / dt, Series.CPU_OTHER_PCT: min(100.0, 100.0 * other / dt),
                Series.CPU_STEAL_PCT: 100.0 * (steal - steal0) / dt}


def contaminated(metrics: Mapping[str, float], device_type: str = "cpu") -> float:
    """1.0 when an epoch's load sample meets :data:`RULE` (an epoch timed on the CPU) or :data:`RULE_CUDA`
    (``device_type="cuda"``: an epoch timed on the GPU), else 0.0 (missing figures count as clean)."""
    if device_type == "cuda" and Series.HOST_WAIT_PCT in metrics:
        return float(metrics[Series.HOST_WAIT_PCT] >= HOST_WAIT_PCT
                     or metrics.get(Series.GPU_OTHER_PROCESSES, 0.0) > 0)
    return float(metrics.get(Series.CPU_OTHER_PCT, 0.0) >= OTHER_PCT or metrics.get(Series.CPU_STEAL_PCT, 0.0) >= STEAL_PCT
                 or metrics.get(Series.GPU_OTHER_PROCESSES, 0.0) > 0)


def load_summary(series: Mapping[str, list[float]], warmup_epochs: int) -> dict[str, float]:
    """The run's load figures over its measured epochs: how many were contaminated, and the worst load."""
    flags = list(series.get(Series.CONTAMINATED, []))[warmup_epochs:]
    if not flags:
        return {}
    out = {Summary.CONTAMINATED_EPOCHS: float(sum(flags)), Summary.CONTAMINATED_PCT: 100.0 * sum(flags) / len(flags)}
    for k in (Series.CPU_OTHER_PCT, Series.CPU_STEAL_PCT, Series.HOST_WAIT_PCT):
        vals = list(series.get(k, []))[warmup_epochs:]
        if vals:
            out[mean(k)] = float(sum(vals) / len(vals))
            out[max_of(k)] = float(max(vals))
    return out
