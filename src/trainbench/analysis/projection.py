"""Projected epoch times on GPUs nobody has measured yet, from a run's workload profile (issue 15).

A run records its workload profile (``trainbench.measure.profile``): per op class (``matmul_attention``,
``conv``, ``elementwise_norm``, ``scan``, ``optimizer``) and dtype, the FLOPs, the bytes read and written
and the number of kernel-running ops of one epoch. On a target GPU (``conf/hardware/<name>.yaml``) each
(class, dtype) row takes a roofline time

    max(FLOPs / (peak TFLOP/s of the dtype x compute efficiency of the class),
        bytes / (memory GB/s x bandwidth efficiency))

plus ``ops x launch cost`` (the host's cost of dispatching and launching one eager kernel, which no GPU
makes faster). The constants are :data:`COMPUTE_EFFICIENCY`, :data:`BANDWIDTH_EFFICIENCY` and
:data:`LAUNCH_US`, each a (low, nominal, high) triple, documented in docs/projection.md; adjust them from
measurements as they arrive. The range of a projection: low = every row at its best efficiency and the
launch cost fully hidden behind device work (per row max instead of sum); high = worst efficiencies and
the launch cost added.

Three methods, stated in every projection:

- ``measured``: a run measured that GPU (the analysed sweep or another sweep of the experiment): its time.
- ``scaled from <gpu>``: the sweep was measured on a catalogued GPU: measured time x model(target) /
  model(measured GPU), so the model only has to get the ratio right (Habitat's idea, much cruder); range
  ``SCALED_RANGE`` around it.
- ``roofline from cpu profile`` (or ``... from <device> profile`` for an uncatalogued GPU): the pure
  model, no calibration; its range is the efficiency/launch range above.

Dtypes: matmuls run at the peak of their dtype (fp32 matmuls at the fp32 peak: PyTorch leaves TF32 off
for matmuls by default; fp32 convolutions at the TF32 peak where there is one: cuDNN allows TF32 by
default). A GPU without bf16 (T4, V100) projects a bf16 run as an fp16 run (the same tensor cores) and
says so; a GPU with neither cannot project it.

This module reads only the run metrics and ``conf/hardware/*.yaml``; it never imports ``measure/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLASSES = ("matmul_attention", "conv", "elementwise_norm", "scan", "optimizer")

#: Fraction of the dtype's dense peak each op class reaches: (low, nominal, high). Large GEMMs reach
#: 60-80% of peak; small training matmuls far less. Elementwise/optimizer/scan FLOPs are not counted by
#: the flop counter (their rows are bandwidth-bound), so their compute efficiency rarely matters.
COMPUTE_EFFICIENCY: dict[str, tuple[float, float, float]] = {
    "matmul_attention": (0.30, 0.55, 0.80),
    "conv": (0.25, 0.45, 0.70),
    "elementwise_norm": (0.10, 0.25, 0.50),
    "scan": (0.05, 0.15, 0.30),
    "optimizer": (0.10, 0.25, 0.50),
}
#: Fraction of the datasheet memory bandwidth a streaming kernel reaches: (low, nominal, high).
BANDWIDTH_EFFICIENCY: tuple[float, float, float] = (0.50, 0.70, 0.85)
#: Host cost of one eager op (Python + dispatcher + kernel launch), microseconds: (low, nominal, high).
#: Eager PyTorch spends about 5-15 us per op on a modern CPU; CUDA's launch alone is ~3-5 us.
LAUNCH_US: tuple[float, float, float] = (4.0, 8.0, 15.0)
#: Range of a projection scaled from a measured GPU: (low factor, high factor) around the point.
SCALED_RANGE: tuple[float, float] = (0.75, 1.35)
#: Range allowed around a median measured on another sweep (only its median is known).
MEASURED_ELSEWHERE_RANGE: tuple[float, float] = (0.9, 1.1)
#: CUDA context and allocator headroom added to a predicted peak before comparing it with a card's memory.
CUDA_CONTEXT_MB = 500.0


# --------------------------------------------------------------------------------------------------
# the catalogue
# --------------------------------------------------------------------------------------------------


@dataclass
class GpuSpec:
    """One ``conf/hardware`` entry that can be projected to (it has peaks and a bandwidth)."""

    name: str  # the entry: t4, a100_40gb, ...
    gpu: str  # the name the device reports: Tesla T4
    peak_tflops: dict[str, float]
    memory_gbps: float
    vram_mb: float | None = None
    power_w: float | None = None
    compute_capability: str | None = None
    source: str | None = None
    uncertain: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def matches(self, device: str | None) -> bool:
        """Is ``device`` (a run's `device` tag) this GPU? Every word of ``gpu`` must appear in it."""
        if not device:
            return False
        a = self.gpu.lower().replace("nvidia", "").split()
        b = device.lower().replace("nvidia", "").split()
        return bool(a) and all(t in b for t in a)


def default_conf_dir() -> Path:
    from trainbench import REPO_ROOT

    return Path(REPO_ROOT) / "conf" / "hardware"


def load_gpus(conf_dir: str | Path | None = None) -> dict[str, GpuSpec]:
    """Every projectable entry of ``conf/hardware`` (those with ``peak_tflops`` and ``memory_gbps``)."""
    from trainbench.schema import load_hardware_profiles

    out = {}
    for name, hw in load_hardware_profiles(conf_dir or default_conf_dir()).items():
        if hw.peak_tflops and hw.memory_gbps and hw.gpu:
            out[name] = spec_from_dict(name, hw)
    return out


def spec_from_dict(name: str, spec: Any) -> GpuSpec:
    get = spec.get if isinstance(spec, dict) else (lambda k, d=None: getattr(spec, k, d))
    return GpuSpec(name=name, gpu=str(get("gpu")), peak_tflops={k: float(v) for k, v in
                                                                 dict(get("peak_tflops") or {}).items()},
                   memory_gbps=float(get("memory_gbps")), vram_mb=get("vram_mb"), power_w=get("power_w"),
                   compute_capability=get("compute_capability"), source=get("source"),
                   uncertain=get("uncertain"))


def gpu_for_device(gpus: dict[str, GpuSpec], device: str | None) -> GpuSpec | None:
    hits = [g for g in gpus.values() if g.matches(device)]
    return max(hits, key=lambda g: len(g.gpu)) if hits else None


# --------------------------------------------------------------------------------------------------
# workload profiles from run metrics
# --------------------------------------------------------------------------------------------------


def run_precision(params: dict[str, str]) -> str:
    """The precision a run trained in: the resolved param when present (trainer.precision=auto), else
    ``trainer.precision``; fp32 when neither is recorded."""
    for key in ("trainer.precision_resolved", "precision_resolved", "trainer.precision"):
        v = str(params.get(key, "")).strip().lower().replace("precision.", "")
        if v in ("fp32", "bf16", "fp16"):
            return v
    return "fp32"


def workload_from_metrics(metrics: dict[str, float]) -> dict[tuple[str, str], dict[str, float]] | None:
    """{(class, dtype): {flops, bytes, ops}} from a run's ``workload.<class>.<dtype>.<what>`` metrics."""
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for key, v in metrics.items():
        parts = key.split(".")
        if len(parts) != 4 or parts[0] != "workload" or parts[3] not in ("flops", "bytes", "ops"):
            continue
        if not math.isfinite(v):
            continue
        rows.setdefault((parts[1], parts[2]), {"flops": 0.0, "bytes": 0.0, "ops": 0.0})[parts[3]] = float(v)
    return rows or None


def workload_of_runs(runs: list[Any]) -> tuple[dict[tuple[str, str], dict[str, float]] | None, int]:
    """The median profile over a model's runs (they profile the same workload), and how many had one."""
    profiles = [w for w in (workload_from_metrics(r.metrics) for r in runs) if w]
    if not profiles:
        return None, 0
    keys = sorted({k for p in profiles for k in p})
    out = {}
    for k in keys:
        out[k] = {what: _median([p.get(k, {}).get(what, 0.0) for p in profiles]) for what in ("flops", "bytes",
                                                                                              "ops")}
    return out, len(profiles)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def totals(workload: dict[tuple[str, str], dict[str, float]]) -> dict[str, float]:
    return {what: sum(r[what] for r in workload.values()) for what in ("flops", "bytes", "ops")}


# --------------------------------------------------------------------------------------------------
# the roofline model
# --------------------------------------------------------------------------------------------------


def peak_for(spec: GpuSpec, cls: str, dtype: str) -> tuple[float | None, str | None]:
    """(TFLOP/s a row of ``dtype`` runs at on ``spec``, a note when it is substituted) - None: cannot."""
    p = spec.peak_tflops
    if dtype == "bf16":
        if "bf16" in p:
            return p["bf16"], None
        if "fp16" in p:
            return p["fp16"], f"{spec.name} has no bf16: bf16 work projected as fp16 (train with " \
                              "trainer.precision=fp16 there)"
        return None, f"{spec.name} has neither bf16 nor fp16 tensor cores: a bf16 run cannot be projected"
    if dtype == "fp16":
        if "fp16" in p:
            return p["fp16"], None
        return p.get("fp32"), f"{spec.name} has no fp16 tensor cores: fp16 work at the fp32 peak"
    if cls == "conv" and dtype == "fp32" and "tf32" in p:
        return p["tf32"], None  # cuDNN allows TF32 convolutions by default
    return p.get("fp32"), None


def roofline_ms(workload: dict[tuple[str, str], dict[str, float]], spec: GpuSpec,
                level: str = "nominal") -> tuple[float | None, list[str]]:
    """Epoch time (ms) on ``spec`` at the ``low``/``nominal``/``high`` assumptions, and notes.

    ``low`` (the fast end): best efficiencies, launch hidden behind device work (max per row).
    ``nominal``: nominal efficiencies, launch added. ``high`` (the slow end): worst efficiencies, launch added.
    None when some work cannot run on the GPU (no dtype for it).
    """
    i = {"low": 2, "nominal": 1, "high": 0}[level]  # fast end = high efficiency
    launch = LAUNCH_US[{"low": 0, "nominal": 1, "high": 2}[level]] * 1e-6
    bw = spec.memory_gbps * 1e9 * BANDWIDTH_EFFICIENCY[i]
    total, notes = 0.0, []
    for (cls, dtype), row in sorted(workload.items()):
        flops, nbytes, ops = row.get("flops", 0.0), row.get("bytes", 0.0), row.get("ops", 0.0)
        t_compute = 0.0
        if flops > 0:
            peak, note = peak_for(spec, cls, dtype)
            if note and note not in notes:
                notes.append(note)
            if peak is None:
                return None, notes
            t_compute = flops / (peak * 1e12 * COMPUTE_EFFICIENCY.get(cls, COMPUTE_EFFICIENCY["elementwise_norm"])[i])
        device = max(t_compute, nbytes / bw)
        host = ops * launch
        total += max(device, host) if level == "low" else device + host
    return total * 1e3, notes


def project(workload: dict[tuple[str, str], dict[str, float]], spec: GpuSpec,
            measured_on: GpuSpec | None = None, measured_ms: float | None = None,
            profiled_on: str = "cpu") -> dict[str, Any] | None:
    """One projection: {epoch_ms, epoch_ms_range, method, notes}; None when the GPU cannot run it."""
    point, notes = roofline_ms(workload, spec, "nominal")
    low, _ = roofline_ms(workload, spec, "low")
    high, _ = roofline_ms(workload, spec, "high")
    if point is None or low is None or high is None:
        return {"epoch_ms": None, "epoch_ms_range": None, "method": "cannot run", "notes": notes}
    if measured_on is not None and measured_ms is not None:
        base, _ = roofline_ms(workload, measured_on, "nominal")
        if base:
            ms = measured_ms * point / base
            return {"epoch_ms": ms, "epoch_ms_range": [ms * SCALED_RANGE[0], ms * SCALED_RANGE[1]],
                    "method": f"scaled from {measured_on.name}", "notes": notes}
    label = "cpu" if profiled_on.lower().startswith("cpu") else profiled_on
    return {"epoch_ms": point, "epoch_ms_range": [low, high], "method": f"roofline from {label} profile",
            "notes": notes}


# --------------------------------------------------------------------------------------------------
# memory fit
# --------------------------------------------------------------------------------------------------


def memory_need_mb(runs: list[Any]) -> tuple[float | None, str]:
    """Device memory the model needs at its batch size: the memory predictor's reserved peak, else a
    measured VRAM peak (x the allocator's 1.1), plus :data:`CUDA_CONTEXT_MB`; None on a CPU run with no
    prediction."""
    for key, factor, what in (("predicted_peak_vram_reserved_mb", 1.0, "predicted reserved peak"),
                              ("predicted_peak_vram_mb", 1.1, "predicted peak x 1.1"),
                              ("peak_vram_mb_max", 1.1, "measured VRAM peak x 1.1")):
        vals = [r.metrics[key] for r in runs if math.isfinite(r.metrics.get(key, math.nan))]
        if vals:
            return max(vals) * factor + CUDA_CONTEXT_MB, f"{what} + {CUDA_CONTEXT_MB:g} MB CUDA context"
    return None, "no memory prediction or VRAM measurement"


def fits(need_mb: float | None, spec: GpuSpec) -> bool | None:
    if need_mb is None or not spec.vram_mb:
        return None
    return need_mb <= float(spec.vram_mb)


# --------------------------------------------------------------------------------------------------
# the multi-GPU schedule and the cheapest instance
# --------------------------------------------------------------------------------------------------


def schedule_hours(hours: list[float], gpus: int) -> float:
    """Wall time when the models train in parallel, one model per GPU at a time, no data parallelism:
    longest job first to the least-loaded GPU (LPT); with no more models than GPUs, the longest model."""
    loads = [0.0] * max(1, int(gpus))
    for h in sorted(hours, reverse=True):
        k = min(range(len(loads)), key=loads.__getitem__)
        loads[k] += h
    return max(loads) if hours else 0.0


def cheapest_meeting(instances: list[dict[str, Any]], threshold_h: float) -> dict[str, Any] | None:
    """The cheapest instance whose slow-end wall time is within ``threshold_h``, every planned model
    projected and not known to overflow its GPU's memory."""
    ok = [i for i in instances if i.get("complete") and i.get("fits_all") is not False
          and i.get("wall_hours_range") and i["wall_hours_range"][1] <= threshold_h and i.get("usd") is not None]
    return min(ok, key=lambda i: (i["usd"], i["wall_hours"])) if ok else None


# --------------------------------------------------------------------------------------------------
# the report's blocks: projections per (instance, model), per instance, the cheapest
# --------------------------------------------------------------------------------------------------

MS_PER_HOUR = 3_600_000.0


def _hours(ms: float | None, target: int | None) -> float | None:
    return None if ms is None or target is None else ms * target / MS_PER_HOUR


def project_argv(argv: list[str]) -> list[str]:
    """``project=a,b`` (which Hydra would read as a sweep over two values) -> ``project=['a','b']``."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "project":
            names = [v.strip().strip("'\"") for v in value.strip().strip("'\"").strip("[]").split(",") if v.strip()]
            arg = "project=[" + ",".join(f"'{n}'" for n in names) + "]"
        out.append(arg)
    return out


def _instances(catalogue: list[Any], gpus: dict[str, GpuSpec], hardware: Any,
               local_usd_per_hour: float | None, extra: list[str] | None = None) -> list[dict[str, Any]]:
    out = []
    hw_name = getattr(hardware, "name", None)
    if hw_name in gpus:  # the local GPU named by hardware=: projected too ("how long on my card?")
        out.append({"instance": "local", "gpu": hw_name, "gpus": 1, "usd_per_hour": local_usd_per_hour,
                    "price_date": None, "price_source": f"electricity: hardware={hw_name} power x price_per_kwh",
                    "relative_speed": None})
    for inst in catalogue:
        out.append({"instance": inst.name, "gpu": inst.gpu, "gpus": int(getattr(inst, "gpus", 1) or 1),
                    "usd_per_hour": float(inst.usd_per_hour), "price_date": getattr(inst, "price_date", None),
                    "price_source": "decision.catalogue", "relative_speed": getattr(inst, "relative_speed", None)})
    for name in extra or []:  # project=<gpu>,...: the GPU alone, unpriced
        if name != hw_name and name not in {i["instance"] for i in out}:
            out.append({"instance": name, "gpu": name, "gpus": 1, "usd_per_hour": None, "price_date": None,
                        "price_source": "project= (no price)", "relative_speed": None})
    return out


def project_report(models: dict[str, dict[str, Any]], runs_by_model: dict[str, list[Any]], plan: list[str],
                   device: str | None, comparisons: list[dict[str, Any]], catalogue: list[Any], hardware: Any,
                   local_usd_per_hour: float | None, thresholds: tuple[float, float],
                   gpus: dict[str, GpuSpec] | None = None, extra: list[str] | None = None) -> dict[str, Any]:
    """The report's ``projections``, ``instances`` and ``cheapest`` blocks (schema in docs/report-schema.md).

    ``runs_by_model``: the timed runs of each model (on the reference ``device``); ``comparisons``:
    compare.device_comparison's list (medians measured on other devices), which win over projections.
    """
    gpus = load_gpus() if gpus is None else gpus
    measured_gpu = gpu_for_device(gpus, device)
    instances = _instances(catalogue, gpus, hardware, local_usd_per_hour, extra)
    projections: list[dict[str, Any]] = []
    for inst in instances:
        spec = gpus.get(inst["gpu"])
        for name in plan:
            m = models.get(name) or {}
            entry = _one(name, m, runs_by_model.get(name, []), inst, spec, device, measured_gpu, comparisons)
            projections.append(entry)
    summary = [_summarise(inst, [p for p in projections if p["instance"] == inst["instance"]], plan,
                          thresholds) for inst in instances]
    cheapest = []
    for th in sorted(set(thresholds)):
        pick = cheapest_meeting([s for s in summary if s["price_source"] == "decision.catalogue"], th)
        why = None
        if pick is None:
            priced = [s for s in summary if s["price_source"] == "decision.catalogue"]
            if not any(s["complete"] for s in priced):
                missing = sorted({m for s in priced for m in s["missing"]})
                why = f"no instance projects every planned model (not projected: {', '.join(missing)})"
            else:
                why = "no instance that projects every planned model and fits them finishes within it"
        cheapest.append({"within_hours": th, "instance": pick["instance"] if pick else None,
                         "gpu": pick["gpu"] if pick else None, "usd": pick["usd"] if pick else None,
                         "wall_hours": pick["wall_hours"] if pick else None,
                         "wall_hours_range": pick["wall_hours_range"] if pick else None, "why_none": why})
    return {"projections": projections, "instances": summary, "cheapest": cheapest,
            "projection_assumptions": {"compute_efficiency": COMPUTE_EFFICIENCY,
                                       "bandwidth_efficiency": BANDWIDTH_EFFICIENCY, "launch_us": LAUNCH_US,
                                       "scaled_range": SCALED_RANGE, "cuda_context_mb": CUDA_CONTEXT_MB,
                                       "measured_device_gpu": measured_gpu.name if measured_gpu else None}}


def _one(name: str, m: dict[str, Any], runs: list[Any], inst: dict[str, Any], spec: GpuSpec | None,
         device: str | None, measured_gpu: GpuSpec | None, comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    target = (m.get("projection") or {}).get("target_epochs")
    entry: dict[str, Any] = {"instance": inst["instance"], "gpu": inst["gpu"], "gpus": inst["gpus"], "model": name,
                             "epoch_ms": None, "epoch_ms_range": None, "hours": None, "hours_range": None,
                             "target_epochs": target, "method": None, "fits": None, "memory_need_mb": None,
                             "precision": run_precision(runs[0].params) if runs else None, "notes": []}
    if spec is None:
        entry["method"] = f"unknown GPU entry {inst['gpu']!r} (no conf/hardware/{inst['gpu']}.yaml with peaks)"
        return entry
    entry["gpu_name"] = spec.gpu
    need, need_src = memory_need_mb(runs)
    entry.update(memory_need_mb=need, memory_source=need_src, fits=fits(need, spec))
    ep = m.get("epoch_time_ms") or {}
    if m.get("source") == "measured" and spec.matches(device) and ep.get("mean") is not None:
        ci = ep.get("ci95_mean") or [ep["mean"], ep["mean"]]
        entry.update(epoch_ms=ep["mean"], epoch_ms_range=[max(0.0, ci[0]), ci[1]], method="measured")
    else:
        elsewhere = [c for c in comparisons if c["model"] == name and spec.matches(c["device"])]
        if elsewhere:
            ms = float(_median([c["epoch_ms"] for c in elsewhere]))
            entry.update(epoch_ms=ms, epoch_ms_range=[ms * MEASURED_ELSEWHERE_RANGE[0],
                                                      ms * MEASURED_ELSEWHERE_RANGE[1]],
                         method="measured", notes=[f"median measured on {elsewhere[0]['device']} in another "
                                                   "sweep of the experiment"])
        elif inst.get("relative_speed") and ep.get("mean") is not None:
            ms = ep["mean"] / float(inst["relative_speed"])
            entry.update(epoch_ms=ms, epoch_ms_range=[ms, ms], method="decision.catalogue relative_speed")
        else:
            workload, n = workload_of_runs(runs)
            if workload is None:
                entry["method"] = "not projected: no workload profile in the runs" if runs else \
                    "not projected: not measured"
                return entry
            measured_ms = ep.get("mean") if measured_gpu is not None and m.get("source") == "measured" else None
            p = project(workload, spec, measured_gpu if measured_ms else None, measured_ms,
                        profiled_on=device or "cpu")
            entry.update(epoch_ms=p["epoch_ms"], epoch_ms_range=p["epoch_ms_range"], method=p["method"],
                         notes=p["notes"])
    if entry["epoch_ms"] is not None:
        entry["hours"] = _hours(entry["epoch_ms"], target)
        if entry["epoch_ms_range"] and target:
            entry["hours_range"] = [_hours(x, target) for x in entry["epoch_ms_range"]]
    return entry


def _summarise(inst: dict[str, Any], entries: list[dict[str, Any]], plan: list[str],
               thresholds: tuple[float, float]) -> dict[str, Any]:
    done = [e for e in entries if e["hours"] is not None]
    hours = [e["hours"] for e in done]
    lows = [e["hours_range"][0] if e["hours_range"] else e["hours"] for e in done]
    highs = [e["hours_range"][1] if e["hours_range"] else e["hours"] for e in done]
    g = inst["gpus"]
    wall = schedule_hours(hours, g) if done else None
    wall_range = [schedule_hours(lows, g), schedule_hours(highs, g)] if done else None
    price = inst["usd_per_hour"]
    usd = None if wall is None or price is None else wall * price
    fit_vals = [e["fits"] for e in done]
    out = {**{k: inst[k] for k in ("instance", "gpu", "gpus", "usd_per_hour", "price_date", "price_source")},
           "gpu_name": next((e.get("gpu_name") for e in entries if e.get("gpu_name")), None),
           "models": [e["model"] for e in done], "missing": [m for m in plan if m not in {e["model"] for e in done}],
           "complete": bool(done) and len(done) == len(plan),
           "hours_serial": sum(hours) if done else None,
           "hours_serial_range": [sum(lows), sum(highs)] if done else None,
           "wall_hours": wall, "wall_hours_range": wall_range, "usd": usd,
           "usd_range": None if wall_range is None or price is None else [wall_range[0] * price,
                                                                          wall_range[1] * price],
           "fits_all": False if False in fit_vals else (True if fit_vals and all(fit_vals) else None),
           "does_not_fit": [e["model"] for e in entries if e["fits"] is False],
           "methods": sorted({e["method"] for e in done})}
    for th in sorted(set(thresholds)):
        out[f"within_{th:g}h"] = bool(wall_range and out["complete"] and wall_range[1] <= th)
    return out


# --------------------------------------------------------------------------------------------------
# text: the report section and the side-by-side console view
# --------------------------------------------------------------------------------------------------


def _fmt_h(h: float | None) -> str:
    if h is None:
        return "–"
    if h < 1 / 60:
        return f"{h * 3600:.3g} s"
    return f"{h * 60:.3g} min" if h < 1 else f"{h:.3g} h"


def _fmt_ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _fmt_usd(x: float | None) -> str:
    return "–" if x is None else (f"${x:.4f}" if x < 1 else f"${x:,.2f}")


def markdown_section(r: dict[str, Any]) -> str:
    lines = ["\n## Projected per GPU (issue 15)\n",
             "Projections are estimates, not measurements, unless the method says `measured`. Method and "
             "constants: docs/projection.md. Wall time of a multi-GPU instance: the planned models in parallel, "
             "one per GPU (no data parallelism). Prices: the catalogue's date, check current pricing.\n"]
    head = ["instance", "GPU", "GPUs", "$/h (as of)", "models", "wall time [range]", "cost [range]", "fits",
            "method"]
    rows = []
    for i in r.get("instances", []):
        rng = i["wall_hours_range"]
        usd_r = i["usd_range"]
        rows.append([i["instance"], i["gpu"], i["gpus"],
                     "–" if i["usd_per_hour"] is None else f"{i['usd_per_hour']:g} ({i['price_date'] or 'local'})",
                     f"{len(i['models'])}/{len(i['models']) + len(i['missing'])}",
                     f"{_fmt_h(i['wall_hours'])} [{_fmt_h(rng[0]) if rng else '–'}, {_fmt_h(rng[1]) if rng else '–'}]",
                     f"{_fmt_usd(i['usd'])} [{_fmt_usd(usd_r[0]) if usd_r else '–'}, "
                     f"{_fmt_usd(usd_r[1]) if usd_r else '–'}]",
                     {True: "yes", False: "NO: " + ", ".join(i["does_not_fit"]), None: "unknown"}[i["fits_all"]],
                     "; ".join(i["methods"]) or "–"])
    lines.append(_md_table(head, rows))
    for c in r.get("cheapest", []):
        lines.append(f"- Cheapest instance within {c['within_hours']:g} h (slow end of the range): "
                     + (f"**{c['instance']}** ({c['gpu']}), {_fmt_h(c['wall_hours'])}, {_fmt_usd(c['usd'])}"
                        if c["instance"] else f"none: {c['why_none']}"))
    lines.append("\nPer model: projected epoch time in ms [range] and hours.\n")
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for p in r.get("projections", []):
        by_model.setdefault(p["model"], {})[p["instance"]] = p
    insts = [i["instance"] for i in r.get("instances", [])]
    rows = []
    for model, per in by_model.items():
        cells = [model]
        for inst in insts:
            p = per.get(inst)
            if not p or p["epoch_ms"] is None:
                cells.append("–")
                continue
            lo, hi = p["epoch_ms_range"]
            fit = "" if p["fits"] is not False else " (does not fit)"
            cells.append(f"{_fmt_ms(p['epoch_ms'])} [{_fmt_ms(lo)}, {_fmt_ms(hi)}] · {_fmt_h(p['hours'])}{fit}")
        rows.append(cells)
    lines.append(_md_table(["model"] + insts, rows))
    notes = sorted({n for p in r.get("projections", []) for n in p.get("notes", [])})
    if notes:
        lines.append("\n" + "\n".join(f"- {n}" for n in notes))
    return "\n".join(lines) + "\n"


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def console_view(r: dict[str, Any], only: list[str] | None = None) -> str:
    """Per-model projections side by side for the chosen instances (``only``: instance names, e.g. ``local``
    or a ``project=`` GPU entry)."""
    insts = [i for i in r.get("instances", []) if not only or i["instance"] in only]
    if not insts:
        return "no projection for " + ", ".join(only or []) + " (see conf/hardware and decision.catalogue)"
    head = ["model"] + [f"{i['instance']} ({i['gpu']}{' x' + str(i['gpus']) if i['gpus'] > 1 else ''})"
                        for i in insts]
    by = {(p["instance"], p["model"]): p for p in r.get("projections", [])}
    rows = []
    for model in dict.fromkeys(p["model"] for p in r.get("projections", [])):
        row = [model]
        for i in insts:
            p = by.get((i["instance"], model))
            if not p or p["epoch_ms"] is None:
                row.append("–")
                continue
            lo, hi = p["epoch_ms_range"]
            row.append(f"{_fmt_ms(p['epoch_ms'])} ms [{_fmt_ms(lo)}-{_fmt_ms(hi)}] = {_fmt_h(p['hours'])}"
                       + (" !" if p["fits"] is False else ""))
        rows.append(row)
    rows.append(["wall time"] + [_fmt_h(i["wall_hours"]) for i in insts])
    rows.append(["cost"] + [_fmt_usd(i["usd"]) for i in insts])
    widths = [max(len(str(x[k])) for x in [head, *rows]) for k in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if k == 0 else '>'}{w}}}" for k, w in enumerate(widths))
    lines = ["projected epoch time [range] = hours per model (PROJECTIONS unless the method says measured)",
             fmt.format(*head), *(fmt.format(*row) for row in rows)]
    lines += [f"  {i['instance']}: {'; '.join(i['methods']) or 'not projected'}" for i in insts]
    lines.append("  ! = predicted not to fit in that GPU's memory at the run's batch size")
    return "\n".join(lines)
