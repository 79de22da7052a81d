"""Loops over an epoch's identical steps, which the workload profile may cut short and scale.

The harness requires an epoch to do fixed work: its loops (minibatches, validation batches, an RL epoch's
environment steps and updates) repeat the same step. A model writes those loops with
:func:`trainbench.models.base.steps` (``range``), ``batches`` and ``evaluate``, which ask :func:`current`
whether the workload profile (``trainbench.measure.workload``) is sampling the epoch: then each loop runs
only a few steps (:class:`StepSampling`), and the profile adds the work of the steps left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class StepSampling:
    """While the workload profile samples an epoch (:func:`sampling`): each loop over an epoch's identical
    steps (:func:`steps`; ``batches`` and ``evaluate`` in trainbench.models.base) runs only ``limit`` of them
    in its first run and ``later`` in each run after (a pass over minibatches repeated ``update_epochs``
    times: the first run already gave a step of that loop; a smaller last batch always runs), records in
    ``full[site]`` how many it would have run, and calls ``on_step(site, i)`` before each step it runs and
    ``on_end(site)`` after the last. The harness requires fixed work per epoch, so the profile of a whole
    epoch follows from a few steps (trainbench.measure.workload scales them)."""

    def __init__(self, limit: int, on_step: Callable[[str, int], None] | None = None,
                 on_end: Callable[[str], None] | None = None, later: int | None = None) -> None:
        self.limit = limit
        self.later = limit if later is None else later
        self.on_step, self.on_end = on_step, on_end
        self.full: dict[str, list[int]] = {}

    def ran(self, site: str, run: int) -> int:
        """Steps the ``run``-th run (from 0) of ``site`` ran, of ``full[site][run]``."""
        return min(self.full[site][run], self.limit if run == 0 else self.later)

    def loop(self, site: str, items: list[Any], tail: Iterable[Any] = ()) -> Iterator[Any]:
        runs = self.full.setdefault(site, [])
        runs.append(len(items))
        for i, item in enumerate(items[:self.limit if len(runs) == 1 else self.later]):
            if self.on_step is not None:
                self.on_step(site, i)
            yield item
        if self.on_end is not None:
            self.on_end(site)
        yield from tail


_SAMPLING: list[StepSampling] = []


@contextlib.contextmanager
def sampling(limit: int, on_step: Callable[[str, int], None] | None = None,
             on_end: Callable[[str], None] | None = None, later: int | None = None) -> Iterator[StepSampling]:
    """Run only ``limit`` steps of each loop over identical steps, ``later`` in its later runs (see
    :class:`StepSampling`)."""
    s = StepSampling(limit, on_step, on_end, later)
    _SAMPLING.append(s)
    try:
        yield s
    finally:
        _SAMPLING.remove(s)


def steps(n: int, site: str = "steps", reverse: bool = False) -> Iterable[int]:
    """``range(n)`` (``reversed`` with ``reverse``): the loop of an epoch over ``n`` identical steps (an RL
    epoch's environment steps or updates, a recursion over a rollout). Use it, rather than ``range``, for
    the loops whose steps do the same work, so that the workload profile can trace a few of them and scale
    (:class:`StepSampling`). ``site`` names the loop: two loops of one pass whose steps differ need two
    names (the profile scales each loop by one of its own steps)."""
    order = range(n - 1, -1, -1) if reverse else range(n)
    s = current()
    return s.loop(site, list(order)) if s is not None else order


def current() -> StepSampling | None:
    """The sampling in force (:func:`sampling`), or None: run every step."""
    return _SAMPLING[-1] if _SAMPLING else None
