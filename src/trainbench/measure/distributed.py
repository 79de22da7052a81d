"""Data parallelism inside one rank: the process group, DDP with a timed communication hook, a rank's share of
each global batch, and the exchange after every epoch of what each rank measured (docs/distributed.md).

A job with ``trainer.distributed.nproc=N`` runs as N processes launched the torchrun way
(:mod:`trainbench.ranks`); each builds a :class:`DistContext` from the environment torchrun gives it
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and hands it to the model
(``BuildContext.dist``) and to the harness (``run_epochs(dist=...)``).

What the model does with it (:class:`trainbench.core.trainable.DataParallel`): its training forward passes go
through :meth:`DistContext.wrap` (``torch.nn.parallel.DistributedDataParallel``: gradients averaged over the
ranks by an all-reduce overlapped with the backward pass), and each global batch of indices, drawn alike on
every rank from the same seeded generator, is cut into the ranks' contiguous shares (:meth:`DistContext.shard`).
A step's loss is the mean over the rank's share; the ranks' shares being equal, the averaged gradient is the
global batch's gradient, as in one process.

What the harness does with it, after each epoch and outside the timed regions (no host synchronisation is
added inside an epoch): :meth:`DistContext.exchange` gathers every rank's epoch time, validation time and
exposed communication time, so that the epoch's time is the slowest rank's; :meth:`DistContext.average`
averages the epoch's scalars (losses) over the ranks; :meth:`DistContext.agree` hands every rank rank 0's
decision to stop, so that no rank waits in a collective another has left.

The exposed communication (:class:`CommTimer`): a DDP communication hook that all-reduces each gradient bucket
as DDP's default hook does (the bucket divided by the world size, summed), and records when each bucket was
handed to the backend and when its all-reduce finished. DDP launches the buckets of a step in order and waits
for all of them at the end of the backward pass: the time from the last bucket's launch (the last gradient
ready) to the last completion is the communication the backward pass did not hide. On a CPU the times are
``perf_counter_ns`` taken in the hook and in the future's callback; on CUDA they are CUDA events recorded on
the stream (the callback's stream waits for the collective), read after the epoch, when the timer has
synchronised the device.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

#: The environment torchrun (torch.distributed.run) gives each worker.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def resolve_backend(backend: str, device_type: str) -> str:
    """``trainer.distributed.backend``: auto = nccl on CUDA, gloo on a CPU; nccl needs CUDA."""
    b = str(backend)
    if b == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if b == "nccl" and device_type != "cuda":
        from trainbench.core.errors import ConfigError

        raise ConfigError("trainer.distributed.backend=nccl needs CUDA devices: use backend=gloo (or auto) on a CPU.")
    return b


class CommTimer:
    """A DDP communication hook (``register_comm_hook(state=None, hook=timer.hook)``) that all-reduces each
    bucket like DDP's default hook and times the part of it the backward pass did not hide, per step; see the
    module doc. :meth:`take_epoch_ms` returns the epoch's sum and starts the next epoch."""

    def __init__(self, world_size: int, device: torch.device, group: Any = None) -> None:
        self.world_size = world_size
        self.device = device
        self.cuda = device.type == "cuda"
        self.group = group
        #: Per step: [the last bucket's launch, [each bucket's completion]] (ns, or CUDA events).
        self._steps: list[list[Any]] = []

    def _now(self) -> Any:
        if self.cuda:  # on the current stream of the rank's device (in the callback: one that waited for NCCL)
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.device))
            return ev
        return time.perf_counter_ns()

    def hook(self, state, bucket):  # noqa: ANN001, ANN201 - DDP checks the annotations: none, or its own types
        """All-reduce ``bucket`` (a ``dist.GradBucket``) as DDP's default hook does; returns its future."""
        if bucket.index() == 0 or not self._steps:  # DDP launches a step's buckets in order: 0 starts a step
            self._steps.append([None, []])
        step = self._steps[-1]
        if bucket.is_last():
            step[0] = self._now()
        tensor = bucket.buffer().div_(self.world_size)
        fut = dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            step[1].append(self._now())
            return f.value()[0]

        return fut.then(done)

    def take_epoch_ms(self) -> float:
        """The exposed communication of the steps since the last call, in ms (device work finished: the
        harness calls it after its timer stopped)."""
        total = 0.0
        for last, dones in self._steps:
            if last is None or not dones:
                continue
            if self.cuda:
                tail = max(last.elapsed_time(d) for d in dones)
            else:
                tail = (max(dones) - last) / 1e6
            total += max(0.0, tail)
        self._steps = []
        return total


