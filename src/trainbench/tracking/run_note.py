"""The run's description in the MLflow UI (``mlflow.note.content``): a short Markdown summary written when
the run ends: model, size, device, precision, the mean epoch time with its 95% t-interval, the outcome, the
run's wall time with the measured epochs' share of it (and what a stop signal skipped)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainbench.core.vocab import Outcome, Summary


def epoch_interval(summary: Mapping[str, float]) -> tuple[float, float] | None:
    """The 95% t-interval of a run's mean epoch time, from its summary metrics (None under 2 epochs)."""
    mean, std, n = (summary.get(k) for k in (Summary.EPOCH_TIME_MS_MEAN, Summary.EPOCH_TIME_MS_STD,
                                             Summary.EPOCHS_MEASURED))
    if mean is None or std is None or n is None or n < 2 or not math.isfinite(std):
        return None
    from trainbench.core.timeseries import t_quantile

    half = t_quantile(int(n) - 1) * float(std) / math.sqrt(int(n))
    return float(mean) - half, float(mean) + half


class RunNote:
    """Builds ``mlflow.note.content`` when the run ends (the writer calls it with the outcome)."""

    def __init__(self, model: str, size: Any, device: str, data: str, params: Any = None,
                 precision: str | None = None) -> None:
        self.model, self.size, self.device, self.data, self.params = model, size, device, data, params
        self.precision = precision
        self.summary: Mapping[str, float] = {}
        self.error: str | None = None
        #: ``phase_s.<phase>``, ``run_wall_s`` and ``measured_share_pct`` (train.py sets them at the end)
        self.phases: Mapping[str, float] = {}
        #: what a stop signal after the measured epochs skipped, when one did
        self.skipped: str | None = None

    def __call__(self, outcome: str) -> str:
        s = self.summary
        size = f"`{self.size}`" if self.size not in (None, "") else "default (no `model.size` set)"
        if self.params:
            size += f", {int(self.params):,} parameters"
        mean = s.get(Summary.EPOCH_TIME_MS_MEAN)
        if mean is None:
            timing = "no measured epoch"
        else:
            ci = epoch_interval(s)
            n = int(s.get(Summary.EPOCHS_MEASURED, 0))
            timing = f"{mean:.2f} ms mean over {n} measured epoch(s)"
            if ci is not None:  # a t-interval can reach below 0 with few, noisy epochs: time cannot
                timing += f", 95% t-interval of the mean [{max(0.0, ci[0]):.2f}, {ci[1]:.2f}] ms"
        lines = [f"**{self.model}** on `{self.data}` · outcome **{outcome}**", "",
                 f"- model: `{self.model}`, size {size}",
                 f"- device: {self.device}" + (f", precision `{self.precision}`" if self.precision else ""),
                 f"- epoch time: {timing}"]
        wall = self.phases.get(Summary.RUN_WALL_S)
        if wall is not None:
            share = self.phases.get(Summary.MEASURED_SHARE_PCT)
            lines.append(f"- run wall time: {wall:.1f} s" + (f", of which the measured epochs {share:.0f}%"
                                                            if share is not None else ", no measured epoch"))
        if self.skipped:
            lines.append(f"- stopped after the measured epochs by {self.skipped}")
        if self.error and outcome != Outcome.COMPLETED:
            lines.append(f"- error: {self.error.splitlines()[0][:300]}")
        return "\n".join(lines) + "\n"
