"""TFT cost at two sizes side by side: the default (CPU-friendly) and the Google reference's volatility size.

On 10,000 one-minute bars of one instrument: parameter count and one epoch's time at each size, and
their ratio. Both sizes are measured the same way, wall time after waiting for the device, median of
repeats: on a GPU whole epochs; on a CPU (one thread) one epoch of the volatility size (hidden 160,
1 head, encoder 252, decoder 5, dropout 0.3) takes minutes, so at both sizes identical optimiser steps
are timed (one untimed step first) and the median step is multiplied by the steps per epoch. With ``--quick``
on a CPU the volatility size's steps (~10-20 s each) are not timed: its epoch time and the ratio are reported
as skipped with that reason (its parameter count still is).
"""

from __future__ import annotations

import statistics
import time

import torch
from common import Result, bench_device, cpu_threads, sync_fn

from trainbench.measure.hardware import hardware_label

SIZES = {
    "default": {},
    "google_volatility": dict(hidden=160, heads=1, encoder_len=252, horizons=[1, 2, 3, 4, 5], dropout=0.3),
}


def _step_fn(t):
    from trainbench.models.base import batches, clip_and_step

    t.module.train()
    it = batches(t.n_train_windows, t.batch_size, t.generator, t.ctx.device)

    def step() -> None:
        idx = next(it)
        loss, _ = t.loss_on(t.train_starts[idx], t.train_targets[idx])
        loss.backward()
        clip_and_step(t.module, t.optimizer, t.cfg.max_grad_norm)

    return step


def run(quick: bool) -> list[Result]:
    from trainbench.data.in_memory import make_market_data
    from trainbench.models.base import BuildContext, count_params
    from trainbench.models.tft import TFTConfig, build

    device = bench_device()
    sync = sync_fn(device)
    out: list[Result] = []
    epoch_s: dict[str, float] = {}
    with cpu_threads(1):
        label = hardware_label(device)
        data = make_market_data(n=10_000, device=str(device))
        for size, kw in SIZES.items():
            torch.manual_seed(0)
            t = build(TFTConfig(**kw), data, BuildContext(device=device))
            steps = t.samples_per_epoch // t.batch_size
            details = {"config": kw or "defaults", "train_windows": t.n_train_windows, "steps": steps,
                       "batch_size": t.batch_size}
            out.append(Result(f"tft.{size}.params", count_params(t.module), "params", device=label, details=details))
            if quick and device.type == "cpu" and size != "default":
                why = "--quick on a CPU: one volatility-size step takes ~10-20 s on one thread (make bench times it)"
                out.append(Result(f"tft.{size}.epoch_time", float("nan"), "s", device=label,
                                  details={**details, "skipped": why}))
                continue
            if device.type == "cuda":
                fn, n, scale, how = t.train_epoch, 3 if quick else 5, 1, "whole epochs"
            else:
                # a volatility-size step takes ~10-20 s on one CPU thread: few repeats keep `make bench` short
                fn, n, scale, how = _step_fn(t), 1 if quick else 3, steps, f"steps x {steps} steps per epoch"
            fn()
            sync()
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - t0)
            epoch_s[size] = statistics.median(times) * scale
            out.append(Result(f"tft.{size}.epoch_time", epoch_s[size], "s", device=label,
                              details={**details, "method": f"median of {n} {how}"}))
        meaning = {"meaning": "epoch time ratio, volatility size / default"}
        if "google_volatility" in epoch_s:
            out.append(Result("tft.google_volatility_vs_default", epoch_s["google_volatility"] / epoch_s["default"],
                              "x", device=label, details=meaning))
        else:
            out.append(Result("tft.google_volatility_vs_default", float("nan"), "x", device=label,
                              details={**meaning, "skipped": "--quick on a CPU: the volatility size is not timed"}))
    return out
