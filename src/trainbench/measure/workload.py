"""The workload profile of a run: what one epoch asks of a device, independent of the device.

Measured once per run, after the measured epochs (never inside a timed epoch), by running one more
``train_epoch`` under two dispatch-level instruments:

- ``torch.utils.flop_counter.FlopCounterMode``: the FLOPs of matmuls, attention and convolutions (with
  the convolution backward counted as twice the forward, as :func:`trainbench.measure.flops.count_flops`);
- :class:`OpTrace` (a ``TorchDispatchMode``): every ATen op that runs a kernel (views, ``empty`` and
  aliases are metadata only and not counted), with the bytes of its tensor inputs and outputs and its
  FLOPs from the same formulas, booked to an op class and the dtype it computed in.

Op classes: ``matmul_attention`` (mm, addmm, bmm, baddbmm, scaled-dot-product attention),
``conv``, ``scan`` (cumulative ops and selective-scan kernels), ``optimizer`` (everything inside
``optimizer.step``, plus ``_foreach_*``/``_fused_*`` ops such as gradient clipping) and
``elementwise_norm`` (the rest: activations, norms, reductions, copies, indexing, losses).

A whole epoch is profiled rather than one step scaled by steps per epoch: an epoch is what is timed,
and RL epochs mix environment steps with updates in model-specific ratios that one step would not show.
The cost is one extra epoch with a Python hook per op (tens of microseconds per op), paid once per run.
``trainbench.analysis.projection`` turns the profile into projected epoch times per GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trainbench.core.vocab import Summary, workload_metric

CLASSES = ("matmul_attention", "conv", "elementwise_norm", "scan", "optimizer")

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "mv", "addmv",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention_backward",
           "_scaled_dot_product_cudnn_attention_backward",
           "_scaled_dot_product_flash_attention_for_cpu_backward", "_efficient_attention_forward",
           "_efficient_attention_backward", "_flash_attention_forward", "_flash_attention_backward"}
_CONV = {"convolution", "convolution_backward", "_convolution", "conv1d", "conv2d", "cudnn_convolution",
         "mkldnn_convolution", "_slow_conv2d_forward", "_slow_conv2d_backward"}
_SCAN = {"cumsum", "cumsum_", "cumprod", "cumprod_", "logcumsumexp", "cummax", "cummin", "_cummax_helper",
         "_cummin_helper", "_logcumsumexp"}
#: Ops that run no kernel: allocation and metadata.
_NO_KERNEL = {"empty", "empty_like", "empty_strided", "detach", "alias", "lift_fresh", "lift_fresh_copy",
              "_unsafe_view", "set_", "resize_", "_reshape_alias", "sym_size", "sym_stride", "sym_numel",
              "is_same_size", "_has_compatible_shallow_copy_type", "record_stream",
              "_record_function_enter", "_record_function_enter_new", "_record_function_exit"}


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


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.numel() * t.element_size()
    except Exception:  # noqa: BLE001 - sparse/odd tensors: no bytes
        return 0


def _dtype(tensors: list[torch.Tensor]) -> str:
    for t in tensors:
        if t.is_floating_point():
            return _DTYPES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    return "other"


class OpTrace(TorchDispatchMode):
    """Counts ops, bytes and FLOPs per (class, dtype) of everything dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.registry = flop_registry
        self.in_optimizer = 0
        self.rows: dict[tuple[str, str], dict[str, float]] = {}
        self.by_op: dict[str, int] = {}

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
        name = func._overloadpacket.__name__
        if getattr(func, "is_view", False) or name in _NO_KERNEL:
            return out
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        cls = op_class(name, self.in_optimizer > 0)
        key = (cls, _dtype(ins + outs))
        row = self.rows.setdefault(key, {"flops": 0, "bytes": 0, "ops": 0})
        row["ops"] += 1
        row["bytes"] += sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs)
        row["flops"] += self.flops(func, args, kwargs, out)
        self.by_op[name] = self.by_op.get(name, 0) + 1
        return out


@contextlib.contextmanager
def _optimizer_marker(trace: OpTrace) -> Iterator[None]:
    """Mark ops dispatched inside any ``optimizer.step`` (torch's global step hooks)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(*_: Any) -> None:
        trace.in_optimizer += 1

    def post(*_: Any) -> None:
        trace.in_optimizer = max(0, trace.in_optimizer - 1)

    h1, h2 = register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)
    try:
        yield
    finally:
        h1.remove()
        h2.remove()


def profile_callable(fn: Callable[[], Any], device: torch.device | None = None) -> dict[str, Any]:
    """The workload profile of running ``fn()`` once (see the module doc)."""
    from torch.utils.flop_counter import FlopCounterMode

    trace = OpTrace()
    with FlopCounterMode(display=False) as counter, trace, _optimizer_marker(trace):
        fn()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    counts = counter.get_flop_counts().get("Global", {})
    conv_fwd = int(counts.get(torch.ops.aten.convolution, 0))
    counted = sum(int(v) for k, v in counts.items() if k is not torch.ops.aten.convolution_backward)
    if torch.ops.aten.convolution_backward in counts:
        counted += 2 * conv_fwd
    classes: dict[str, dict[str, Any]] = {}
    for (cls, dt), row in sorted(trace.rows.items()):
        c = classes.setdefault(cls, {"flops": 0, "bytes": 0, "ops": 0, "by_dtype": {}})
        c["by_dtype"][dt] = {k: int(v) for k, v in row.items()}
        for k in ("flops", "bytes", "ops"):
            c[k] += int(row[k])
    return {
        "flops": counted,
        "bytes": sum(c["bytes"] for c in classes.values()),
        "ops": sum(c["ops"] for c in classes.values()),
        "classes": classes,
        "top_ops": dict(sorted(trace.by_op.items(), key=lambda kv: -kv[1])[:25]),
        "device": None if device is None else device.type,
        "note": ("FLOPs: torch.utils.flop_counter (matmul, conv, attention; elementwise not counted); bytes: "
                 "tensor inputs + outputs of every kernel-running ATen op; ops: ATen ops that run a kernel"),
    }


def profile_epoch(trainable: Any, device: torch.device) -> dict[str, Any]:
    """The workload profile of one epoch of ``trainable``: ``train_epoch`` and, for a model with a validation
    pass, ``eval_epoch`` too, since the analysis projects the epoch time of both (training + validation)."""
    evaluate = getattr(trainable, "eval_epoch", None)

    def epoch() -> None:
        trainable.train_epoch()
        if evaluate is not None:
            evaluate()

    out = profile_callable(epoch, device)
    out["scope"] = "one train_epoch + eval_epoch" if evaluate is not None else "one train_epoch"
    return out


def profile_metrics(profile: dict[str, Any]) -> dict[str, float]:
    """Run metrics: totals plus ``workload.<class>.<dtype>.{flops,bytes,ops}`` (what the projector reads)."""
    m = {Summary.WORKLOAD_FLOPS_PER_EPOCH: float(profile["flops"]),
         Summary.WORKLOAD_BYTES_PER_EPOCH: float(profile["bytes"]), Summary.WORKLOAD_OPS_PER_EPOCH: float(profile["ops"])}
    for cls, c in profile["classes"].items():
        for dt, row in c["by_dtype"].items():
            for k in ("flops", "bytes", "ops"):
                m[workload_metric(cls, dt, k)] = float(row[k])
    return m
