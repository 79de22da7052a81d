"""Predict a training step's peak device memory without a GPU, and without allocating that memory.

How (:func:`predict_peak`): the model is built for real on the run's device (CPU is fine), then every
tensor it holds (its data, environment, buffers, parameters, optimiser) is swapped for a *fake* tensor
(``torch._subclasses.fake_tensor.FakeTensorMode``: shape, dtype and strides, no storage). Two optimiser
steps of the model's own update (``memory_step(batch_size)``, see ``models/base.py``) then run on the
fakes under :class:`LiveBytes`, a ``TorchDispatchMode`` that counts the bytes of every live storage:
an op's fresh output storage is an allocation; a ``weakref`` finaliser on the storage frees it when the
last tensor (autograd's saved tensors included) lets go of it. The peak of that count over forward,
backward, clipping and the optimiser step is the prediction. Two steps, because the first creates the
optimiser state and the second is the steady state an epoch runs in.

What the number means. ``peak_bytes`` predicts ``torch.cuda.max_memory_allocated`` during an epoch (the
``peak_vram_mb`` metric): everything the run keeps on the device (data, parameters, buffers) plus the
step's gradients, optimiser state, activations and temporaries, each storage rounded up to the CUDA
caching allocator's 512-byte blocks, plus the cuBLAS workspace (allocated through the caching allocator
on the first matmul and kept). ``reserved_bytes`` = ``peak_bytes`` x :data:`ALLOCATOR_OVERHEAD` predicts
``max_memory_reserved`` (segments the allocator holds, fragmentation included), which is what a memory
budget caps; a batch is predicted to fit when ``reserved_bytes <= budget x (1 - margin)``.

Limits, stated rather than hidden. The trace runs the kernels of the device it is on: traced on a CPU, it
predicts a CUDA run by assuming the same tensors are saved. Where CUDA picks a different kernel the
prediction is off by that kernel's difference: fused scaled-dot-product attention saves O(L) instead of
the O(L^2) attention matrix (the CPU trace overestimates long sequences), cuDNN's LSTM keeps its own
reserve buffer, and ``torch.compile`` fuses activations away (the trace is eager). The optimiser is traced
as on CUDA (``fused`` AdamW: no foreach temporaries; step counters on the device). The CUDA context
(~300-500 MB on a real card) is outside the allocator and outside the prediction; ``trainer.memory.margin``
leaves room for it. The GPU test ``tests/measure/test_predict.py::test_prediction_matches_measured_peak``
checks the prediction against the measured peak for every model.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trainbench.core.sampling import sampling
from trainbench.core.trainable import StepsForMemory, Trainable
from trainbench.core.vocab import Series

#: The CUDA caching allocator hands out blocks in multiples of 512 bytes (a 4-byte tensor takes 512).
BLOCK = 512
#: Reserved / allocated at the peak: the allocator's segments are 2 MB (small pool) or 20 MB+ rounded
#: (large pool), and a freed block is reused only by a request it can hold, so the reserved peak runs
#: above the allocated one. 1.10 is a typical training-loop ratio; the GPU test keeps it honest.
ALLOCATOR_OVERHEAD = 1.10
#: Steps traced: the first creates the optimiser state, the second runs with it (the steady state).
TRACE_STEPS = 2
#: Steps run of each loop over identical steps inside a step (a PPO step's rollout of environment steps and
#: its GAE recursion: :func:`trainbench.core.sampling.steps`): each repeats the same transients into
#: storage allocated before the loop, so the peak is reached within two of them, at a fraction of the cost.
PREDICT_LOOP_STEPS = 2


def round_block(nbytes: int) -> int:
    """Bytes the CUDA caching allocator assigns to a request of ``nbytes`` (0 stays 0)."""
    if nbytes <= 0:
        return 0
    return max(BLOCK, -(-nbytes // BLOCK) * BLOCK)


def cublas_workspace_bytes(capability: tuple[int, int] | None = None) -> int:
    """The cuBLAS workspace PyTorch allocates through the caching allocator (per handle and stream).

    ``CUBLAS_WORKSPACE_CONFIG=:SIZE_KiB:COUNT[:SIZE:COUNT...]`` when set; otherwise PyTorch's default:
    ``:4096:8`` (32 MiB) on Hopper and newer (compute capability >= 9), ``:4096:2:16:8`` (8.125 MiB)
    before. ``capability`` None: the pre-Hopper default (a prediction for a consumer card).
    """
    cfg = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if not cfg:
        cfg = ":4096:8" if capability is not None and capability[0] >= 9 else ":4096:2:16:8"
    parts = [p for p in cfg.split(":") if p]
    try:
        return sum(int(parts[i]) * 1024 * int(parts[i + 1]) for i in range(0, len(parts) - 1, 2))
    except ValueError:
        return 0


# --------------------------------------------------------------------------------------------------
# counting live storages
# --------------------------------------------------------------------------------------------------


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of live tensor storages on ``device``: current, and peak since :meth:`reset_peak`.

    A storage is counted from the op that creates it until it is freed (a weakref finaliser: PyTorch
    keeps one Python object per storage alive as long as any tensor uses it, so the finaliser runs when
    the memory would be released). Views and in-place results share their input's storage and are not
    counted again. :meth:`add` registers storages that existed before (data, parameters).
    """

    def __init__(self, device: torch.device | str) -> None:
        super().__init__()
        self.device = torch.device(device)
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}  # id(storage) -> counted bytes

    def add(self, t: torch.Tensor) -> int:
        """Count ``t``'s storage if it is on the device and not yet counted; return the bytes added."""
        if not isinstance(t, torch.Tensor) or t.device.type != self.device.type:
            return 0
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested: not in our models
            return 0
        key = id(st)
        if key in self._live:
            return 0
        n = round_block(st.nbytes())
        self._live[key] = n
        weakref.finalize(st, self._free, key)
        self.current += n
        self.peak = max(self.peak, self.current)
        return n

    def _free(self, key: int) -> None:
        n = self._live.pop(key, 0)
        self.current -= n

    def reset_peak(self) -> None:
        self.peak = self.current

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out


