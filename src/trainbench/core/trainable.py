"""The model contract: every hook the harness calls on a built model, the optional ones marked as such.

A model's ``build(cfg, data, ctx)`` returns an object satisfying :class:`Trainable`; the optional hooks are
protocols of their own (:class:`Evaluates`, :class:`StepsForMemory`, :class:`Describes`,
:class:`WritesArtifacts`), which the harness checks with ``isinstance`` before calling one. The training job
(``trainbench.train``), the harness, the memory fit and predictor, the workload profile and the conformance
check all name these types, so one declaration says what a model must give. Most models subclass
:class:`trainbench.models.base.TrainableBase`, which supplies ``info`` and ``write_artifacts`` and documents
the contract of ``memory_step``.

Declared here, on the ground floor, because the models and the measurement (two floors that never import
each other) both name it; torch is not imported, so tensors and modules are typed by the aliases below.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

#: A ``torch.Tensor`` (a 0-d tensor on the run's device where a hook returns one).
Tensor = Any
#: A ``torch.nn.Module``.
Module = Any


@runtime_checkable
class Trainable(Protocol):
    """One model, with its data and optimiser, ready to train on one device: what the harness calls.

    Required: the attributes and the two methods below. Optional, each a protocol of its own that the
    harness checks with ``isinstance`` before calling (``TrainableBase`` gives ``info`` and
    ``write_artifacts`` defaults): :class:`Evaluates` (``eval_epoch``), :class:`StepsForMemory`
    (``memory_step``, ``batch_limit``), :class:`Describes` (``info``), :class:`WritesArtifacts`
    (``write_artifacts``), :class:`HasContext` (``ctx``, the ``BuildContext`` the model was built with; the
    workload profile reads its switches). Optional plain attributes, read with a default by
    :func:`work_counts`: ``train_samples`` and ``env_steps`` (what an epoch holds, logged as params; None where
    they do not apply).

    Data parallelism (``trainer.distributed.nproc > 1``) is a capability a model declares on its spec
    (``ModelSpec(data_parallel=True)``, read before any rank starts); see :data:`DATA_PARALLEL` for what a
    model that declares it must do. A model that does not declare it runs on one rank, and the run says so.

    By convention every model names its own single optimiser step (forward, backward over
    ``ctx.grad_accum`` micro-batches, clip, step) ``optimizer_step``; ``train_epoch`` and ``memory_step``
    call it, so sibling models read alike.
    """

    #: The trained network(s): parameter counts, memory prediction and latency use it.
    module: Module
    #: Samples processed by one epoch (environment steps for RL, windows for supervised models).
    samples_per_epoch: int
    #: Samples per optimiser step (the resolved ``model.batch_size``).
    batch_size: int

    def train_epoch(self) -> dict[str, Tensor]:
        """Run exactly one epoch; return 0-d device tensors.

        Must contain ``loss`` (mean training loss over the epoch) and ``grad_norm`` (mean global
        gradient norm before clipping); other keys are the model's named loss parts and diagnostics
        (``loss_td``, ``loss_policy``, ``entropy``, ...), logged under their own names. A non-finite
        value anywhere ends the run as ``diverged``. No host-device synchronisation inside.
        """
        ...

    def inference(self, batch_size: int) -> Callable[[], Any]:
        """A zero-argument callable running one forward pass (eval mode, no grad) at ``batch_size``."""
        ...


@runtime_checkable
class Evaluates(Protocol):
    """Optional: a validation pass on the held-out split, timed apart from the epoch (supervised models)."""

    def eval_epoch(self) -> dict[str, Tensor]:
        """One pass over the held-out windows; 0-d device tensors, ``loss`` among them (see :func:`evaluate`)."""
        ...


@runtime_checkable
class StepsForMemory(Protocol):
    """Optional: one optimiser step on demand, for memory fitting (the ``auto`` batch search, the memory
    predictor), the gradient noise scale and the workload profile (see :class:`TrainableBase`)."""

    #: The largest ``batch_size`` the data allows; None when unlimited.
    batch_limit: int | None

    def memory_step(self, batch_size: int) -> Callable[[], dict[str, Tensor]]:
        """A zero-argument callable running one optimiser step on ``batch_size`` samples; returns the
        step's ``loss`` and ``grad_norm`` (0-d device tensors), never reading a value back."""
        ...


