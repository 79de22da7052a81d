"""Which measured epochs a timing uses: one rule for the run's own summary and for the analysis.

The harness flags an epoch ``contaminated`` when the machine was busy enough to distort its timing
(:mod:`trainbench.measure.load` states when host load does and does not contaminate an epoch). What is then
done with the flagged epochs is this module's rule, applied per run, to its finite measured epochs:

``drop``
    Contaminated epochs never count. A run measured on a machine busy throughout then has no timing.
``use``
    Every finite epoch counts, contaminated ones included (and the report labels the figure as measured
    under load).
``auto`` (the default)
    Contaminated epochs are dropped when the run has at least :data:`MIN_CLEAN` clean ones; otherwise every
    finite epoch is used, labelled as measured under load, at low confidence.

Why ``auto``: a run that completed was measured. A shared machine that is busy for the whole run is the
common case on a team's workstation or a shared cluster node, and the user asked how long training takes
there. Dropping every epoch would call the model "not measured" and leave the decision without it, which is
both false and useless; using the loaded epochs gives the time on that machine as it was, an upper bound of
the quiet-machine figure, with a warning that says so. Where clean epochs exist they are the better figure,
and mixing them with loaded ones would only bias it, so they win. Numpy only: the harness (``measure``) and
the analysis both import it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from trainbench.core.enums import ValueEnum


class ContaminatedPolicy(ValueEnum):
    """``analysis.contaminated``: what the statistics do with epochs the harness flagged contaminated."""

    auto = "auto"
    drop = "drop"
    use = "use"


DROP, USE, AUTO = ContaminatedPolicy.drop, ContaminatedPolicy.use, ContaminatedPolicy.auto
POLICIES = tuple(ContaminatedPolicy)
#: Under ``auto``, the clean epochs a run needs for its contaminated ones to be dropped.
MIN_CLEAN = 3


class Kept(NamedTuple):
    mask: np.ndarray  # bool per measured epoch: the epoch's time counts
    contaminated: np.ndarray  # bool per measured epoch: flagged by the harness
    used_contaminated: bool  # contaminated epochs are among the counted ones


def kept(times: np.ndarray | list[float], flags: np.ndarray | list[float] | None, policy: str = AUTO,
         min_clean: int = MIN_CLEAN) -> Kept:
    """The measured epochs whose times count under ``policy``; ``flags`` are the per-epoch 0/1 flags (a
    missing or misaligned series counts every epoch as clean)."""
    if policy not in POLICIES:
        raise ValueError(f"contaminated-epoch policy {policy!r}: use one of {', '.join(POLICIES)}")
    t = np.asarray(times, dtype=float)
    f = np.asarray(flags if flags is not None else [], dtype=float)
    bad = (f[:t.size] > 0.5) if f.size >= t.size else np.zeros(t.size, dtype=bool)
    finite = np.isfinite(t)
    clean = finite & ~bad
    use = policy == USE or (policy == AUTO and int(clean.sum()) < min_clean)
    mask = finite if use else clean
    return Kept(mask=mask, contaminated=bad, used_contaminated=bool(use and (bad & finite).any()))
