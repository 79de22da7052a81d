"""Shared helpers of the benchmark suite (`make bench`).

Each ``benchmarks/bench_*.py`` exposes ``run(quick: bool) -> list[Result]``. Conventions every module keeps:

- every figure is a ratio or a rate measured side by side in one process, as the **median of repeats**
  (after untimed warm-up calls), interleaved round-robin where two things are compared, so that machine
  noise hits both alike;
- times are wall time (``time.perf_counter``) after waiting for the device (:func:`sync_fn`);
- every :class:`Result` names its device with :func:`trainbench.measure.hardware.hardware_label`
  (``cpu (<cpu>, 1 thread)`` or the GPU's name; the run's ``device`` tag is the shorter
  :func:`~trainbench.measure.hardware.device_label`); CPU figures are single-threaded
  (:func:`cpu_threads`), as the CPU training profile is;
- ``details`` says how the figure was obtained (repeats, sizes, what was counted).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch


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


def bench_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync_fn(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@contextlib.contextmanager
def cpu_threads(n: int = 1) -> Iterator[None]:
    """Run the block with ``n`` torch threads (CPU figures are per core), restoring the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def median_time(fn: Callable[[], Any], repeats: int = 5, sync: Callable[[], None] | None = None) -> float:
    """Median wall time of ``fn`` in seconds over ``repeats`` calls (after one untimed call)."""
    return interleaved({"fn": fn}, repeats, sync)["fn"]


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int = 5, sync: Callable[[], None] | None = None,
                budget_s: float | None = None, samples: dict[str, list[float]] | None = None,
                warm: set[str] | frozenset[str] = frozenset()) -> dict[str, float]:
    """Median seconds of each callable, measured round-robin so machine noise hits all of them alike.

    Each callable runs once untimed first, unless named in ``warm`` (already run). With ``budget_s``, a callable whose timed calls already add
    up to more than ``budget_s`` is not repeated further (it keeps at least one sample); pass
    ``samples`` to get the raw samples back (their count is the number of repeats each one got).
    """
    for k, fn in fns.items():
        if k not in warm:
            fn()
        if sync:
            sync()
    out: dict[str, list[float]] = samples if samples is not None else {}
    for k in fns:
        out[k] = []
    for _ in range(repeats):
        for k, fn in fns.items():
            if budget_s is not None and out[k] and sum(out[k]) > budget_s:
                continue
            if sync:
                sync()
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            out[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def build_model(name: str, data_dir: str | Path, device: torch.device, overrides: tuple[str, ...] = (),
                n_bars: int | None = None, size: str = "small", **ctx: Any) -> Any:
    """A registered model built from its real config (``conf/model/<name>.yaml``) on synthetic data.

    ``size``: the model size (``conf/model/<name>/<size>.yaml``): ``small`` for the CPU benchmarks,
    ``reference`` for the GPU check.

    ``n_bars`` (bars, or book events for tlob) writes a smaller file of its own, so that a supervised
    model's epoch is a few steps; its per-step cost is that of the default size. ``ctx`` goes to
    :class:`BuildContext` (precision, compile, optimizer_impl, seed).
    """
    from trainbench.compose import compose_run
    from trainbench.config.run import validate
    from trainbench.data.loader import load_market_data
    from trainbench.models.base import BuildContext
    from trainbench.models.registry import REGISTRY

    extra = [f"data.n_bars={n_bars}", f"data.path={data_dir}/bench_{name}_{n_bars}.dbn.zst"] if n_bars else []
    obj = validate(compose_run([f"model={name}", f"size={size}", f"paths.data_dir={data_dir}", *extra, *overrides]))
    data = load_market_data(obj.data, root=obj.paths.root, data_dir=obj.paths.data_dir, device=device)
    seed = ctx.pop("seed", 0)
    torch.manual_seed(seed)
    return REGISTRY.get(name).build(obj.model, data, BuildContext(device=device, seed=seed, **ctx))


#: Bars (book events for tlob) that give the supervised models an epoch of a few optimiser steps at the
#: default batch of 230; the RL models' epoch is fixed work, independent of the data's length.
SMALL_DATA = {"mamba2": 1200, "tft": 1100, "tlob": 1100}
