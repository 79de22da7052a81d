"""Mamba-2: the chunked SSD scan against the step-by-step recurrence, and the model's training throughput.

- ``ssd.speedup_fwd_bwd.batch{16,230}``: forward + backward of :func:`ssd_scan` against
  :func:`ssd_recurrent` at length 128 on CPU, one thread, at the default model's head sizes and chunk
  size, for a small batch and the training batch (target >= 10x).
- ``ssd.train_samples_per_s``: training windows per second of the default ``mamba2`` model (one thread on
  CPU; on the GPU when there is one), and the epoch time that implies on 10,000 bars (7,744 windows).
- ``ssd.train_tflops``: FLOP/s of one training step, FLOPs counted by ``torch.utils.flop_counter``
  (matmuls and convolutions only, so a lower bound of the work done).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from common import Result, interleaved

from trainbench.data import Bars, MarketData
from trainbench.data.features import compute_features
from trainbench.models.base import BuildContext
from trainbench.models.mamba2 import Mamba2Config, build, ssd_recurrent, ssd_scan


def _bars(n: int, seed: int = 0) -> MarketData:
    """A random walk of n minute bars on a 0.00005 tick grid, one session gap halfway (as the tests)."""
    rng = np.random.default_rng(seed)
    tick = 0.00005
    close = np.round(1.08 / tick) * tick + np.cumsum(rng.integers(-3, 4, size=n)) * tick
    open_ = np.concatenate([[close[0]], close[:-1]])
    high = np.maximum(open_, close) + rng.integers(0, 3, size=n) * tick
    low = np.minimum(open_, close) - rng.integers(0, 3, size=n) * tick
    ts = np.int64(1_704_186_000_000_000_000) + np.arange(n, dtype=np.int64) * 60_000_000_000
    ts[n // 2:] += np.int64(3_600_000_000_000)
    bars = Bars(ts=ts, instrument=np.zeros(n, dtype=np.int64), open=open_, high=high, low=low, close=close,
                volume=rng.integers(1, 500, size=n).astype(float), symbols=["SYN"], instrument_ids=[1],
                tick_size=np.array([tick]))
    return MarketData(name="bench", schema="ohlcv-1m", path=Path("memory"), synthetic=True,
                      sha256="0" * 64, bars=bars, features=compute_features(bars))


def _scan_speedup(quick: bool, b: int) -> Result:
    cfg = Mamba2Config()
    length = 128
    h, p, n = cfg.expand * cfg.d_model // cfg.headdim, cfg.headdim, cfg.d_state
    x = torch.randn(b, length, h, p, requires_grad=True)
    dt = torch.nn.functional.softplus(torch.randn(b, length, h) - 2).requires_grad_(True)
    A = (-torch.rand(h) * 15 - 1).requires_grad_(True)
    B = torch.randn(b, length, 1, n, requires_grad=True)
    C = torch.randn(b, length, 1, n, requires_grad=True)
    Bh, Ch = B.expand(b, length, h, n), C.expand(b, length, h, n)
    g = torch.randn(b, length, h, p)

    def chunked() -> None:
        ssd_scan(x, dt, A, B, C, cfg.chunk_size).backward(g)

    def sequential() -> None:
        ssd_recurrent(x, dt, A, Bh, Ch).backward(g)

    times = interleaved({"chunked": chunked, "sequential": sequential}, repeats=3 if quick else 10)
    return Result(f"ssd.speedup_fwd_bwd.batch{b}", times["sequential"] / times["chunked"], "x", target=">= 10x",
                  details={"chunked_ms": times["chunked"] * 1e3, "sequential_ms": times["sequential"] * 1e3,
                           "batch": b, "length": length, "heads": h, "headdim": p, "d_state": n,
                           "chunk_size": cfg.chunk_size, "threads": 1})


def _training(quick: bool) -> list[Result]:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    cfg = Mamba2Config()
    tr = build(cfg, _bars(10_000), BuildContext(device=device))
    idx = torch.arange(tr.batch_size, device=device)
    xb, yb = tr.batch(idx)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(2):
        tr.train_step(xb, yb)
    steps = 3 if quick else 10
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        tr.train_step(xb, yb)
    sync()
    step_s = (time.perf_counter() - t0) / steps
    rate = tr.batch_size / step_s
    details = {"num_params": tr.info()["num_params"], "batch_size": tr.batch_size, "seq_len": cfg.seq_len,
               "d_model": cfg.d_model, "n_layers": cfg.n_layers, "d_state": cfg.d_state,
               "headdim": cfg.headdim, "chunk_size": cfg.chunk_size, "windows_10k_bars": tr.n_windows,
               "threads": 1 if not cuda else None}
    out = [Result("ssd.train_samples_per_s", rate, "samples/s", device=name, details=details),
           Result("ssd.epoch_s_10k_bars", tr.samples_per_epoch / rate, "s", device=name,
                  details={"samples_per_epoch": tr.samples_per_epoch})]

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        tr.train_step(xb, yb)
    counts = counter.get_flop_counts()["Global"]
    # The counter books a depthwise conv's backward as if the conv were dense (x channels); count it
    # as twice the forward conv instead (input and weight gradients).
    conv_fwd = counts.get(torch.ops.aten.convolution, 0)
    flops = sum(v for k, v in counts.items() if k is not torch.ops.aten.convolution_backward) + 2 * conv_fwd
    out.append(Result("ssd.train_tflops", flops / step_s / 1e12, "TFLOP/s", device=name,
                      details={"flops_per_step": flops,
                               "counted": "matmul and conv FLOPs (torch.utils.flop_counter); no elementwise"}))
    return out


def run(quick: bool) -> list[Result]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU figures are per core
    try:
        torch.manual_seed(0)
        return [_scan_speedup(quick, 16), _scan_speedup(quick, 230), *_training(quick)]
    finally:
        torch.set_num_threads(threads)
