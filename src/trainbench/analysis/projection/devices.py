"""Compare devices: the measured speed ratio of the same model on two `device` tags.

Uses every completed training run in the experiment (not only the analysed sweep), from its summary
metric ``epoch_time_ms_p50`` (or ``_mean``): the median over runs per (model, device).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TypedDict

import numpy as np

from trainbench.analysis.report_types import DeviceComparison


class Speed(TypedDict):
    """One completed training run's median epoch time (runs.experiment_speeds): what the device comparison reads."""

    model: str
    device: str
    epoch_ms: float
    run_id: str
    sweep_id: str | None


def device_comparison(speeds: list[Speed], reference_device: str | None,
                      models: list[str] | None = None) -> list[DeviceComparison]:
    """One :class:`DeviceComparison` per (model, device other than the reference).

    ``speedup`` = reference epoch time / device epoch time: 2.0 means ``device`` trains twice as fast.
    """
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in speeds:
        by[(s["model"], s["device"])].append(s["epoch_ms"])
    out: list[DeviceComparison] = []
    for model in sorted({m for m, _ in by}):
        if models is not None and model not in models:
            continue
        devices = {d: v for (m, d), v in by.items() if m == model}
        if len(devices) < 2:
            continue
        ref = reference_device if reference_device in devices else max(devices, key=lambda d: len(devices[d]))
        ref_ms = float(np.median(devices[ref]))
        for dev, vals in sorted(devices.items()):
            if dev == ref:
                continue
            ms = float(np.median(vals))
            out.append(DeviceComparison(model=model, reference_device=ref, device=dev, reference_epoch_ms=ref_ms,
                                        epoch_ms=ms, reference_runs=len(devices[ref]), runs=len(vals),
                                        speedup=ref_ms / ms))
    return out
