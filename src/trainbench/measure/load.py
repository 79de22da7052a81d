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
``gpu_other_processes``
    On CUDA, processes other than this one holding a context on the GPU (NVML; sampled by
    ``trainbench.measure.hardware``).
``contaminated``
    1 when the epoch's timing is not to be trusted by :data:`RULE`, else 0. The run's summary counts the
    contaminated measured epochs (``contaminated_epochs``, ``contaminated_pct``).
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

    The machine is read at most every ``min_interval_s`` (0.1 s): an epoch shorter than that carries the
    figures of the latest completed interval, which keeps the cost (40-100 µs a read on a busy machine)
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

    def _now(self) -> tuple[tuple[float, float, float], float] | None:
        machine = self._read()
        if machine is None:
            return None
        t = os.times()
        return machine, t.user + t.system

    def sample(self) -> dict[str, float]:
        t = time.perf_counter_ns()
        if t - self._t < self._min_ns:  # a short epoch: carry the latest interval's figures (bounded cost)
            return dict(self._prev)
        self._t = t
        self._prev = self._delta()
        return dict(self._prev)

    def _delta(self) -> dict[str, float]:
        now = self._now()
        last, self._last = self._last, now
        if now is None or last is None:
            return {}
        (total, idle, steal), own = now
        (total0, idle0, steal0), own0 = last
        dt = total - total0
        if dt <= 0:  # less than a clock tick passed: no information
            return {}
        busy = dt - (idle - idle0) - (steal - steal0)
        other = max(0.0, busy - (own - own0))
        return {Series.CPU_BUSY_PCT: 100.0 * busy / dt, Series.CPU_OTHER_PCT: min(100.0, 100.0 * other / dt),
                Series.CPU_STEAL_PCT: 100.0 * (steal - steal0) / dt}


def contaminated(metrics: Mapping[str, float]) -> float:
    """1.0 when an epoch's load sample meets :data:`RULE`, else 0.0 (missing figures count as clean)."""
    return float(metrics.get(Series.CPU_OTHER_PCT, 0.0) >= OTHER_PCT or metrics.get(Series.CPU_STEAL_PCT, 0.0) >= STEAL_PCT
                 or metrics.get(Series.GPU_OTHER_PROCESSES, 0.0) > 0)


def load_summary(series: Mapping[str, list[float]], warmup_epochs: int) -> dict[str, float]:
    """The run's load figures over its measured epochs: how many were contaminated, and the worst load."""
    flags = list(series.get(Series.CONTAMINATED, []))[warmup_epochs:]
    if not flags:
        return {}
    out = {Summary.CONTAMINATED_EPOCHS: float(sum(flags)), Summary.CONTAMINATED_PCT: 100.0 * sum(flags) / len(flags)}
    for k in (Series.CPU_OTHER_PCT, Series.CPU_STEAL_PCT):
        vals = list(series.get(k, []))[warmup_epochs:]
        if vals:
            out[mean(k)] = float(sum(vals) / len(vals))
            out[max_of(k)] = float(max(vals))
    return out
