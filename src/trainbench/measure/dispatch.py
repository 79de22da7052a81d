"""What dispatching one eager op costs on this host: a training step of tiny tensors, timed and counted.

Eager PyTorch pays, for every op, Python, the dispatcher and the autograd bookkeeping on the host, whatever the
device; with tensors of a few elements that cost is all there is. :func:`dispatch_us_per_op` times such a step
(a two-layer MLP of width 8 on a batch of 4: forward, loss, backward; the optimizer left out, since the profile
books a model's optimizer as the few fused kernels CUDA would run, not as the eager ops a CPU step issues) on
the CPU and divides by the eager ops the workload profile counts in it (:func:`trainbench.measure.workload.profile_callable`'s
``host.ops``, the same count the run's own profile gives per epoch). The analysis multiplies a model's ops by it
for the host's floor of a launch-bound step on a GPU of this machine (analysis/projection/host_floor.py).

The figure is the median of a few timed rounds (the fastest would flatter a busy host, the mean follow its
bursts); it is recorded with the workload profile, ``host.dispatch_us_per_op``, and the metric
``host_dispatch_us_per_op``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

#: Steps per timed round, rounds: about 0.05-0.2 s on a laptop CPU in all.
STEPS, ROUNDS = 30, 7


def _tiny_step() -> Callable[[], None]:
    gen = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)

    def step() -> None:
        torch.nn.functional.mse_loss(net(x), y).backward()
        for p in net.parameters():
            p.grad = None

    return step


def dispatch_us_per_op(steps: int = STEPS, rounds: int = ROUNDS) -> dict[str, float]:
    """``{"us_per_op", "ops_per_step", "step_us"}``: the median host time of one eager op of a tiny CPU training
    step (µs), the ops the workload profile counts in that step, and the step's median time (µs)."""
    from trainbench.measure.workload import profile_callable

    with torch.random.fork_rng(devices=[]):  # the layers' init draws nothing from the run's generator
        step = _tiny_step()
    for _ in range(5):  # first calls warm the dispatcher's and the autograd engine's caches
        step()
    ops = int(profile_callable(step, torch.device("cpu"))["host"]["ops"])
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t0) / steps)
    step_us = statistics.median(times) * 1e6
    return {"us_per_op": step_us / max(ops, 1), "ops_per_step": float(ops), "step_us": step_us}
