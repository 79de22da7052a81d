"""The per-epoch training series of a rerun against the original's, compared exactly (timings excluded)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainbench.rerun.names import TIMING_PREFIXES, TIMING_SERIES, TIMING_SUFFIXES


def is_measurement(series: str) -> bool:
    """Whether an epochs.json series measures speed, memory or the machine rather than the training itself."""
    return series in TIMING_SERIES or series.startswith(TIMING_PREFIXES) or series.endswith(TIMING_SUFFIXES)


def loss_comparison(original: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Per-epoch training series (everything but timings and memory) of two runs, compared exactly."""
    keys = sorted(k for k in original.keys() & new.keys()
                  if isinstance(original[k], list) and not is_measurement(k))
    series: dict[str, Any] = {}
    identical = bool(keys)
    for k in keys:
        a = np.array([np.nan if x is None else x for x in original[k]], dtype=float)
        b = np.array([np.nan if x is None else x for x in new[k]], dtype=float)
        if a.shape != b.shape:
            series[k] = {"identical": False, "epochs": [int(a.size), int(b.size)]}
            identical = False
            continue
        same = bool(np.array_equal(a, b, equal_nan=True))
        d = np.abs(a - b)
        series[k] = {"identical": same, "max_abs_diff": float(np.nanmax(d)) if np.isfinite(d).any() else 0.0}
        identical &= same
    return {"identical": identical, "series": series}