# --------------------------------------------------------------------------------------------------
# swapping a built trainable's tensors for fakes
# --------------------------------------------------------------------------------------------------


class _FakeCopier:
    """Copies an object graph with every tensor replaced by a fake; the originals are left untouched.

    Modules, optimisers, our own objects (and dataclasses), dicts, lists and tuples are copied (shallow,
    then their tensor-holding parts are rebuilt); shared objects stay shared in the copy (memo), so the
    copied trainable's module, optimiser and environment still refer to one another. Real tensors that
    share a storage (the feature windows are a view) map to fakes that share one fake storage.
    Generators are copied with their state, so a trace does not advance the run's random streams.
    Third-party objects other than these, and callables that are not modules, are kept as they are.
    """

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.memo: dict[int, Any] = {}
        self.keep: list[Any] = []  # keeps the originals alive while the memo is keyed by their ids
        self.fakes: list[torch.Tensor] = []

    def __call__(self, obj: Any) -> Any:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        new = self._copy(obj)
        return new

    def _remember(self, obj: Any, new: Any) -> Any:
        self.memo[id(obj)] = new
        self.keep.append(obj)
        return new

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        f = self.mode.from_tensor(t)
        if isinstance(t, nn.Parameter) and not isinstance(f, nn.Parameter):
            f = nn.Parameter(f, requires_grad=t.requires_grad)
        self.fakes.append(f)
        return self._remember(t, f)

    def _copy(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if obj is None or isinstance(obj, str | bytes | int | float | bool | type | torch.device | torch.dtype):
            return obj
        if isinstance(obj, torch.Generator):
            g = torch.Generator(device=obj.device)
            g.set_state(obj.get_state())
            return self._remember(obj, g)
        if isinstance(obj, nn.Module):
            new = self._remember(obj, copy.copy(obj))
            d = vars(new)
            for k, v in list(d.items()):
                if isinstance(v, dict):  # _parameters, _buffers, _modules, hook dicts: never share them
                    d[k] = type(v)((kk, self(vv) if isinstance(vv, torch.Tensor | nn.Module) else vv)
                                   for kk, vv in v.items())
                elif isinstance(v, torch.Tensor):
                    d[k] = self(v)
            return new
        if isinstance(obj, torch.optim.Optimizer):
            groups = [{**g, "params": [self(p) for p in g["params"]]} for g in obj.param_groups]
            accepted = inspect.signature(type(obj).__init__).parameters
            new = type(obj)(groups, **{k: v for k, v in obj.defaults.items() if k in accepted})
            return self._remember(obj, new)
        if isinstance(obj, dict):
            new = self._remember(obj, type(obj)())
            for k, v in obj.items():
                new[k] = self(v)
            return new
        if isinstance(obj, list):
            new = self._remember(obj, [])
            new.extend(self(v) for v in obj)
            return new
        if isinstance(obj, tuple):
            items = [self(v) for v in obj]
            return self._remember(obj, type(obj)(*items) if hasattr(obj, "_fields") else tuple(items))
        if callable(obj) or type(obj).__module__.split(".")[0] in _OPAQUE or not (
                hasattr(obj, "__dict__") or dataclasses.is_dataclass(obj)):
            return obj
        new = self._remember(obj, copy.copy(obj))
        for k, v in list(vars(obj).items()):
            nv = self(v)
            if nv is not v:
                object.__setattr__(new, k, nv)  # also through frozen dataclasses
        return new


#: Packages whose objects the copy does not enter (our objects and test doubles are entered).
_OPAQUE = frozenset({"torch", "numpy", "builtins", "pathlib", "omegaconf", "hydra", "mlflow", "logging",
                     "threading", "collections", "functools", "typing", "pandas", "scipy", "enum"})


def check_step_outputs(out: Any, owner: str) -> dict[str, torch.Tensor]:
    """``out``, the return of one ``memory_step`` step, if it has the shape every model returns (a dict of
    0-d tensors with ``loss`` and ``grad_norm``: see ``models/base.py``); else a TypeError naming ``owner``."""
    if isinstance(out, dict) and {"loss", Series.GRAD_NORM} <= out.keys() and \
            all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in out.values()):
        return out
    def kind(v: Any) -> str:
        return f"a tensor of shape {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__

    got = {k: kind(v) for k, v in out.items()} if isinstance(out, dict) else kind(out)
    raise TypeError(f"{owner}.memory_step(batch_size)() returned {got}: it must return a dict of 0-d tensors "
                    "with `loss` and `grad_norm` (see trainbench.models.base.TrainableBase)")


