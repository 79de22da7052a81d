"""Shared helpers of the benchmark suite (`make bench`).

Each ``benchmarks/bench_*.py`` exposes ``run(quick: bool) -> list[Result]``. Every figure is measured
side by side in one process (a ratio or a rate), as the median of repeats, and names its device.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Result:
    name: str  # e.g. "harness_overhead.dqn"
    value: float
    unit: str  # "%", "x", "samples/s", "s", ...
    target: str = ""  # e.g. "<= 1%" (informational; benchmarks never fail a build)
    device: str = "cpu"
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def median_time(fn: Callable[[], Any], repeats: int = 5, sync: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn`` in seconds over ``repeats`` calls (after one untimed call)."""
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int = 5,
                sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Median seconds of each callable, measured round-robin so machine noise hits all of them alike."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if sync:
                sync()
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}
