"""The workload profile of a run: what one epoch asks of a device, independent of the device it was measured on.

Measured once per run, after the measured epochs (never inside a timed epoch), by running a few steps of one more
``train_epoch`` (and ``eval_epoch``) under two dispatch-level instruments:

- ``torch.utils.flop_counter.FlopCounterMode`` with the formulas torch lacks
  (:mod:`trainbench.measure.op_formulas`: recurrent layers, the CPU flash attention): the FLOPs of matmuls,
  attention, convolutions and recurrent layers (the convolution backward counted as twice the forward, as
  :func:`trainbench.measure.flops.count_flops`);
- :class:`OpTrace` (a ``TorchDispatchMode``): every ATen op that runs a kernel (views, ``empty`` and
  aliases are metadata only), with the bytes of its tensor inputs and outputs, its FLOPs from the same
  formulas, its op class, the dtype it computed in and what CUDA autocast would do to it
  (:mod:`trainbench.measure.autocast_policy`).

**Booked as the target would run it** (a CUDA GPU), not as the measuring device ran it:

- *Recurrent layers* (``mkldnn_rnn_layer``, ``_cudnn_rnn`` and their backward) are split into their
  independent GEMMs (kernels) and a dependent *chain* of ``T`` steps per layer and direction
  (:func:`trainbench.measure.op_formulas.rnn_op_work`), so that a GPU model can give each step a floor.
- *The optimiser* is booked as the CUDA implementation the run would use there: Adam/AdamW as fused AdamW
  (one ``_foreach_add_`` of the step counters and one ``_fused_adamw_`` per parameter group, launched in
  multi-tensor chunks: at most :data:`FUSED_TENSORS_PER_LAUNCH` tensors and :data:`FUSED_BLOCKS_PER_LAUNCH`
  chunks of :data:`FUSED_CHUNK` elements per launch, torch's ``multi_tensor_apply`` limits for four tensor
  lists), reading params, grads, ``exp_avg`` and ``exp_avg_sq`` and writing three of them
  (:data:`ADAMW_BYTES_PER_ELEMENT` bytes and :data:`ADAMW_FLOPS_PER_ELEMENT` FLOPs per fp32 element). What the
  measuring device dispatched inside ``optimizer.step`` (a CPU's foreach AdamW: many small ops and a
  ``_local_scalar_dense`` per parameter) is dropped. Any other optimiser is booked as measured.
- *Host syncs*: ``_local_scalar_dense`` (``.item()``, ``bool(t)``) is counted in ``host.syncs`` and is no
  kernel.
- *Dropout*: the CPU decomposition (``bernoulli_`` of a mask, ``div_`` by the keep probability, ``mul``) is
  booked as the one fused ``native_dropout`` kernel CUDA runs (input and output at their dtype, the mask one
  byte per element), and its backward ``mul`` by the mask as ``native_dropout_backward``.

**Completeness**: kernels that bypass the dispatcher (Triton kernels such as mamba_ssm's SSD scan, CUDA
graph replays, ``torch.compile``'s generated code) record nothing here. The caller names each such cause
(:func:`bypass_reasons`); a profile with any is ``complete: false`` with the reasons, and the analysis does
not project from it.

The artifact (``workload_profile.json``, :func:`profile_artifact`), schema 1::

    {"schema": 1, "profiled_on": "cpu" | "<cuda device name>", "precision": "fp32" | "bf16" | "fp16",
     "complete": bool, "incomplete_reasons": [...],
     "optimizer": {"measured_impl": "foreach" | "fused" | "for-loop" | null, "booked_as": ... | null},
     "kernels": [{"cls", "dtype", "autocast", "count", "flops", "bytes"}, ...],
     "chains": [{"what", "cls", "dtype", "autocast", "count", "steps", "flops_per_step", "bytes_per_step"}],
     "host": {"ops": <eager kernel-launching ops>, "syncs": <host syncs>}}

Kernels are grouped by (cls, dtype, autocast, round(log2 FLOPs per kernel), round(log2 bytes per kernel));
``flops`` and ``bytes`` are a group's totals. The work of a chain is in ``chains`` only, never also in
``kernels``: an epoch's work is the kernels' plus every chain's ``count × steps × per step``. ``dtype`` is
the floating dtype an op computed in, or ``other`` for ops on integer/bool tensors only.

Op classes: ``matmul_attention`` (GEMMs, attention, recurrent layers), ``conv``, ``scan`` (cumulative ops
and selective-scan kernels), ``optimizer`` (the optimiser's step and ``_foreach_*``/``_fused_*`` ops such as
gradient clipping) and ``elementwise_norm`` (the rest: activations, norms, reductions, copies, indexing,
losses).

**A few steps, scaled** (:func:`sampled_trace`): an epoch is what is timed, and the harness requires it to
do fixed work, so its loops over identical steps (:func:`trainbench.core.sampling.steps` for an RL epoch's
environment steps, its GAE recursion and its updates, ``batches`` for minibatches, ``evaluate`` for the
validation batches) run :data:`SAMPLED_STEPS` steps in their first run and :data:`LATER_STEPS` in each later
one; what the second step booked is added once for each step left out, and what runs once per epoch (the
epoch's means, a smaller last batch) is traced as it is. The totals equal the whole epoch's (a test compares
them for every built-in model, and the FLOPs with torch's ``FlopCounterMode``), at a fraction of its cost; a
pass without such a loop, or whose loops were nested or of changing length, is traced whole. ``method``
(logged as the tag ``workload_profile_method``) says which. One dispatch mode does it all: :class:`OpTrace`
also keeps ``FlopCounterMode``'s count per op (``counts``), so each op pays one Python hook, not two.

**Fake or real tensors** (``profile_epoch(fake=...)``): on fake tensors (a copy of the model, as the memory
predictor makes it: shapes, no storage) a step costs the hook's time per op whatever the sizes; on real ones
its kernels. The run picks the cheaper (``trainbench.train``: a fake step timed by its memory prediction
against a real step of the measured epoch): on a CPU at the small sizes a real step (an op ~15 µs against
~0.2 ms on fakes), at reference sizes with large batches the fakes. Where an op needs values (a
data-dependent shape, a host read) the fakes fail and the real model is traced; ``mode`` (the tag
``workload_profile_mode``) says which and why. On fakes the FLOPs equal the real trace's and the bytes are
within 0.5%: a few ops take another path on fakes (``one_hot`` checks its classes with a host read on real
tensors; a few ops run decomposed). The aggregate
``workload.<class>.<dtype>.<flops|bytes|ops>`` metrics (:func:`profile_metrics`) are kept for the MLflow UI
and older readers; they sum the same normalised kernels and chains (a chain step counted as one op).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainbench.core.trainable import Describes, Evaluates, HasContext, Trainable
from trainbench.core.vocab import WORKLOAD_PROFILE_KEYS, WORKLOAD_PROFILE_SCHEMA, Summary, workload_metric
from trainbench.measure import autocast_policy
from trainbench.measure.op_formulas import FORMULAS, flop_mapping, rnn_op_work

SCHEMA = WORKLOAD_PROFILE_SCHEMA
CLASSES = ("matmul_attention", "conv", "elementwise_norm", "scan", "optimizer")

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "mv", "addmv",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention_backward",
           "_scaled_dot_product_cudnn_attention_backward",
           "_scaled_dot_product_flash_attention_for_cpu_backward", "_efficient_attention_forward",
           "_efficient_attention_backward", "_flash_attention_forward", "_flash_attention_backward",
           "_scaled_dot_product_fused_attention_overrideable",
           "_scaled_dot_product_fused_attention_overrideable_backward", "mkldnn_rnn_layer",
           "mkldnn_rnn_layer_backward", "_cudnn_rnn", "_cudnn_rnn_backward"}
_CONV = {"convolution", "convolution_backward", "_convolution", "conv1d", "conv2d", "cudnn_convolution",
         "mkldnn_convolution", "_slow_conv2d_forward", "_slow_conv2d_backward"}
_SCAN = {"cumsum", "cumsum_", "cumprod", "cumprod_", "logcumsumexp", "cummax", "cummin", "_cummax_helper",
         "_cummin_helper", "_logcumsumexp"}
#: Ops that run no kernel: allocation and metadata.
_NO_KERNEL = {"device", "empty", "empty_like", "empty_strided", "detach", "alias", "lift_fresh", "lift_fresh_copy",
              "_unsafe_view", "set_", "resize_", "_reshape_alias", "sym_size", "sym_stride", "sym_numel",
              "is_same_size", "_has_compatible_shallow_copy_type", "record_stream",
              "_record_function_enter", "_record_function_enter_new", "_record_function_exit"}
#: Host syncs: the host waits for the device; no kernel of their own.
_SYNCS = {"_local_scalar_dense"}

#: torch's multi_tensor_apply limits for four tensor lists (params, grads, exp_avg, exp_avg_sq): tensors and
#: chunks per launch, elements per chunk; one tensor list (the step counters): 110 tensors per launch.
FUSED_TENSORS_PER_LAUNCH = 36
FUSED_BLOCKS_PER_LAUNCH = 320
FUSED_CHUNK = 65536
STEP_TENSORS_PER_LAUNCH = 110
#: Fused AdamW per element (fp32): reads param, grad, exp_avg, exp_avg_sq (16 B), writes param, exp_avg,
#: exp_avg_sq (12 B); amsgrad reads and writes max_exp_avg_sq too (+8 B).
ADAMW_BYTES_PER_ELEMENT = 28
#: Fused AdamW FLOPs per element: decoupled weight decay p *= 1 - lr*wd (1); exp_avg = b1*m + (1-b1)*g (3);
#: exp_avg_sq = b2*v + (1-b2)*g*g (4); denom = sqrt(v)/sqrt(bias_correction2) + eps (3);
#: p -= step_size * exp_avg / denom (3).
ADAMW_FLOPS_PER_ELEMENT = 14

INCOMPLETE_COMPILE = "kernels bypassed the dispatcher: torch.compile (trainer.compile=true)"
INCOMPLETE_CUDA_GRAPHS = "kernels bypassed the dispatcher: cuda graphs (the update is replayed as one graph)"
INCOMPLETE_TRITON = "kernels bypassed the dispatcher: triton kernels ({what})"


def op_class(name: str, in_optimizer: bool) -> str:
    """The class of an ATen op (its overload packet's name, e.g. ``mm``)."""
    if name in _MATMUL:
        return "matmul_attention"
    if name in _CONV:
        return "conv"
    if name in _SCAN or "scan" in name or "ssd" in name:
        return "scan"
    if in_optimizer or name.startswith(("_foreach_", "_fused_")):
        return "optimizer"
    return "elementwise_norm"


def autocast_of(name: str, cls: str) -> str:
    """What CUDA autocast does to the op: the optimiser's ops always run on the fp32 parameters."""
    return autocast_policy.FP32 if cls == "optimizer" else autocast_policy.policy(name)


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.numel() * t.element_size()
    except Exception:  # noqa: BLE001 - sparse/odd tensors: no bytes
        return 0


def _dtype(tensors: Iterable[torch.Tensor]) -> str:
    for t in tensors:
        if t.is_floating_point():
            return _DTYPES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    return "other"


def _bin(x: float) -> int:
    return round(math.log2(x)) if x > 0 else -1


def optimizer_impl(opt: torch.optim.Optimizer) -> str:
    """``fused``, ``foreach`` or ``for-loop``: the implementation ``opt.step`` runs (torch's own default
    where the flags are unset)."""
    d = opt.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") is not None:
        return "foreach" if d["foreach"] else "for-loop"
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        params = [p for g in opt.param_groups for p in g["params"]]
        _, foreach = _default_to_fused_or_foreach(params, bool(d.get("differentiable")), use_fused=False)
    except Exception:  # noqa: BLE001 - a torch without the helper: its documented default off CUDA
        foreach = False
    return "foreach" if foreach else "for-loop"


def books_as_fused(opt: torch.optim.Optimizer) -> bool:
    """Adam and AdamW are booked as fused AdamW on CUDA (what ``trainer.optimizer_impl=auto`` runs there)."""
    return isinstance(opt, torch.optim.Adam | torch.optim.AdamW) and not opt.defaults.get("differentiable")


def fused_launches(numels: list[int]) -> list[int]:
    """Elements covered by each launch of a fused multi-tensor kernel over tensors of ``numels`` elements."""
    launches, elems, tensors, blocks = [], 0, 0, 0
    for n in numels:
        tensors += 1
        chunks = max(1, math.ceil(n / FUSED_CHUNK))
        for c in range(chunks):
            blocks += 1
            elems += min(FUSED_CHUNK, n - c * FUSED_CHUNK)
            last_chunk = c == chunks - 1
            if blocks == FUSED_BLOCKS_PER_LAUNCH or (last_chunk and tensors == FUSED_TENSORS_PER_LAUNCH):
                launches.append(elems)
                elems, blocks = 0, 0
                if last_chunk:
                    tensors = 0
                else:
                    tensors = 1  # the tensor's remaining chunks start the next launch
    if blocks:
        launches.append(elems)
    return launches


class OpTrace(TorchDispatchMode):
    """Books every ATen op dispatched inside it as the target would run it (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry, shape_wrapper

        self.registry = {**flop_registry, **{k: shape_wrapper(v) for k, v in flop_mapping().items()}}
        self.in_optimizer = 0
        self.dropping_optimizer = 0  # > 0 inside a step booked as another implementation
        self.kernels: dict[tuple[Any, ...], list[int]] = {}  # key -> [count, flops, bytes]
        self.chains: Counter[tuple[Any, ...]] = Counter()
        self.rows: dict[tuple[str, str], dict[str, int]] = {}  # legacy (class, dtype) -> flops, bytes, ops
        self.by_op: Counter[str] = Counter()  # measured: every kernel-running op as dispatched
        self.host_ops = 0
        self.syncs = 0
        self.new_formula_flops = 0
        self.impls: Counter[str] = Counter()
        self.booked: Counter[str] = Counter()
        #: FLOPs per op (its overload packet) by the formulas alone, as ``FlopCounterMode`` counts them: every
        #: dispatched op with a formula, booked or dropped (``flops`` of the profile sums these).
        self.counts: dict[Any, int] = {}
        self._masks: dict[Any, Any] = {}  # _where(mask) -> weakref of a dropout mask
        self._pending: dict[Any, tuple[Any, list[tuple[Any, ...]]]] = {}  # bernoulli_ masks not yet used

    # ------------------------------------------------------------------ booking
    def add_kernel(self, cls: str, dtype: str, autocast: str, flops: int, nbytes: int, count: int = 1,
                   host_ops: int = 1) -> None:
        per_f, per_b = flops / max(count, 1), nbytes / max(count, 1)
        key = (cls, dtype, autocast, _bin(per_f), _bin(per_b))
        k = self.kernels.setdefault(key, [0, 0, 0])
        k[0] += count
        k[1] += int(flops)
        k[2] += int(nbytes)
        self._row(cls, dtype, flops, nbytes, count)
        self.host_ops += host_ops

    def add_chain(self, what: str, cls: str, dtype: str, autocast: str, count: int, steps: int,
                  flops_per_step: int, bytes_per_step: int) -> None:
        self.chains[(what, cls, dtype, autocast, steps, flops_per_step, bytes_per_step)] += count
        self._row(cls, dtype, count * steps * flops_per_step, count * steps * bytes_per_step, count * steps)

    def _row(self, cls: str, dtype: str, flops: float, nbytes: float, ops: int) -> None:
        row = self.rows.setdefault((cls, dtype), {"flops": 0, "bytes": 0, "ops": 0})
        row["flops"] += int(flops)
        row["bytes"] += int(nbytes)
        row["ops"] += int(ops)

    def book_fused_adamw(self, opt: torch.optim.Optimizer) -> None:
        """The kernels fused AdamW runs for one ``opt.step()`` (see the module doc)."""
        for group in opt.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            by_dtype: dict[str, list[int]] = {}
            for p in params:
                by_dtype.setdefault(_DTYPES.get(p.dtype, "fp32"), []).append(p.numel())
            extra = 8 if group.get("amsgrad") else 0
            for dt, numels in by_dtype.items():
                scale = (_elem(dt) / 4)
                steps = len(numels)
                n_step_launches = math.ceil(steps / STEP_TENSORS_PER_LAUNCH)
                self.add_kernel("optimizer", dt, autocast_policy.FP32, steps, 8 * steps, count=n_step_launches)
                launches = fused_launches(numels)
                for i, elems in enumerate(launches):
                    self.add_kernel("optimizer", dt, autocast_policy.FP32, ADAMW_FLOPS_PER_ELEMENT * elems,
                                    int((ADAMW_BYTES_PER_ELEMENT + extra) * scale * elems),
                                    host_ops=1 if i == 0 else 0)

    # ------------------------------------------------------------------ dispatch
    def flops(self, func: Any, args: Any, kwargs: Any, out: Any) -> int:
        packet = func._overloadpacket
        if packet is torch.ops.aten.convolution_backward:
            from torch.utils.flop_counter import conv_flop_count

            grad_out, x, w = args[0], args[1], args[2]
            mask = args[10] if len(args) > 10 else kwargs.get("output_mask", [True, True, True])
            fwd = conv_flop_count(list(x.shape), list(w.shape), list(grad_out.shape), bool(args[7]))
            return int(fwd * (int(bool(mask[0])) + int(bool(mask[1]))))
        f = self.registry.get(packet)
        if f is None:
            return 0
        try:
            return int(f(*args, **kwargs, out_val=out))
        except Exception:  # noqa: BLE001 - a formula that does not fit these args: count no FLOPs
            return 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        counted = self.registry.get(packet)
        if counted is not None:  # the flop counter's count (one dispatch mode does both: half the cost per op)
            self.counts[packet] = self.counts.get(packet, 0) + int(counted(*args, **kwargs, out_val=out))
        name = packet.__name__
        if getattr(func, "is_view", False) or name in _NO_KERNEL:
            return out
        if self.dropping_optimizer:  # booked as the target's implementation when the step began
            return out
        if name in _SYNCS:
            self.syncs += 1
            self.by_op[name] += 1
            return out
        self.by_op[name] += 1
        ins = _tensors((args, tuple(kwargs.values())), [])
        outs = _tensors(out, [])
        cls = op_class(name, self.in_optimizer > 0)
        dtype = _dtype(ins + outs)
        work = rnn_op_work(func._overloadpacket, args, kwargs)
        if work is not None:
            self.new_formula_flops += work.flops
            lowered = autocast_policy.LOWER
            for i, k in enumerate(work.kernels):
                self.add_kernel(cls, dtype, lowered, k.flops, k.bytes, host_ops=1 if i == 0 else 0)
            self.add_chain(work.what, cls, dtype, lowered, work.chains, work.steps, work.step.flops, work.step.bytes)
            return out
        if self._dropout(name, args, ins, outs, dtype):
            return out
        flops = self.flops(func, args, kwargs, out)
        if func._overloadpacket in FORMULAS:
            self.new_formula_flops += flops
        self.add_kernel(cls, dtype, autocast_of(name, cls), flops,
                        sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs))
        return out

    # ------------------------------------------------------------------ dropout
    def _dropout(self, name: str, args: Any, ins: list[torch.Tensor], outs: list[torch.Tensor], dtype: str) -> bool:
        """Book the CPU dropout decomposition as CUDA's fused dropout; True when this op was absorbed."""
        if name == "bernoulli_" and args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
            mask = args[0]
            self._pending[_where(mask)] = (weakref.ref(mask), [(name, ins, outs, dtype)])
            return True
        if name == "div_" and args and isinstance(args[0], torch.Tensor) and self._is(self._pending, args[0]):
            self._pending[_where(args[0])][1].append((name, ins, outs, dtype))
            return True
        if name != "mul" or len(ins) != 2:
            return False
        for i, t in enumerate(ins):
            fresh = self._is(self._pending, t)
            if fresh or self._is(self._masks, t):
                other = ins[1 - i]
                mask_bytes = t.numel()  # a bool mask, one byte per element
                what = "native_dropout" if fresh else "native_dropout_backward"
                self.add_kernel("elementwise_norm", _dtype([other]), autocast_policy.policy(what), 0,
                                _nbytes(other) + sum(_nbytes(o) for o in outs) + mask_bytes)
                self.by_op[f"{what} (booked)"] += 1
                if fresh:
                    ref, _ = self._pending.pop(_where(t))
                    self._masks[_where(t)] = ref
                return True
        return False

    @staticmethod
    def _is(table: dict[Any, Any], t: torch.Tensor) -> bool:
        entry = table.get(_where(t))
        if entry is None:
            return False
        ref = entry[0] if isinstance(entry, tuple) else entry
        held = ref()
        return held is not None and held.shape == t.shape

    def flush(self) -> None:
        """Book the ``bernoulli_`` masks no ``mul`` used as they ran (a genuine random draw)."""
        for _, held in list(self._pending.values()):
            for _name, ins, outs, dtype in held:
                self.add_kernel("elementwise_norm", dtype, autocast_policy.PROMOTE, 0,
                                sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs))
        self._pending.clear()