def _optimizers(obj: Any) -> list[torch.optim.Optimizer]:
    return [v for v in vars(obj).values() if isinstance(v, torch.optim.Optimizer)]


# --------------------------------------------------------------------------------------------------
# the prediction
# --------------------------------------------------------------------------------------------------


@dataclass
class Prediction:
    """A predicted peak for one batch size (bytes, CUDA allocator blocks)."""

    batch_size: int
    peak_bytes: int  # predicts max_memory_allocated over an epoch
    resident_bytes: int  # data, parameters, buffers: on the device before the step
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    workspace_bytes: int
    overhead: float = ALLOCATOR_OVERHEAD
    notes: list[str] = field(default_factory=list)

    @property
    def reserved_bytes(self) -> int:
        """Predicts max_memory_reserved: what a budget caps."""
        return int(math.ceil(self.peak_bytes * self.overhead))

    @property
    def activations_bytes(self) -> int:
        """The rest of the peak: activations saved for backward and the step's temporaries."""
        return max(self.peak_bytes - self.workspace_bytes - self.resident_bytes - self.grads_bytes
                   - self.optimizer_bytes, 0)

    def mb(self) -> dict[str, float]:
        mb = 2.0 ** 20
        return {"peak_mb": self.peak_bytes / mb, "reserved_mb": self.reserved_bytes / mb,
                "resident_mb": self.resident_bytes / mb, "params_mb": self.params_bytes / mb,
                "grads_mb": self.grads_bytes / mb, "optimizer_mb": self.optimizer_bytes / mb,
                "activations_mb": self.activations_bytes / mb, "workspace_mb": self.workspace_bytes / mb}


