"""The model author's kit: what every model gives the harness (the :class:`Trainable` protocol and its
optional hooks, declared in :mod:`trainbench.core.trainable`; its :class:`ModelSpec`) and the helpers a
model's update uses.

Every model module (``dqn.py``, ``ppo.py``, ..., and a plugin's) has one layout, in this order: its docstring
(the task, the math, the shapes), its config dataclass (a subclass of
:class:`trainbench.config.run.ModelConfig`), its ``nn.Module`` classes (shapes in their docstrings), the
update (the :class:`Trainable` class: ``__init__``, its own methods, then the hooks in :data:`HOOK_ORDER`)
with a ``build(cfg, data, ctx)`` function that returns it, and last ``SPEC = ModelSpec(...)``, which
``registry.py`` lists. trainbench's own models keep their config dataclass apart, with the model's name,
data kind and description (its ``SCHEMA``), in :mod:`trainbench.config.models` (torch-free: composing,
checking and explaining the configuration never imports a model), import it from there and declare
``SPEC = ModelSpec.of(SCHEMA, build, ...)``.

The contract that keeps timings honest: ``train_epoch`` does one fixed, documented amount of work and
returns **device tensors** (0-d), never Python floats; it must not call ``.item()``, ``.cpu()``,
``print`` or anything else that waits for the device. The harness times the epoch until all of its
device work has finished and reads the tensors once, after the timer has stopped.

Plugins import these names from :mod:`trainbench.api`. What the runner sets up around a model (seeds,
deterministic algorithms, denormals, CUDA-graph resolution) is :mod:`trainbench.models.runtime`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainbench.config.models.spec import ModelSpec  # noqa: F401 - a model's declaration (torch-free; re-exported)
from trainbench.config.run import OptimizerImpl
from trainbench.core.sampling import current as step_sampling
from trainbench.core.sampling import steps  # noqa: F401 - a model's loop over identical steps (re-exported)
from trainbench.core.trainable import (  # noqa: F401 - the contract (torch-free: the harness names it too)
    HOOK_ORDER,
    INFO_KEYS,
    OPTIONAL_HOOKS,
    Describes,
    Evaluates,
    StepsForMemory,
    Trainable,
    WritesArtifacts,
)


@dataclass
class BuildContext:
    """What the harness hands a model's ``build`` besides its config and data."""

    device: torch.device
    seed: int = 0
    precision: str = "fp32"  # fp32 | bf16 | fp16: autocast dtype for forward passes
    compile: bool = False  # wrap hot modules in torch.compile
    deterministic: bool = False
    #: Micro-batches per optimiser step: a model's update splits its ``batch_size`` samples into this many
    #: near-equal micro-batches (:func:`accumulate`); the resolved ``trainer.grad_accum``.
    grad_accum: int = 1
    optimizer_impl: str = "auto"  # auto | fused | foreach | forloop: see make_optimizer
    #: Capture each optimiser update as a CUDA graph and replay it (``trainer.cuda_graphs``, resolved by
    #: :func:`trainbench.models.runtime.resolve_cuda_graphs`: only ever True on a CUDA device, for models that support it).
    cuda_graphs: bool = False
    #: This process's rank of a data-parallel job (:class:`trainbench.measure.distributed.DistContext`), None in
    #: an ordinary run; what a model does with it: :data:`trainbench.core.trainable.DATA_PARALLEL`.
    dist: Any = None

    def generator(self) -> torch.Generator:
        """A generator on the run's device, seeded from the run's seed (for sampling inside epochs)."""
        g = torch.Generator(device=self.device)
        g.manual_seed(self.seed)
        return g

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast for the configured precision (a no-op for fp32)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        # CUDA graph capture needs autocast's weight-cast cache off (PyTorch's CUDA-graph notes)
        return torch.autocast(device_type=self.device.type, dtype=dtype, cache_enabled=not self.cuda_graphs)

    def maybe_compile(self, module: nn.Module) -> nn.Module:
        """``torch.compile(module)`` when ``trainer.compile=true``, else ``module``.

        Models route the module their training forward passes call through this and keep the eager
        module as ``self.module`` (parameters, state dict, optimiser). The first epochs pay the
        compilation: keep ``trainer.warmup_epochs`` >= 1 (train.py warns otherwise). In a rank of a
        data-parallel job (``dist``) the module is first wrapped in DDP (:meth:`DistContext.wrap`).
        """
        if self.dist is not None:
            module = self.dist.wrap(module)
        return torch.compile(module) if self.compile else module  # type: ignore[return-value]

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 (its narrow exponent underflows small gradients), else None.

        bf16 and fp32 need none. With the fused CUDA optimiser the inf check stays on the device;
        other optimisers read one flag per step (a host sync; on CPU there is nothing to wait for).
        """
        return torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None


class TrainableBase:
    """Shared plumbing: optimiser with no-decay groups, a clipped step, epoch accumulation.

    Subclasses set ``module``, ``samples_per_epoch``, ``batch_size`` and implement ``train_epoch`` and
    ``inference`` (:class:`Trainable`), with their one optimiser step named ``optimizer_step``. Optional
    hooks the harness calls when present (each declared by a protocol of :mod:`trainbench.core.trainable`): ``eval_epoch()`` (a validation pass on the held-out
    split, timed separately; see :func:`evaluate`), ``info()`` (run params: :data:`INFO_KEYS`, then the model's own),
    ``write_artifacts(dir)`` (model-specific files logged with the run), and for memory fitting
    (``trainbench.measure.fit``, ``trainbench.measure.predict``):

    - ``memory_step(batch_size) -> Callable[[], dict[str, torch.Tensor]]``: a zero-argument callable that
      runs one optimiser step of the model's own update (forward, backward over ``ctx.grad_accum``
      micro-batches, clip, optimiser step) on ``batch_size`` samples of its data, as ``train_epoch`` does
      per step, with the same per-step transients (sampling, environment step). Every model's step returns
      the same shape as ``train_epoch``, for that one step: a dict of 0-d device tensors holding at least
      ``loss`` (the step's mean training loss, detached) and ``grad_norm`` (its global gradient norm before
      clipping), plus any named loss parts. The ``auto`` batch search calls it for real on a GPU and the
      memory predictor traces it with fake tensors, so it must not read a value back from the device (no
      ``.item()``) and must accept any size up to ``batch_limit``.
    - ``batch_limit``: the largest ``batch_size`` the data allows (training windows, rollout size);
      ``None`` when unlimited (sampling with replacement).
    """

    batch_limit: int | None = None
    #: What an epoch holds, so that throughput compares across models (logged as params): samples that
    #: went through a gradient update, and environment steps (RL only; None for supervised models).
    train_samples: int | None = None
    env_steps: int | None = None

    module: nn.Module
    samples_per_epoch: int
    batch_size: int

    def info(self) -> dict[str, Any]:
        """:data:`INFO_KEYS`, the windows None; a model returns ``{**super().info(), ...}`` with its own."""
        return {"num_params": count_params(self.module), "train_windows": None, "val_windows": None}

    def write_artifacts(self, outdir: Path) -> list[Path]:
        return []


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def param_groups(module: nn.Module, weight_decay: float,
                 no_decay: Iterable[str] = ()) -> list[dict[str, Any]]:
    """AdamW groups: decay only matrices; never biases, norms, embeddings' scales or listed names."""
    skip = tuple(no_decay)
    decay, keep = [], []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or getattr(p, "_no_weight_decay", False) or any(s in name for s in skip):
            keep.append(p)
        else:
            decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def optimizer_kwargs(impl: str, cuda: bool) -> dict[str, Any]:
    """AdamW's implementation flags for ``trainer.optimizer_impl``.

    ``auto``: fused on CUDA (one kernel for all parameters), foreach elsewhere (one op per kind over
    all tensors); ``forloop``: the reference per-parameter loop. ``fused`` on a CPU is honoured
    (torch has a fused CPU AdamW).
    """
    if impl not in set(OptimizerImpl):
        raise ValueError(f"optimizer_impl must be one of {', '.join(OptimizerImpl)}, got {impl!r}")
    if impl == OptimizerImpl.auto:
        impl = "fused" if cuda else "foreach"
    return {"fused": {"fused": True}, "foreach": {"foreach": True, "fused": False},
            "forloop": {"foreach": False, "fused": False}}[str(impl)]


