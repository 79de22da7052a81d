"""TFT cost at two sizes: the default (CPU-friendly) and the Google reference's volatility size.

On 10,000 one-minute bars of one instrument (about 7,500-7,900 training windows), single-threaded on CPU:
parameter count and one epoch's time. At the default size a whole epoch is timed (median of repeats);
at the volatility size (hidden 160, 1 head, encoder 252, decoder 5, dropout 0.3) one epoch takes minutes
on a CPU, so a few identical optimiser steps are timed and multiplied by the steps per epoch.
CPU figures are process CPU time, which a busy shared machine inflates less than wall time.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from common import Result

REPO = Path(__file__).resolve().parents[1]

SIZES = {
    "default": {},
    "google_volatility": dict(hidden=160, heads=1, encoder_len=252, horizons=[1, 2, 3, 4, 5], dropout=0.3),
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _clock(device: torch.device) -> float:
    return time.perf_counter() if device.type == "cuda" else time.process_time()


def run(quick: bool) -> list[Result]:
    from trainbench.data.memory import make_market_data
    from trainbench.models.base import BuildContext, batches, clip_and_step, count_params
    from trainbench.models.tft import TFTConfig, build

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    label = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (1 thread)"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    data = make_market_data(n=10_000, device=str(device))
    out = []
    try:
        for size, kw in SIZES.items():
            t = build(TFTConfig(**kw), data, BuildContext(device=device))
            steps = t.samples_per_epoch // t.batch_size
            details = {"config": kw or "defaults", "train_windows": t.n_train_windows, "steps": steps,
                       "batch_size": t.batch_size}
            out.append(Result(f"tft.{size}.params", count_params(t.module), "params", device=label,
                              details=details))
            if size == "default" or device.type == "cuda":
                t.train_epoch()
                _sync(device)
                times = []
                for _ in range(1 if quick else 3):
                    c = _clock(device)
                    t.train_epoch()
                    _sync(device)
                    times.append(_clock(device) - c)
                epoch_s, how = statistics.median(times), f"median of {len(times)} whole epochs"
            else:
                t.module.train()
                it = batches(t.n_train_windows, t.batch_size, t.generator, device)
                times = []
                for k in range(2 if quick else 4):
                    idx = next(it)
                    c = _clock(device)
                    loss, _ = t.loss_on(t.train_starts[idx], t.train_targets[idx])
                    loss.backward()
                    clip_and_step(t.module, t.optimizer, t.cfg.max_grad_norm)
                    if k:  # the first step warms up
                        times.append(_clock(device) - c)
                epoch_s, how = min(times) * steps, f"min of {len(times)} steps x {steps} steps"
            out.append(Result(f"tft.{size}.epoch_time", epoch_s, "s", device=label,
                              details={**details, "method": how}))
    finally:
        torch.set_num_threads(threads)
    return out
