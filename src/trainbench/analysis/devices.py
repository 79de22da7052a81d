"""Compare devices: the measured speed ratio of the same model on two `device` tags.

Uses every completed training run in the experiment (not only the analysed sweep), from its summary
metric ``epoch_time_ms_p50`` (or ``_mean``): the median over runs per (model, device).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np


def device_comparison(speeds: list[dict[str, Any]], reference_device: str | None,
                      models: list[str] | None = None) -> list[dict[str, Any]]:
    """[{model, reference_device, device, reference_epoch_ms, epoch_ms, reference_runs, runs, speedup}].

    ``speedup`` = reference epoch time / device epoch time: 2.0 means ``device`` trains twice as fast.
    """
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in speeds:
        by[(s["model"], s["device"])].append(s["epoch_ms"])
    out = []
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
            out.append({"model": model, "reference_device": ref, "device": dev, "reference_epoch_ms": ref_ms,
                        "epoch_ms": ms, "reference_runs": len(devices[ref]), "runs": len(vals),
                        "speedup": ref_ms / ms})
    return out


_GPU_TOKEN = re.compile(r"^(?=.*[a-z])(?=.*\d)[a-z0-9]+$", re.I)


def gpu_tokens(gpu: str) -> list[str]:
    """Model tokens of a GPU label ("8x A100 40GB" -> ["A100"]): letters and digits, not sizes or counts."""
    return [t for t in re.split(r"[\s,/()-]+", gpu) if _GPU_TOKEN.match(t)
            and not re.fullmatch(r"\d+(gb|g|x)", t, re.I) and not re.fullmatch(r"x\d+", t, re.I)]


def measured_speed(comparisons: list[dict[str, Any]], gpu: str) -> tuple[float, str] | None:
    """Geometric-mean speedup over models measured on a device whose name matches the instance's GPU."""
    tokens = gpu_tokens(gpu)
    hits = [c for c in comparisons
            if any(re.search(rf"\b{re.escape(t)}\b", c["device"], re.I) for t in tokens)]
    if not hits:
        return None
    speed = float(np.exp(np.mean([np.log(c["speedup"]) for c in hits])))
    devs = sorted({c["device"] for c in hits})
    return speed, f"measured on {', '.join(devs)} ({len(hits)} model(s))"