def make_optimizer(module: nn.Module, lr: float, weight_decay: float = 0.0,
                   no_decay: Iterable[str] = (), eps: float = 1e-8, impl: str = "auto",
                   capturable: bool = False) -> torch.optim.Optimizer:
    """AdamW with no-decay groups; ``impl`` as :func:`optimizer_kwargs` (``ctx.optimizer_impl``).

    ``capturable`` (CUDA graphs): the step counter and the learning rate live on the device, so that a
    captured step reads them at replay; change the lr with ``group["lr"].fill_(new)``, never by
    assigning a float (a graph keeps the float it was captured with).
    """
    cuda = next(module.parameters()).is_cuda
    kwargs = optimizer_kwargs(impl, cuda)
    if capturable:
        kwargs["capturable"] = True
        lr = torch.tensor(lr, device=next(module.parameters()).device)  # type: ignore[assignment]
    return torch.optim.AdamW(param_groups(module, weight_decay, no_decay), lr=lr, eps=eps, **kwargs)


def clip_and_step(module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float,
                  scaler: torch.amp.GradScaler | None = None, set_to_none: bool = True) -> torch.Tensor:
    """Clip the global gradient norm (if ``max_norm`` > 0) and step; return the pre-clip norm on device.

    The norm stays a tensor so that nothing waits for the device. With a ``scaler`` (fp16) the loss
    must have been scaled (``scaler.scale(loss).backward()``); gradients are unscaled before clipping.
    """
    if scaler is not None:
        scaler.unscale_(optimizer)
    params = [p for p in module.parameters() if p.grad is not None]
    if max_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    if scaler is not None:
        scaler.step(optimizer)  # skipped (params unchanged) when a gradient is non-finite at this scale
        scaler.update()
        # A skipped step is the scaler's normal search for its scale, not a divergence: count its norm
        # as 0 so the epoch's mean stays finite. A real divergence still shows as a non-finite loss.
        norm = torch.where(torch.isfinite(norm), norm, torch.zeros_like(norm))
    else:
        optimizer.step()
    # set_to_none=False (CUDA graphs) zeroes the gradients in place, so they keep their addresses
    optimizer.zero_grad(set_to_none=set_to_none)
    return norm.detach()


