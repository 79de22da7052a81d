"""Ranks of a real process group (gloo on this CPU, NCCL on GPUs), for the data-parallel tests: each rank builds a model at
``size=tiny`` with its :class:`~trainbench.measure.distributed.DistContext` and runs the harness's epochs; rank
0 writes what the test compares with one process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers.models import build_model
from trainbench.measure.distributed import DistContext
from trainbench.measure.harness import run_epochs

CPU = torch.device("cpu")


def _rank(rank: int, world: int, folder: str, jobs: tuple[tuple[str, tuple[str, ...], int], ...],
          device_type: str) -> None:
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if device_type == "cuda" else CPU
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    results = []
    try:
        for name, overrides, epochs in jobs:
            ctx = DistContext(rank, world, rank, backend, device)
            trainable = build_model(name, *overrides, dist=ctx, device=device)
            seen: set[int] = set()  # the batch sizes of the training forward passes (gradients on)

            def record(module: Any, args: tuple[Any, ...], seen: set[int] = seen) -> None:
                if module.training and torch.is_grad_enabled():
                    seen.add(int(args[0].shape[0]))

            trainable.module.register_forward_pre_hook(record)
            res = run_epochs(trainable, device, epochs, 0, dist=ctx)
            params = torch.cat([p.detach().reshape(-1) for p in trainable.module.parameters()])
            results.append({"outcome": res.outcome, "error": res.error, "series": res.series,
                            "ranks": res.rank_epoch_ms, "params": params.tolist(),
                            "train_batches": sorted(seen)})
        Path(folder, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, jobs: tuple[tuple[str, tuple[str, ...], int], ...], world: int = 2,
              device_type: str = "cpu") -> list[list[dict[str, Any]]]:
    """``world`` spawned ranks running each job ``(model name, overrides, epochs)`` in turn (one process group:
    the ranks start once); per job, each rank's result (series, per-rank epoch times, final parameters, the batch sizes its training forward passes saw)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank, args=(world, str(tmp_path), jobs, device_type), nprocs=world, join=True)
    per_rank = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    return [list(job) for job in zip(*per_rank, strict=True)]


def run_one(name: str, overrides: tuple[str, ...], epochs: int, device: torch.device = CPU) -> Any:
    """The same model in this process, without a process group: the harness's result."""
    return run_epochs(build_model(name, *overrides, device=device), device, epochs, 0)
