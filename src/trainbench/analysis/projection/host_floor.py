"""The host's floor of a launch-bound step on the local card, and whether that card beats the CPU measured here.

A sweep on this machine's CPU measured each model's epoch (``epoch_time_ms``) and profiled it (``host.ops``: the
eager ops an epoch issues). Eager PyTorch dispatches every op on the host, whatever the device: on a GPU of the
same host each op costs that dispatch plus the CUDA launch, and a step of small kernels cannot run faster than the
host issues them. So:

- **Dispatch here** (:func:`measured_dispatch`): what the run measured, ``host.dispatch_us_per_op`` of its
  profile (a training step of tiny tensors timed on this CPU and divided by its profiled ops:
  measure/dispatch.py). Runs from before that figure existed fall back to :func:`dispatch_cost`: the least CPU
  time per op among the *other* models measured on this CPU (epoch ms / ops), an upper bound of the dispatch
  alone (that model's arithmetic is in it too). The model itself is left out there: its own epoch / ops would
  make the card's floor its CPU epoch by construction; such a sweep of one model has no floor.
- **The GPU's own launch** (:data:`GPU_LAUNCH_US`): public figures, below.
- **The floor** of the local card's epoch: ``ops x (dispatch here + launch)``; the card's projected epoch is
  the larger of the kernel model's projection and the floor, at each end of the range (:func:`host_floor`).
- **The comparison**: the CPU's measured epoch over the card's floored one, the speed-up and its range; the card
  is faster where the whole range is above 1, not faster where it is below, and the range says so where it spans 1.

No torch, no MLflow (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypedDict

from trainbench.analysis.projection.artifacts import WorkloadProfile
from trainbench.analysis.projection.rows import FloorFigures, ProjectionDraft

#: The CUDA launch of one kernel on the host (driver call to queued work), µs: (low, nominal, high). Public figures:
#: a direct ``cuLaunchKernel`` on a B200 measured 28.3 µs against 25.8 µs for a CUDA-graph replay of the same ~24 µs
#: kernel, about 4 µs of launch path
#: (https://dogacel.github.io/my-agent-blog/performance/2026/03/14/four-counter-intuitive-lessons-from-deep-diving-gpu-kernel-dispatch-overhead,
#: 2026-03-14); NVIDIA's Nsight Systems guide puts a PyTorch element-wise kernel's whole host-to-start round trip
#: on a Tesla V100 at about 20 µs, dispatch included (https://groundy.com/articles/every-cuda-kernel-pays-a-launch-tax-the-host-to-device-walkthrough/,
#: quoting it). Low: a graph-like 2 µs; high: 6 µs.
GPU_LAUNCH_US = (2.0, 4.0, 6.0)
GPU_LAUNCH_SOURCE = ("a direct cuLaunchKernel about 4 us over a CUDA-graph replay of the same kernel on a B200 "
                     "(dogacel.github.io, 2026-03-14); a PyTorch element-wise kernel's host-to-start round trip ~20 us "
                     "on a V100, dispatch included (NVIDIA Nsight Systems guide, quoted by groundy.com)")


#: A dispatch cost per eager op and where it comes from (``from``: a keyword, hence the functional form).
Dispatch = TypedDict("Dispatch", {"us_per_op": float, "from": str})


def _ops(profile: WorkloadProfile | None) -> float | None:
    ops = float(((profile or {}).get("host") or {}).get("ops") or 0.0)
    return ops if ops > 0 else None


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 1.0


def measured_dispatch(profile: WorkloadProfile | None) -> Dispatch | None:
    """{us_per_op, from}: the dispatch cost the run measured on its host (``host.dispatch_us_per_op``), or None."""
    d = ((profile or {}).get("host") or {}).get("dispatch_us_per_op")
    if not isinstance(d, int | float) or not d > 0:
        return None
    return {"us_per_op": float(d), "from": "a training step of tiny tensors timed on this CPU by the run"}


def dispatch_cost(cpu_models: dict[str, tuple[float, float]], leave_out: str | None = None) -> Dispatch | None:
    """{us_per_op, from}: the least CPU time per eager op over ``cpu_models`` ({model: (measured epoch ms on this
    CPU, the profile's ops per epoch)}) but ``leave_out``; None without any."""
    per_op = {m: ms * 1e3 / ops for m, (ms, ops) in cpu_models.items() if ms > 0 and ops > 0 and m != leave_out}
    if not per_op:
        return None
    best = min(per_op, key=per_op.__getitem__)
    return {"us_per_op": per_op[best],
            "from": f"{best}: {cpu_models[best][0]:.4g} ms / {cpu_models[best][1]:.4g} ops measured on this CPU "
                    "(an upper bound: its arithmetic is in it)"}


def host_floor(epoch_ms: float, epoch_ms_range: list[float], cpu_ms: float, ops: float,
               dispatch: Dispatch) -> FloorFigures:
    """The local card's epoch floored by the host and compared with the CPU's measured epoch: {cpu_epoch_ms,
    dispatch_us_per_op, dispatch_from, launch_us, floor_ms, floor_ms_range, gpu_epoch_ms, gpu_epoch_ms_range,
    speedup, speedup_range, gpu_faster (True: faster over the whole range; False: not faster even at its fast end;
    None: the range spans 1)}."""
    d = float(dispatch["us_per_op"])
    floor = [ops * (d + u) * 1e-3 for u in GPU_LAUNCH_US]
    lo, hi = epoch_ms_range
    gpu = [max(lo, floor[0]), max(epoch_ms, floor[1]), max(hi, floor[2])]
    speed = [cpu_ms / gpu[2], cpu_ms / gpu[1], cpu_ms / gpu[0]]
    faster = True if speed[0] > 1.0 else False if speed[2] < 1.0 else None
    return {"cpu_epoch_ms": cpu_ms, "ops": ops, "dispatch_us_per_op": d,
            "dispatch_from": dispatch["from"],
            "launch_us": list(GPU_LAUNCH_US), "floor_ms": floor[1], "floor_ms_range": [floor[0], floor[2]],
            "gpu_epoch_ms": gpu[1], "gpu_epoch_ms_range": [gpu[0], gpu[2]], "speedup": speed[1],
            "speedup_range": [speed[0], speed[2]], "gpu_faster": faster}


def phrase(model: str, gpu: str, f: FloorFigures) -> str:
    """One line of the report: whether the local card beats this CPU for ``model``, by how much, with the range."""
    lo, hi = f["speedup_range"]
    if f["gpu_faster"] is True:
        verdict = f"{gpu} projected faster than this CPU: x{f['speedup']:.2g} [{lo:.2g}, {hi:.2g}]"
    elif f["gpu_faster"] is False:
        verdict = (f"{gpu} NOT projected faster than this CPU: x{f['speedup']:.2g} [{lo:.2g}, {hi:.2g}] of the CPU's "
                   "speed (the host dispatching its ops bounds the step)")
    else:
        verdict = (f"{gpu} not known to be faster than this CPU: x{f['speedup']:.2g} [{lo:.2g}, {hi:.2g}] (the range "
                   "spans 1)")
    return (f"{model}: {verdict}; CPU {f['cpu_epoch_ms']:.4g} ms/epoch measured, card {f['gpu_epoch_ms']:.4g} ms with "
            f"the host's floor {f['floor_ms']:.4g} ms ({f['ops']:.4g} ops x ({f['dispatch_us_per_op']:.3g} us dispatch "
            f"+ {f['launch_us'][1]:g} us launch))")


def attach(projections: list[ProjectionDraft], models: Iterable[str], profiles: dict[str, WorkloadProfile | None],
           cpu_ms_of: Callable[[str], float | None]) -> None:
    """Give each projected row of the local card (``instance`` local, a roofline projection) of a model measured on
    this CPU its ``host_floor`` (the dispatch cost from the other models), and floor its epoch and hours there.
    ``profiles``: {model: profile}; ``cpu_ms_of(model)``: the measured epoch ms on this CPU or None."""
    cpu = {m: (ms, ops) for m in models if (ms := cpu_ms_of(m)) and (ops := _ops(profiles.get(m)))}
    for p in projections:
        if p.get("instance") != "local" or p.get("model") not in cpu or p.get("epoch_ms") is None or \
                not str(p.get("method") or "").startswith("roofline"):
            continue
        dispatch = measured_dispatch(profiles.get(p["model"])) or dispatch_cost(cpu, leave_out=p["model"])
        if dispatch is None:
            continue
        ms, ops = cpu[p["model"]]
        f = host_floor(p["epoch_ms"], p["epoch_ms_range"], ms, ops, dispatch)
        scale = [_ratio(f["gpu_epoch_ms_range"][0], p["epoch_ms_range"][0]), _ratio(f["gpu_epoch_ms"], p["epoch_ms"]),
                 _ratio(f["gpu_epoch_ms_range"][1], p["epoch_ms_range"][1])]
        if p.get("hours") is not None:
            p["hours"] *= scale[1]
        if p.get("hours_range"):
            p["hours_range"] = [p["hours_range"][0] * scale[0], p["hours_range"][1] * scale[2]]
        if f["gpu_epoch_ms"] > p["epoch_ms"] or f["gpu_epoch_ms_range"] != p["epoch_ms_range"]:
            p["notes"] = [*(p.get("notes") or []), f"floored by this host: {f['floor_ms']:.4g} ms (ops x (dispatch "
                                                   f"measured here + the GPU's launch))"]
        p["epoch_ms"], p["epoch_ms_range"] = f["gpu_epoch_ms"], f["gpu_epoch_ms_range"]
        p["host_floor"] = f