def micro_sizes(n: int, k: int) -> list[int]:
    """``n`` samples in ``min(k, n)`` near-equal micro-batches (sizes differ by at most one, larger first)."""
    k = max(1, min(k, n))
    q, r = divmod(n, k)
    return [q + 1] * r + [q] * (k - r)


def accumulate(step: Callable[[slice], tuple[torch.Tensor, dict[str, torch.Tensor]]], n: int, k: int,
               scaler: torch.amp.GradScaler | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Backward of one optimiser batch of ``n`` samples as ``k`` micro-batches (gradient accumulation).

    ``step(sl)`` computes the *mean* loss over the samples ``sl`` (a slice of the optimiser batch, in order)
    and returns it with named 0-d parts that are means over the same samples. Each micro-batch's loss is
    weighted by its share ``n_i / n`` before its backward, so the accumulated gradient equals the full
    batch's gradient (for layers that treat samples independently: no batch norm, no in-batch
    normalisation; normalise over the whole batch before splitting). Returns the full batch's loss
    (detached) and parts as the same weighted sums. ``k = 1`` is the plain path: one forward, one
    backward, no extra op. Nothing here reads the device.
    """
    if k <= 1:
        loss, parts = step(slice(0, n))
        (scaler.scale(loss) if scaler is not None else loss).backward()
        return loss.detach(), parts
    total: torch.Tensor | None = None
    sums: dict[str, torch.Tensor] = {}
    start = 0
    for m in micro_sizes(n, k):
        loss, parts = step(slice(start, start + m))
        start += m
        w = m / n
        weighted = loss * w
        (scaler.scale(weighted) if scaler is not None else weighted).backward()
        total = weighted.detach() if total is None else total + weighted.detach()
        for key, v in parts.items():
            v = v.detach() * w
            sums[key] = sums[key] + v if key in sums else v
    assert total is not None
    return total, sums


class EpochMeter:
    """Sums named device scalars over an epoch's steps and returns their means, all on device."""

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._count = 0

    def add(self, **values: torch.Tensor) -> None:
        for k, v in values.items():
            v = v.detach().float()
            self._sums[k] = self._sums[k] + v if k in self._sums else v.clone()
        self._count += 1

    def means(self) -> dict[str, torch.Tensor]:
        n = max(self._count, 1)
        return {k: v / n for k, v in self._sums.items()}