@runtime_checkable
class Describes(Protocol):
    """Optional: the model's facts, logged as ``model_info.<key>`` params (:data:`INFO_KEYS` first)."""

    def info(self) -> dict[str, Any]: ...


@runtime_checkable
class WritesArtifacts(Protocol):
    """Optional: model-specific files logged with a completed run."""

    def write_artifacts(self, outdir: Path) -> list[Path]: ...


@runtime_checkable
class HasContext(Protocol):
    """Optional: the ``BuildContext`` the model was built with (the workload profile reads its switches)."""

    ctx: Any


def members(protocol: type) -> tuple[str, ...]:
    """The attributes and methods ``protocol`` (one of the protocols here) declares, in declaration order."""
    declared = [k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")]
    return tuple(dict.fromkeys([*vars(protocol).get("__annotations__", {}), *declared]))


def lacks(obj: Any, protocol: type) -> list[str]:
    """What of ``protocol`` ``obj`` lacks (empty where ``isinstance(obj, protocol)``): for a message that names it."""
    return [k for k in members(protocol) if not hasattr(obj, k)]


def work_counts(trainable: Any) -> dict[str, int]:
    """What an epoch of ``trainable`` holds besides ``samples_per_epoch``: its optional plain attributes
    ``train_samples`` and ``env_steps`` (:data:`~trainbench.core.vocab.WORK_COUNTS`), those that apply (not None).
    The one place they are read by name: a protocol cannot declare an attribute a model may leave out."""
    from trainbench.core.vocab import WORK_COUNTS

    return {k: int(v) for k in WORK_COUNTS if (v := getattr(trainable, k, None)) is not None}


#: What a model that declares data parallelism (``ModelSpec(data_parallel=True)``) does when its build context
#: carries a rank (``ctx.dist``, :mod:`trainbench.measure.distributed`): (1) its training forward passes call
#: the module ``ctx.maybe_compile`` returns (DDP-wrapped there: gradients averaged over the ranks, their
#: all-reduce timed); (2) a supervised model draws each global batch of ``model.batch_size`` indices from
#: the run's generator, the same on every rank, and trains on its share (``batches(..., dist=ctx.dist)``),
#: so that N ranks reproduce one process's steps; an RL model collects its own rollouts per rank
#: (``num_envs / N`` environments, its sampling seeded ``seed + rank``) and trains on minibatches of
#: ``batch_size / N`` (CleanRL's multi-GPU PPO); (3) ``samples_per_epoch`` and the work counts stay the
#: job's (every rank's together); (4) a validation pass (:class:`Evaluates`) evaluates this rank's share of the
#: held-out windows and adds the ranks' sums (``evaluate(..., dist=ctx.dist)``), so that every rank returns the
#: one-process ``val_loss``. The harness refuses a run whose model declared it but never wrapped, or validated
#: without sharding.
DATA_PARALLEL = "ModelSpec(data_parallel=True)"

#: The harness's hooks, in the order a trainable class defines them, after ``__init__`` and its own methods:
#: the epoch, the validation pass, one step for memory fitting, a forward pass for latency, the run params,
#: the files logged with the run. A model defines those it has (``train_epoch`` and ``inference`` always).
HOOK_ORDER = ("train_epoch", "eval_epoch", "memory_step", "inference", "info", "write_artifacts")
#: The optional hooks, each with the protocol that declares it.
OPTIONAL_HOOKS = {"eval_epoch": Evaluates, "memory_step": StepsForMemory, "info": Describes,
                  "write_artifacts": WritesArtifacts}
#: The keys every model's ``info()`` returns (logged as ``model_info.<key>``), None where one does not apply:
#: the trainable parameters, and the training and held-out windows of a supervised model (an RL model has
#: none: it samples an environment). A model adds its own facts beside them.
INFO_KEYS = ("num_params", "train_windows", "val_windows")
