"""The process state a run sets around a model: seeds, deterministic algorithms, the CPU's denormal flush, and
whether its updates are captured as CUDA graphs.

train.py and the conformance check call these before and after ``build``; a model module never does (what a
model uses is the author's kit, :mod:`trainbench.models.base`). Each setting is recorded with the run.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool) -> None:
    """What a run does before ``build``: seed Python, NumPy and torch; with ``deterministic``, deterministic
    algorithms only, cuDNN without autotuning, and the fixed cuBLAS workspace reproducible GEMMs need."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # harmless on a CPU
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True


def flush_denormals(device: torch.device) -> bool:
    """On a CPU run, flush denormal floats to zero (``torch.set_flush_denormal``); return whether it is on.

    Denormals (|x| < 1.2e-38 in fp32) take a slow microcode path on x86 CPUs, tens of times slower
    per operation; long training runs make them (decaying Adam moments, saturated gates, tiny
    gradients), so epoch times drift upward with no change in the workload. GPUs process them at
    full speed, so a CPU timing that includes the slowdown describes neither machine. Flushing changes
    values only below 1.2e-38. Not touched on a CUDA run (the flag is per process and CPU-only); False
    where the CPU cannot flush (no SSE3). See docs/performance.md.
    """
    if device.type != "cpu":
        return False
    return bool(torch.set_flush_denormal(True))


def resolve_cuda_graphs(requested: bool, device: torch.device, precision: str,
                        supported: bool) -> tuple[bool, str]:
    """``trainer.cuda_graphs`` -> (whether the run captures its updates, the reason), recorded per run.

    Ignored (with the reason) rather than refused when it cannot apply, so one trainer profile serves
    every device and model: on a CPU (no CUDA graphs), for a model whose update is not captured
    (``supported``: dqn and ppo), and with fp16 (its GradScaler reads a flag on the host every step).
    """
    if not requested:
        return False, "off (trainer.cuda_graphs=false)"
    if device.type != "cuda":
        return False, f"ignored: device {device.type} has no CUDA graphs"
    if not supported:
        return False, "ignored: this model's update is not captured (dqn and ppo are)"
    if precision == "fp16":
        return False, "ignored: fp16's GradScaler checks for inf on the host every step; use bf16 or fp32"
    return True, "on: each optimiser update is replayed as one CUDA graph"