class Predictor:
    """Traces ``trainable.memory_step(batch_size)`` with fake tensors; one instance per built trainable.

    The trace runs on a copy of ``trainable`` whose tensors are fakes (:class:`_FakeCopier`): the
    trainable itself, its parameters, optimiser state and random generators are left as they were.
    ``extra`` are other objects the run keeps on the device (the loaded ``MarketData``), counted too.
    ``target``: ``cuda`` (default) predicts a CUDA run, adding the cuBLAS workspace and tracing the
    optimiser as fused; ``capability`` picks that workspace's default size.
    """

    def __init__(self, trainable: Trainable, extra: tuple[Any, ...] = (), target: str = "cuda",
                 capability: tuple[int, int] | None = None) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        if not isinstance(trainable, StepsForMemory):
            raise TypeError(f"{type(trainable).__name__} has no memory_step(batch_size): the memory predictor "
                            "needs one (see trainbench.models.base.TrainableBase)")
        self.trainable = trainable
        self.device = next(trainable.module.parameters()).device
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.workspace = cublas_workspace_bytes(capability) if target == "cuda" else 0
        params = list(trainable.module.parameters())
        self.params_bytes = sum(round_block(p.untyped_storage().nbytes()) for p in params)
        copier = _FakeCopier(self.mode)
        self.trainable = copier(trainable)
        for e in extra:
            copier(e)
        self.fakes = copier.fakes
        self._originals = copier.keep
        self.optimizers = _optimizers(self.trainable)
        if target == "cuda":
            for opt in self.optimizers:  # as make_optimizer does on CUDA: one fused kernel, no temporaries
                if "fused" in opt.defaults:
                    opt.defaults.update(fused=True, foreach=False)
                    for g in opt.param_groups:
                        g.update(fused=True, foreach=False)
        self._grads = 0
        for opt in self.optimizers:
            opt.register_step_pre_hook(self._grad_hook)

    def _grad_hook(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        n = sum(round_block(p.grad.untyped_storage().nbytes()) for g in opt.param_groups for p in g["params"]
                if p.grad is not None)
        self._grads = max(self._grads, n)

    def _optimizer_bytes(self) -> int:
        seen: set[int] = set()
        n = 0
        for opt in self.optimizers:
            for st in opt.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor) and v.device.type == self.device.type and \
                            id(v.untyped_storage()) not in seen:
                        seen.add(id(v.untyped_storage()))
                        n += round_block(v.untyped_storage().nbytes())
        return n

    def predict(self, batch_size: int) -> Prediction:
        """The predicted peak of training at ``batch_size`` (one micro-batch of it per accumulation step)."""
        self._grads = 0
        with self.mode:
            live = LiveBytes(self.device)
            for f in self.fakes:
                live.add(f)
            resident = live.current
            with live, sampling(PREDICT_LOOP_STEPS):  # loops over identical steps: their transients repeat
                step = self.trainable.memory_step(batch_size)
                for _ in range(TRACE_STEPS):
                    out = check_step_outputs(step(), type(self.trainable).__name__)
                    del out
            peak = live.peak
            optimizer_bytes = self._optimizer_bytes()
            for opt in self.optimizers:  # the next prediction starts from a fresh optimiser again
                opt.state.clear()
        return Prediction(batch_size=batch_size, peak_bytes=peak + self.workspace, resident_bytes=resident,
                          params_bytes=self.params_bytes, grads_bytes=self._grads, optimizer_bytes=optimizer_bytes,
                          workspace_bytes=self.workspace)


def predict_peak(trainable: Trainable, batch_size: int, extra: tuple[Any, ...] = (), target: str = "cuda",
                 capability: tuple[int, int] | None = None) -> Prediction:
    """One prediction (see :class:`Predictor`)."""
    return Predictor(trainable, extra, target, capability).predict(batch_size)