def evaluate(module: nn.Module, items: torch.Tensor, batch_size: int,
             losses: Callable[[torch.Tensor], dict[str, torch.Tensor]], dist: Any = None) -> dict[str, torch.Tensor]:
    """One validation pass: the mean of each named loss over ``items``, as ``val_<name>`` device tensors.

    ``items`` (a device tensor of window indices/starts of the held-out split) is walked in order in
    batches of ``batch_size`` (the last one may be smaller); ``losses(batch)`` returns batch means, which
    are weighted by the batch's share. The module runs in eval mode (dropout off) under ``no_grad`` and
    is put back in its previous mode. Batch sizes come from shapes, so nothing waits for the device.
    Empty ``items``: an empty dict (the data has no held-out window of this length).

    With ``dist`` (a rank of a data-parallel job, :mod:`trainbench.measure.distributed`) each rank walks its
    contiguous share of ``items`` (:meth:`DistContext.shard_eval`), each batch weighted by its share of all the
    items, and the ranks' weighted sums are added by one all-reduce: every rank returns the one-process means
    having evaluated 1/N of the windows. Fewer items than ranks: every rank evaluates all of them.
    """
    n = int(items.numel())
    if n == 0:
        return {}
    mine = dist.shard_eval(items) if dist is not None and dist.world_size > 1 else items
    sharded = mine.numel() < n
    was_training = module.training
    module.eval()
    sums: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad():
            m = int(mine.numel())
            starts: Iterable[int] = range(0, m, batch_size)
            sampled = step_sampling()
            if sampled is not None:  # the full batches are alike (core/sampling.py); a smaller last one always runs
                starts = sampled.loop("evaluate", [i for i in starts if i + batch_size <= m],
                                            [i for i in starts if i + batch_size > m])
            for i in starts:
                chunk = mine[i:i + batch_size]
                w = chunk.shape[0] / n
                for k, v in losses(chunk).items():
                    v = v.detach().float() * w
                    sums[k] = sums[k] + v if k in sums else v
    finally:
        module.train(was_training)
    if sharded:  # the ranks' weighted sums, added: the means over every rank's windows
        keys = list(sums)
        total = dist.sum_over_ranks(torch.stack([sums[k].reshape(()) for k in keys]))
        sums = {k: total[j] for j, k in enumerate(keys)}
    return {f"val_{k}": v for k, v in sums.items()}


def batches(n: int, batch_size: int, generator: torch.Generator, device: torch.device,
            drop_last: bool = True, dist: Any = None) -> Iterator[torch.Tensor]:
    """Shuffled index batches over ``range(n)``, generated on the device (no host round trip). With ``dist`` (a
    rank of a data-parallel job) each batch is the global one of ``batch_size``, drawn alike on every rank,
    cut to this rank's share (:meth:`DistContext.shard`)."""
    perm = torch.randperm(n, generator=generator, device=device)
    stop = (n // batch_size) * batch_size if drop_last else n
    starts: Iterable[int] = range(0, stop, batch_size)
    sampled = step_sampling()
    if sampled is not None:  # the full batches are alike (core/sampling.py); a smaller last one always runs
        starts = sampled.loop("batches", [i for i in starts if i + batch_size <= stop],
                                    [i for i in starts if i + batch_size > stop])
    for i in starts:
        yield perm[i:i + batch_size] if dist is None else dist.shard(perm[i:i + batch_size])


class GraphedUpdate:
    """One optimiser update captured once as a CUDA graph, then replayed on new inputs.

    ``body(*inputs)`` runs forward, backward, the clipped optimiser step (gradients zeroed in place, see
    :func:`clip_and_step`) and returns a dict of 0-d tensors. Its inputs must always have the shapes
    and dtypes of ``example`` (a sampled batch of fixed size: static shapes), and it may not read a value
    on the host. Capture follows PyTorch's whole-network recipe: ``warmup`` eager calls on a side stream
    (so that cuBLAS, autograd and the optimiser state allocate before capture), the parameters and
    optimiser state restored to where they were (the warm-up must not train), then one captured call.
    Each call copies its inputs into the static buffers, replays the graph and returns copies of the
    outputs (the next replay overwrites them). The optimiser must be ``capturable``.
    """

    def __init__(self, body: Callable[..., dict[str, torch.Tensor]], example: tuple[torch.Tensor, ...],
                 modules: Iterable[nn.Module], optimizer: torch.optim.Optimizer, warmup: int = 3) -> None:
        self.static = tuple(x.detach().clone() for x in example)
        tensors = [p for m in modules for p in m.parameters()]
        saved = [t.detach().clone() for t in tensors]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                body(*self.static)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.no_grad():  # undo the warm-up: weights back, optimiser state as before its first step
            for t, old in zip(tensors, saved, strict=True):
                t.copy_(old)
            for state in optimizer.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        v.zero_()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = body(*self.static)

    def __call__(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        for buf, x in zip(self.static, inputs, strict=True):
            buf.copy_(x)
        self.graph.replay()
        return {k: v.clone() for k, v in self.out.items()}