def _where(t: torch.Tensor) -> tuple[int, int]:
    """Where a tensor's data starts: its storage and offset (``data_ptr``, which fake tensors lack)."""
    return t.untyped_storage()._cdata, t.storage_offset()


def _tensors(x: Any, into: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors in an op's arguments or outputs (nested tuples, lists, dict values), in order: what
    ``tree_flatten`` finds, at a fraction of its cost per op."""
    if isinstance(x, torch.Tensor):
        into.append(x)
    elif isinstance(x, tuple | list):
        for v in x:
            _tensors(v, into)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, into)
    return into


def _elem(dtype: str) -> int:
    return {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}.get(dtype, 4)


@contextlib.contextmanager
def _optimizer_marker(trace: OpTrace) -> Iterator[None]:
    """Mark ops dispatched inside any ``optimizer.step`` (torch's global step hooks); book Adam/AdamW as
    fused AdamW and drop what the measuring device dispatched for them."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    booked: list[bool] = []

    def pre(opt: Any, *_: Any) -> None:
        trace.in_optimizer += 1
        trace.impls[optimizer_impl(opt)] += 1
        fused = books_as_fused(opt)
        booked.append(fused)
        if fused:
            trace.booked["fused"] += 1
            trace.book_fused_adamw(opt)
            trace.dropping_optimizer += 1
        else:
            trace.booked[optimizer_impl(opt)] += 1

    def post(*_: Any) -> None:
        trace.in_optimizer = max(0, trace.in_optimizer - 1)
        if booked and booked.pop():
            trace.dropping_optimizer = max(0, trace.dropping_optimizer - 1)

    h1, h2 = register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


def device_name(device: torch.device | None) -> str:
    """``cpu``, or the CUDA device's name (``NVIDIA A100-SXM4-80GB``)."""
    if device is not None and device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu" if device is None else device.type


def _trace(fn: Callable[[], Any], device: torch.device | None,
           on_start: Callable[[OpTrace], None] | None = None) -> tuple[OpTrace, dict[Any, int]]:
    """Run ``fn()`` once under the instruments: its :class:`OpTrace` and the flop counter's counts per op.
    ``on_start(trace)`` is called once the instrument is on."""
    trace = OpTrace()
    with trace, _optimizer_marker(trace):
        if on_start is not None:
            on_start(trace)
        fn()
    trace.flush()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return trace, dict(trace.counts)


def _snapshot(trace: OpTrace) -> tuple[OpTrace, dict[Any, int]]:
    """A copy of what ``trace`` booked so far, and its flop counts."""
    snap = OpTrace.__new__(OpTrace)
    snap.kernels = {k: list(v) for k, v in trace.kernels.items()}
    snap.chains = Counter(trace.chains)
    snap.rows = {k: dict(v) for k, v in trace.rows.items()}
    snap.by_op, snap.impls, snap.booked = Counter(trace.by_op), Counter(trace.impls), Counter(trace.booked)
    snap.host_ops, snap.syncs, snap.new_formula_flops = trace.host_ops, trace.syncs, trace.new_formula_flops
    snap.counts = dict(trace.counts)
    return snap, dict(trace.counts)


def _scale_add(into: dict[Any, Any], src: dict[Any, Any], w: int) -> None:
    """``into += w * src`` for counters ({key: int}) and tables ({key: [ints]} or {key: {name: int}})."""
    for k, v in src.items():
        if isinstance(v, list):
            row = into.setdefault(k, [0] * len(v))
            for i, x in enumerate(v):
                row[i] += w * x
        elif isinstance(v, dict):
            row = into.setdefault(k, dict.fromkeys(v, 0))
            for name, x in v.items():
                row[name] = row.get(name, 0) + w * x
        else:
            into[k] = into.get(k, 0) + w * v


def combine(parts: list[tuple[OpTrace, dict[Any, int]]], weights: list[int]) -> tuple[OpTrace, dict[Any, int]]:
    """The trace ``sum(w * part)`` of traced parts (integer weights, some negative: a linear extrapolation);
    raises ValueError when a total comes out negative (the parts were not alike)."""
    out, counts = OpTrace(), {}
    for (trace, c), w in zip(parts, weights, strict=True):
        _scale_add(out.kernels, trace.kernels, w)
        _scale_add(out.chains, trace.chains, w)
        _scale_add(out.rows, trace.rows, w)
        _scale_add(out.by_op, trace.by_op, w)
        _scale_add(out.impls, trace.impls, w)
        _scale_add(out.booked, trace.booked, w)
        _scale_add(counts, c, w)
        out.host_ops += w * trace.host_ops
        out.syncs += w * trace.syncs
        out.new_formula_flops += w * trace.new_formula_flops
    values = [x for v in out.kernels.values() for x in v] + list(out.chains.values()) + list(counts.values()) \
        + [x for r in out.rows.values() for x in r.values()] + [out.host_ops, out.syncs]
    if any(x < 0 for x in values):
        raise ValueError("the sampled steps were not alike: a scaled total came out negative")
    for table in (out.kernels, out.chains, out.by_op, out.impls, out.booked):
        for k in [k for k, v in table.items() if v == 0 or (isinstance(v, list) and not any(v))]:
            del table[k]
    return out, counts


def profile_callable(fn: Callable[[], Any], device: torch.device | None = None, precision: str = "fp32",
                     incomplete_reasons: Iterable[str] = ()) -> dict[str, Any]:
    """The workload profile of running ``fn()`` once (see the module doc): the schema-1 keys of the artifact
    plus the aggregates (``flops``, ``bytes``, ``ops``, ``classes``) and what was measured (``top_ops``)."""
    return _result(*_trace(fn, device), device, precision, incomplete_reasons)


def counted_flops(counts: dict[Any, int]) -> int:
    """The FLOPs of per-op counts (``FlopCounterMode``'s, or :class:`OpTrace`'s ``counts``): a convolution's
    backward counted as twice its forward, as :func:`trainbench.measure.flops.count_flops`."""
    conv_fwd = int(counts.get(torch.ops.aten.convolution, 0))
    counted = sum(int(v) for k, v in counts.items() if k is not torch.ops.aten.convolution_backward)
    if torch.ops.aten.convolution_backward in counts:
        counted += 2 * conv_fwd
    return counted


def _result(trace: OpTrace, counts: dict[Any, int], device: torch.device | None, precision: str,
            incomplete_reasons: Iterable[str]) -> dict[str, Any]:
    counted = counted_flops(counts)
    classes: dict[str, dict[str, Any]] = {}
    for (cls, dt), row in sorted(trace.rows.items()):
        c = classes.setdefault(cls, {"flops": 0, "bytes": 0, "ops": 0, "by_dtype": {}})
        c["by_dtype"][dt] = {k: int(v) for k, v in row.items()}
        for k in ("flops", "bytes", "ops"):
            c[k] += int(row[k])
    reasons = list(dict.fromkeys(incomplete_reasons))
    measured = trace.impls.most_common(1)[0][0] if trace.impls else None
    booked = trace.booked.most_common(1)[0][0] if trace.booked else None
    return {
        "schema": SCHEMA,
        "profiled_on": device_name(device),
        "precision": precision,
        "complete": not reasons,
        "incomplete_reasons": reasons,
        "optimizer": {"measured_impl": measured, "booked_as": booked},
        "kernels": [{"cls": c, "dtype": d, "autocast": a, "count": v[0], "flops": v[1], "bytes": v[2]}
                    for (c, d, a, _, _), v in sorted(trace.kernels.items(), key=lambda kv: tuple(map(str, kv[0])))],
        "chains": [{"what": w, "cls": c, "dtype": d, "autocast": a, "count": n, "steps": s, "flops_per_step": f,
                    "bytes_per_step": b} for (w, c, d, a, s, f, b), n in sorted(trace.chains.items())],
        "host": {"ops": trace.host_ops, "syncs": trace.syncs},
        # aggregates and what was measured (not in the artifact)
        "flops": counted,
        "new_formula_flops": trace.new_formula_flops,
        "bytes": sum(c["bytes"] for c in classes.values()),
        "ops": sum(c["ops"] for c in classes.values()),
        "classes": classes,
        "top_ops": dict(trace.by_op.most_common(25)),
        "device": None if device is None else device.type,
        "note": ("FLOPs: torch.utils.flop_counter plus trainbench.measure.op_formulas (matmul, conv, attention, "
                 "recurrent layers; other elementwise ops not counted); bytes: tensor inputs + outputs of every "
                 "kernel, booked as CUDA would run it; ops: kernels, a recurrent step counted as one"),
    }


#: The keys of the artifact ``workload_profile.json`` (schema 1).
ARTIFACT_KEYS = WORKLOAD_PROFILE_KEYS


def profile_artifact(profile: dict[str, Any]) -> dict[str, Any]:
    """The ``workload_profile.json`` artifact of a profile: its schema-1 keys only."""
    return {k: profile[k] for k in ARTIFACT_KEYS}


def incomplete_artifact(reasons: Iterable[str], device: torch.device | None, precision: str) -> dict[str, Any]:
    """The artifact of a run whose epoch was not profiled because its kernels bypass the dispatcher."""
    return {"schema": SCHEMA, "profiled_on": device_name(device), "precision": precision, "complete": False,
            "incomplete_reasons": list(dict.fromkeys(reasons)),
            "optimizer": {"measured_impl": None, "booked_as": None}, "kernels": [], "chains": [],
            "host": {"ops": 0, "syncs": 0}}


def bypass_reasons(trainable: Trainable, compile: bool = False, cuda_graphs: bool | None = None) -> list[str]:
    """Why kernels of this run would bypass the dispatcher (empty when none do): ``trainer.compile``, CUDA
    graphs (the build context's resolved flag, or the model's ``info()["cuda_graphs"]``) and Triton kernels (a
    model whose ``info()["kernel_resolved"]`` or ``info()["kernel"]`` is ``triton``)."""
    try:
        info = trainable.info() if isinstance(trainable, Describes) else {}
    except Exception:  # noqa: BLE001 - a model whose info fails: judge by the flags alone
        info = {}
    reasons = []
    if compile:
        reasons.append(INCOMPLETE_COMPILE)
    ctx = trainable.ctx if isinstance(trainable, HasContext) else None
    graphs = cuda_graphs if cuda_graphs is not None else bool(ctx is not None and ctx.cuda_graphs)
    if graphs or info.get("cuda_graphs") is True:
        reasons.append(INCOMPLETE_CUDA_GRAPHS)
    kernel = info.get("kernel_resolved", info.get("kernel"))
    if isinstance(kernel, str) and kernel.lower() == "triton":
        reasons.append(INCOMPLETE_TRITON.format(what=f"{type(trainable).__name__}: kernel=triton"))
    return reasons


#: Steps run of each loop over identical steps when an epoch is sampled: the second step's work (from its
#: start to the loop's end) is one step of the loop; the first may differ (it starts the epoch's sums).
SAMPLED_STEPS = 2
#: Steps run in each later run of a loop that runs more than once per pass (PPO's minibatch loop, once per
#: update epoch): its first step, which may differ as the first run's did; the rest are the first run's step.
LATER_STEPS = 1


def sampled_trace(fn: Callable[[], Any], device: torch.device | None) -> tuple[OpTrace, dict[Any, int], str]:
    """The trace of ``fn()`` (one epoch's pass) from a few of its steps, scaled (the module doc): ``fn`` runs
    once with every loop over identical steps (:func:`trainbench.core.sampling.steps`, ``batches``,
    ``evaluate``) cut to :data:`SAMPLED_STEPS` steps in its first run and :data:`LATER_STEPS` in each later
    one; what was booked from the second step's start to the loop's end (in its first run) is one step of
    that loop (the first step may differ: it starts the epoch's sums), and the pass is what ran plus that
    step once for each step left out. Exact where the steps of a loop do the same work, which the harness requires of an
    epoch. Returns the trace, the flop counts and how it was made (``whole`` where ``fn`` has no such loop,
    a loop's runs had different lengths, loops were nested, or the totals were not consistent: then ``fn``
    ran whole)."""
    from trainbench.core.sampling import sampling

    live: list[Any] = []
    marks: dict[str, list[tuple[OpTrace, dict[Any, int]]]] = {}  # a site's first run: 2nd step's start, end
    active: list[str] = []
    nested: list[str] = []

    def on_step(site: str, i: int) -> None:
        if i == 0:
            if active:
                nested.append(site)
            active.append(site)
        if i == SAMPLED_STEPS - 1 and site not in marks:
            marks[site] = [_snapshot(live[0])]

    def on_end(site: str) -> None:
        if active and active[-1] == site:
            active.pop()
        if site in marks and len(marks[site]) == 1:
            marks[site].append(_snapshot(live[0]))

    with sampling(SAMPLED_STEPS, on_step, on_end, later=LATER_STEPS) as seen:
        run = _trace(fn, device, live.append)
    if not seen.full:
        return (*_trace(fn, device), "whole (no loop over identical steps)")
    if nested:
        return (*_trace(fn, device), "whole (nested loops over steps)")
    if any(len(set(ns)) != 1 for ns in seen.full.values()):
        return (*_trace(fn, device), "whole (a loop ran with different lengths)")
    parts, weights, said = [run], [1], []
    for site, ns in sorted(seen.full.items()):
        n, calls = ns[0], len(ns)
        ran = sum(seen.ran(site, r) for r in range(calls))
        said.append(f"{site} {ran} of {n * calls}" + (f" ({n} x {calls})" if calls > 1 else ""))
        if ran == n * calls:
            continue
        start, end = marks[site]  # a loop with steps left out ran two in its first run
        parts += [end, start]  # one step: the last sampled one (the first may set up what the others reuse)
        weights += [n * calls - ran, -(n * calls - ran)]
    try:
        trace, counts = combine(parts, weights)
    except ValueError as e:
        return (*_trace(fn, device), f"whole ({e})")
    return trace, counts, "steps scaled (" + ", ".join(said) + ")"


def _fake_passes(trainable: Trainable) -> tuple[Any, list[tuple[str, Callable[[], Any]]]]:
    """A copy of ``trainable`` whose tensors are fakes (the memory predictor's copy: its parameters, optimiser
    state, data and generators left as they were), its fake mode, and the copy's passes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainbench.measure.predict import _FakeCopier

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = _FakeCopier(mode)(trainable)
    return mode, _passes(fake)


def _passes(trainable: Trainable) -> list[tuple[str, Callable[[], Any]]]:
    passes: list[tuple[str, Callable[[], Any]]] = [("train_epoch", trainable.train_epoch)]
    return passes + ([("eval_epoch", trainable.eval_epoch)] if isinstance(trainable, Evaluates) else [])


def profile_epoch(trainable: Trainable, device: torch.device, precision: str = "fp32",
                  incomplete_reasons: Iterable[str] = (), scaled: bool = True, fake: bool = False) -> dict[str, Any]:
    """The workload profile of one epoch of ``trainable``: ``train_epoch`` and, for a model with a validation
    pass, ``eval_epoch`` too, since the analysis projects the epoch time of both (training + validation).
    ``incomplete_reasons`` (:func:`bypass_reasons`) mark it incomplete. ``scaled``: each pass from a few of
    its steps (:func:`sampled_trace`); else the whole epoch is run under the instruments. ``fake``: on a copy
    of ``trainable`` whose tensors are fakes (shapes only: a step costs the instruments' time, not its
    kernels'), falling back to the real ``trainable`` where an op needs the values (a data-dependent shape,
    a host read). ``mode`` says which tensors were traced (and why real where fakes were asked for);
    ``method`` says it too, then how each pass was traced."""
    mode = "real tensors"
    if fake:
        try:
            fake_mode, passes = _fake_passes(trainable)
            with fake_mode:
                out = _profile_passes(passes, device, precision, incomplete_reasons, scaled)
            mode = "fake tensors"
        except Exception as e:  # noqa: BLE001 - ops that need values: trace the real model instead
            why = " ".join(str(e).split())[:200]
            mode = f"real tensors (fake tensors failed: {type(e).__name__}: {why})"
    if mode != "fake tensors":
        out = _profile_passes(_passes(trainable), device, precision, incomplete_reasons, scaled)
    out["mode"] = mode
    out["method"] = f"{mode}; {out['method']}"
    return out


def _profile_passes(passes: list[tuple[str, Callable[[], Any]]], device: torch.device, precision: str,
                    incomplete_reasons: Iterable[str], scaled: bool) -> dict[str, Any]:
    if not scaled:
        def epoch() -> None:
            for _, fn in passes:
                fn()

        out = profile_callable(epoch, device, precision, incomplete_reasons)
        out["method"] = "whole epoch"
    else:
        traced = [sampled_trace(fn, device) for _, fn in passes]
        trace, counts = combine([(t, c) for t, c, _ in traced], [1] * len(traced))
        out = _result(trace, counts, device, precision, incomplete_reasons)
        out["method"] = "; ".join(f"{name}: {how}" for (name, _), (_, _, how) in zip(passes, traced, strict=True))
    out["scope"] = "one train_epoch + eval_epoch" if len(passes) > 1 else "one train_epoch"
    return out


def profile_metrics(profile: dict[str, Any]) -> dict[str, float]:
    """Run metrics: totals plus ``workload.<class>.<dtype>.{flops,bytes,ops}`` (what older readers read)."""
    m = {Summary.WORKLOAD_FLOPS_PER_EPOCH: float(profile["flops"]),
         Summary.WORKLOAD_BYTES_PER_EPOCH: float(profile["bytes"]), Summary.WORKLOAD_OPS_PER_EPOCH: float(profile["ops"])}
    if (dispatch := profile["host"].get("dispatch_us_per_op")) is not None:
        m[Summary.HOST_DISPATCH_US_PER_OP] = float(dispatch)
    for cls, c in profile["classes"].items():
        for dt, row in c["by_dtype"].items():
            for k in ("flops", "bytes", "ops"):
                m[workload_metric(cls, dt, k)] = float(row[k])
    return m
