"""Ranks of a real process group (gloo on this CPU, NCCL on GPUs), for the data-parallel tests: each rank builds a model at
``size=tiny`` with its :class:`~trainbench.measure.distributed.DistContext` and runs the harness's epochs; rank
0 writes what the test compares with one process."""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers.models import build_model
from trainbench.measure.distributed import DistContext
from trainbench.measure.harness import run_epochs

CPU = torch.device("cpu")
#: Seconds a rank waits in a collective for a stuck peer before it fails (the process group's timeout), and the
#: seconds the ranks of one :func:`run_ranks` may take in all before the test kills them and fails.
COLLECTIVE_TIMEOUT_S = 60
RANKS_TIMEOUT_S = 300


def _rank(rank: int, world: int, folder: str, jobs: tuple[tuple[str, tuple[str, ...], int], ...],
          device_type: str) -> None:
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if device_type == "cuda" else CPU
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    results = []
    try:
        for name, overrides, epochs in jobs:
            ctx = DistContext(rank, world, rank, backend, device)
            trainable = build_model(name, *overrides, dist=ctx, device=device)
            seen: set[int] = set()  # the batch sizes of the training forward passes (gradients on)
            evaluated = [0]  # the windows of the validation forward passes (eval mode, no gradients)

            def record(module: Any, args: tuple[Any, ...], seen: set[int] = seen, evaluated: list[int] = evaluated) -> None:
                if module.training and torch.is_grad_enabled():
                    seen.add(int(args[0].shape[0]))
                elif not module.training and not torch.is_grad_enabled():
                    evaluated[0] += int(args[0].shape[0])

            trainable.module.register_forward_pre_hook(record)
            res = run_epochs(trainable, device, epochs, 0, dist=ctx)
            params = torch.cat([p.detach().reshape(-1) for p in trainable.module.parameters()])
            results.append({"outcome": res.outcome, "error": res.error, "series": res.series,
                            "ranks": res.rank_epoch_ms, "params": params.tolist(),
                            "train_batches": sorted(seen), "evaluated_windows": evaluated[0],
                            "val_windows": trainable.info().get("val_windows")})
        Path(folder, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, jobs: tuple[tuple[str, tuple[str, ...], int], ...], world: int = 2,
              device_type: str = "cpu") -> list[list[dict[str, Any]]]:
    """``world`` spawned ranks running each job ``(model name, overrides, epochs)`` in turn (one process group:
    the ranks start once); per job, each rank's result (series, per-rank epoch times, final parameters, the batch sizes its training forward passes saw,
    the windows its validation forward passes saw over every epoch and the model's ``val_windows``). Bounded:
    a collective fails after :data:`COLLECTIVE_TIMEOUT_S`, and ranks still running after
    :data:`RANKS_TIMEOUT_S` are killed and the call raises."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ranks = mp.spawn(_rank, args=(world, str(tmp_path), jobs, device_type), nprocs=world, join=False)
    deadline = time.monotonic() + RANKS_TIMEOUT_S  # a stuck rank fails the test instead of hanging it
    while not ranks.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for p in ranks.processes:
                if p.is_alive():
                    p.kill()
            raise TimeoutError(f"the {world} ranks did not finish within {RANKS_TIMEOUT_S} s")
    per_rank = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    return [list(job) for job in zip(*per_rank, strict=True)]


def run_one(name: str, overrides: tuple[str, ...], epochs: int, device: torch.device = CPU) -> Any:
    """The same model in this process, without a process group: the harness's result."""
    return run_epochs(build_model(name, *overrides, device=device), device, epochs, 0)
