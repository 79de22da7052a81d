"""Mamba-2: the chunked SSD scan against the step-by-step recurrence, and the model's training throughput.

- ``ssd.speedup_fwd_bwd.batch{16,230}``: forward + backward of :func:`ssd_scan` against
  :func:`ssd_recurrent` at length 128 on CPU, one thread, at the default model's head sizes and chunk
  size, for a small batch and the training batch (target >= 10x).
- ``ssd.train_samples_per_s``: training windows per second of the default ``mamba2`` model, one
  optimiser step on a fixed batch, median of repeats (one thread on CPU; on the GPU when there is one),
  and the epoch time that implies on 10,000 bars.
- ``ssd.train_tflops``: FLOP/s of one training step, FLOPs counted by ``torch.utils.flop_counter``
  (matmuls and convolutions only, so a lower bound of the work done; see ``trainbench.measure.flops.count_flops``).
"""

from __future__ import annotations

import torch
from common import Result, bench_device, cpu_threads, interleaved, median_time, sync_fn

from trainbench.data.in_memory import make_market_data
from trainbench.measure.flops import count_flops
from trainbench.measure.hardware import hardware_label
from trainbench.models.base import BuildContext
from trainbench.models.mamba2 import Mamba2Config, build
from trainbench.models.ssd import ssd_recurrent, ssd_scan


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
                  device=hardware_label("cpu"),
                  details={"chunked_ms": times["chunked"] * 1e3, "sequential_ms": times["sequential"] * 1e3,
                           "batch": b, "length": length, "heads": h, "headdim": p, "d_state": n,
                           "chunk_size": cfg.chunk_size, "threads": 1})


def _training(quick: bool) -> list[Result]:
    device = bench_device()
    name = hardware_label(device)
    cfg = Mamba2Config()
    tr = build(cfg, make_market_data(n=10_000, device=str(device)), BuildContext(device=device))
    idx = torch.arange(tr.batch_size, device=device)
    xb, yb = tr.batch(idx)
    repeats = 3 if quick else 10
    step_s = median_time(lambda: tr.optimizer_step(xb, yb), repeats=repeats, sync=sync_fn(device))
    rate = tr.batch_size / step_s
    details = {"num_params": tr.info()["num_params"], "batch_size": tr.batch_size, "seq_len": cfg.seq_len,
               "d_model": cfg.d_model, "n_layers": cfg.n_layers, "d_state": cfg.d_state,
               "headdim": cfg.headdim, "chunk_size": cfg.chunk_size, "windows_10k_bars": tr.n_windows,
               "step_s": step_s, "repeats": repeats}
    out = [Result("ssd.train_samples_per_s", rate, "samples/s", device=name, details=details),
           Result("ssd.epoch_s_10k_bars", tr.samples_per_epoch / rate, "s", device=name,
                  details={"samples_per_epoch": tr.samples_per_epoch})]
    flops = count_flops(lambda: tr.optimizer_step(xb, yb))
    out.append(Result("ssd.train_tflops", flops.total / step_s / 1e12, "TFLOP/s", device=name,
                      details={"flops_per_step": flops.total, "counted": flops.note}))
    return out


def run(quick: bool) -> list[Result]:
    with cpu_threads(1):  # the CPU figures are per core
        torch.manual_seed(0)
        return [_scan_speedup(quick, 16), _scan_speedup(quick, 230), *_training(quick)]