@dataclass
class DistContext:
    """This process's place in a data-parallel job, and the collectives the harness runs between epochs."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    comm: CommTimer = field(init=False)
    #: Modules wrapped in DDP (the run refuses a model that declared data parallelism and wrapped none).
    wrapped: int = field(init=False, default=0)
    #: Validation passes sharded across the ranks (:meth:`shard_eval`; the harness refuses a model that declared
    #: data parallelism and validated unsharded).
    sharded_evals: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.comm = CommTimer(self.world_size, self.device)

    @classmethod
    def from_env(cls, backend: str, device: torch.device, timeout_s: float = 600.0) -> DistContext:
        """Join the process group torchrun's environment describes; ``device`` is this rank's."""
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
            if device.type == "cuda":
                kwargs["device_id"] = device
            dist.init_process_group(**kwargs)
        return cls(rank, world, local, backend, device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` under DDP (rank 0's parameters broadcast to every rank), gradients all-reduced through
        the timed hook. Buffers are not broadcast at each forward (the models keep none that train)."""
        import inspect

        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        newer = "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters  # broadcast_buffers' successor
        ddp = DDP(module, device_ids=ids, **{"forward_sync_buffers" if newer else "broadcast_buffers": False})
        ddp.register_comm_hook(state=None, hook=self.comm.hook)
        self.wrapped += 1
        return ddp

    def shard(self, idx: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous share of a global batch of indices (the batch splits evenly: config check)."""
        n = idx.shape[0] // self.world_size
        return idx[self.rank * n:(self.rank + 1) * n]

    def shard_eval(self, items: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous share of a validation pass's ``items`` (the first ``len % world_size`` ranks
        take one more); every rank's shares together are ``items``, each once. Fewer items than ranks: all of
        them, on every rank."""
        self.sharded_evals += 1
        q, r = divmod(int(items.shape[0]), self.world_size)
        if q == 0:  # fewer items than ranks: every rank evaluates all of them (base.evaluate adds nothing up)
            return items
        start = self.rank * q + min(self.rank, r)
        return items[start:start + q + (1 if self.rank < r else 0)]

    def sum_over_ranks(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the ranks (one all-reduce), on ``t``'s device."""
        buf = t.to(self.device if self.backend == "nccl" else torch.device("cpu"))
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        return buf.to(t.device)

    def _tensor(self, values: list[float]) -> torch.Tensor:
        dev = self.device if self.backend == "nccl" else torch.device("cpu")
        return torch.tensor(values, dtype=torch.float64, device=dev)

    def exchange(self, values: list[float]) -> list[list[float]]:
        """Every rank's ``values`` (the same length on each), by rank; NaN stands for a missing value."""
        mine = self._tensor([v if v is not None and math.isfinite(v) else math.nan for v in values])
        parts = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(parts, mine)
        return [p.tolist() for p in parts]

    def average(self, out: dict[str, Any]) -> dict[str, Any]:
        """The epoch's 0-d scalars averaged over the ranks (one all-reduce), as device tensors."""
        keys = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
        if not keys:
            return out
        stacked = torch.stack([out[k].detach().float().reshape(()) for k in keys])
        buf = stacked.to(self.device if self.backend == "nccl" else "cpu")
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        buf = (buf / self.world_size).to(stacked.device)
        return {**out, **{k: buf[i] for i, k in enumerate(keys)}}

    def agree(self, code: int) -> int:
        """Rank 0's ``code`` on every rank (a decision all ranks must take together)."""
        t = self._tensor([float(code)])
        dist.broadcast(t, src=0)
        return int(t.item())

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def slowest(per_rank: list[list[float]], i: int) -> float:
    """The largest finite value at position ``i`` over the ranks (NaN when none is finite)."""
    vals = [r[i] for r in per_rank if math.isfinite(r[i])]
    return max(vals) if vals else math.nan


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or a SLURM job's share), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def omp_threads(value: str | None, cores: int) -> int | None:
    """``OMP_NUM_THREADS`` as a rank's thread count: None when unset or empty, and for a value above ``cores``
    (with a warning: more threads than cores only slows the ranks down; each then takes its share). Raises
    :class:`~trainbench.core.errors.ConfigError` for anything but a positive integer (``0``, ``-1``, ``abc``),
    which would fail every rank in ``torch.set_num_threads``."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < 1:  # ASCII digits ("²".isdigit() is true)
        from trainbench.core.errors import ConfigError

        raise ConfigError(f"OMP_NUM_THREADS={value!r} is not a positive number of threads: unset it (each rank then "
                          f"takes its share of the {cores} cores) or set it to 1..{cores}.")
    n = int(text)
    if n > cores:
        log.warning("OMP_NUM_THREADS=%d is more than the %d cores: ignored, each rank takes its share of the cores",
                    n, cores)
        return None
    return n


def limit_threads(local_world_size: int, cpu_count: Callable[[], int | None] = cpu_cores) -> int:
    """Threads per rank on a CPU: the cores shared by the node's ranks (at least 1), unless OMP_NUM_THREADS
    says otherwise (:func:`omp_threads`); applied to torch and returned."""
    cores = max(1, cpu_count() or 1)
    given = omp_threads(os.environ.get("OMP_NUM_THREADS"), cores)
    n = given if given is not None else max(1, cores // max(1, local_world_size))
    torch.set_num_threads(n)
    return n
