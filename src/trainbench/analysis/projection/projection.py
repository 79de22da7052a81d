"""The report's projection blocks: per (instance, model) projected epoch times and hours, per instance the
wall time of the plan and its cost, and the cheapest instance within each threshold.

An instance is the local GPU named by ``hardware=``, each ``decision.catalogue`` entry, and each ``project=``
GPU (unpriced). Per model the method is, in order: ``measured`` on that GPU (this sweep, or the median of
another sweep of the experiment), the catalogue's ``relative_speed``, else the roofline model
(analysis/projection/roofline.py) scaled from a catalogued measured GPU or from the run's profile alone. The GPU
catalogue is analysis/projection/gpus.py; the report's text of these blocks is analysis/report/report.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from statistics import median
from typing import Any

from trainbench.analysis.fields import from_json
from trainbench.analysis.projection import data_parallel as dp
from trainbench.analysis.projection import host_floor
from trainbench.analysis.projection.gpus import GpuSpec, gpu_for_device, load_gpus
from trainbench.analysis.projection.kernel_model import projection_assumptions
from trainbench.analysis.projection.roofline import (
    CUDA_CONTEXT_MB,
    MEASURED_ELSEWHERE_RANGE,
    fits,
    fitting_micro_batch,
    memory_need_mb,
    profile_of_runs,
    project,
    run_precision,
)
from trainbench.analysis.projection.rows import ProjectionDraft
from trainbench.analysis.report_types import (
    BASIS_ORDER,
    LOCAL,
    Basis,
    Cheapest,
    DeviceComparison,
    Instance,
    ModelEntry,
    ProjectionAssumptions,
    ProjectionRow,
    Source,
)


@dataclass
class Projections:
    """What the projection stage gives the decision and the report: ``projections[]``,
    ``projections_data_parallel[]``, THE instances table, ``cheapest[]`` and ``projection_assumptions``."""

    projections: list[ProjectionRow]
    projections_data_parallel: list[ProjectionRow]
    instances: list[Instance]
    cheapest: list[Cheapest]
    projection_assumptions: ProjectionAssumptions

    def local(self) -> Instance:
        """The local instance's row (always one)."""
        return next(i for i in self.instances if i.instance == LOCAL)

    def on(self, instance: str) -> list[ProjectionRow]:
        """The one-GPU rows of one instance."""
        return [p for p in self.projections if p.instance == instance]

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


def cheapest_meeting(instances: list[Instance], threshold_h: float) -> Instance | None:
    """The cheapest instance whose slow-end wall time is within ``threshold_h``, every planned model
    projected and not known to overflow its GPU's memory."""
    ok = [i for i in instances if i.complete and i.fits_all is not False
          and i.wall_hours_range and i.wall_hours_range[1] * (1 + (i.restart_allowance or 0))
          <= threshold_h and i.usd is not None]
    return min(ok, key=lambda i: (i.usd, i.wall_hours)) if ok else None


# --------------------------------------------------------------------------------------------------
# the report's blocks: projections per (instance, model), per instance, the cheapest
# --------------------------------------------------------------------------------------------------

MS_PER_HOUR = 3_600_000.0


def _hours(ms: float | None, target: int | None) -> float | None:
    return None if ms is None or target is None else ms * target / MS_PER_HOUR


@dataclass
class Offered:
    """An instance before anything is projected onto it: the local one, a priced row (``decision.offers``,
    ``decision.catalogue``) or a ``project=`` GPU; the offer's keys (:data:`OFFER_KEYS`) None for a quoted price,
    the local keys None but on the local row."""

    instance: str
    gpu: str
    gpus: int
    usd_per_hour: float | None
    price_date: str | None
    price_source: str
    relative_speed: float | None = None
    local_kind: str | None = None
    local_why: str | None = None
    cloud: str | None = None
    region: str | None = None
    spot_usd_per_hour: float | None = None
    spot_region: str | None = None
    gpu_note: str | None = None
    spot: bool | None = None
    restart_allowance: float | None = None


def _instances(catalogue: list[Any], gpus: dict[str, GpuSpec], hardware: Any,
               local_usd_per_hour: float | None, extra: list[str] | None = None,
               device: str | None = None) -> list[Offered]:
    out = [_local_instance(gpus, hardware, local_usd_per_hour, device)]
    hw_name = getattr(hardware, "name", None)
    for inst in catalogue:  # decision.offers (analysis/decision/offers.py Offer) and decision.catalogue entries
        out.append(Offered(instance=inst.name, gpu=inst.gpu, gpus=int(getattr(inst, "gpus", 1) or 1),
                           usd_per_hour=float(inst.usd_per_hour), price_date=getattr(inst, "price_date", None),
                           price_source=PRICED, relative_speed=getattr(inst, "relative_speed", None),
                           **{k: getattr(inst, k, None) for k in OFFER_KEYS}))
    for name in extra or []:  # project=<gpu>,...: the GPU alone, unpriced
        if name != hw_name and name not in {i.instance for i in out}:
            out.append(Offered(instance=name, gpu=name, gpus=1, usd_per_hour=None, price_date=None,
                               price_source="project= (no price)"))
    return out


#: The price source of a priced instance (an offer or a quoted price): the rows the costs and the cheapest read.
PRICED = "decision.catalogue"


#: What an offer (analysis/decision/offers.py) adds to its instances row: its cloud, region and spot price, how its
#: GPU was identified, whether the row is priced at spot and its restart allowance (None for a quoted price).
OFFER_KEYS = ("cloud", "region", "spot_usd_per_hour", "spot_region", "gpu_note", "spot", "restart_allowance")


#: How the local instance's hours are had: ``gpu entry`` (hardware= names a conf/hardware GPU: measured on
#: it, or projected to it like any instance), ``measured device`` (hardware= is no GPU entry, and the sweep's
#: device is the local machine: hardware=auto, or a CPU sweep with hardware=cpu), ``unknown`` (neither).
LOCAL_GPU_ENTRY, LOCAL_MEASURED_DEVICE, LOCAL_UNKNOWN = "gpu entry", "measured device", "unknown"


def _local_instance(gpus: dict[str, GpuSpec], hardware: Any, usd_per_hour: float | None,
                    device: str | None) -> Offered:
    """The local instance (always one): the card named by hardware=, else the machine the sweep ran on when
    hardware= says that is the local one (auto, or cpu for a CPU sweep), else unknown (no hours)."""
    name = getattr(hardware, "name", None) or "auto"
    row = Offered(instance=LOCAL, gpu=name, gpus=1, usd_per_hour=usd_per_hour, price_date=None,
                  price_source=f"electricity: hardware={name} power x price_per_kwh",
                  local_kind=LOCAL_GPU_ENTRY, local_why=f"hardware={name}: a GPU entry of conf/hardware")
    if name in gpus:
        return row
    on_cpu = device is not None and device.lower().startswith("cpu")
    if name == "auto" and device:
        row.local_kind, row.gpu = LOCAL_MEASURED_DEVICE, device
        row.local_why = "hardware=auto: the device the sweep ran on is taken as the local machine"
    elif on_cpu and not getattr(hardware, "gpu", None):
        row.local_kind, row.gpu = LOCAL_MEASURED_DEVICE, device
        row.local_why = f"hardware={name} names no GPU and the sweep ran on the CPU"
    else:
        row.local_kind = LOCAL_UNKNOWN
        row.local_why = (f"hardware={name} is not a GPU entry with peaks (conf/hardware) and the sweep ran on "
                         f"{device or 'no device'}: nothing measures or projects the local machine")
    return row


def _mean_ci(m: ModelEntry) -> tuple[float | None, list[float] | None]:
    """A model's measured mean epoch time and its 95% interval (None, None without timing)."""
    ep = m.epoch_time_ms
    return (ep.mean, ep.ci95_mean) if ep is not None else (None, None)


def _measured_entry(name: str, m: ModelEntry, runs: list[Any], inst: Offered) -> ProjectionDraft:
    """A (local instance, model) row where the local machine is the sweep's device: the measured figures."""
    proj = m.projection
    entry: ProjectionDraft = {"instance": inst.instance, "gpu": inst.gpu, "gpus": inst.gpus, "model": name,
                             "epoch_ms": None, "epoch_ms_range": None, "hours": None, "hours_range": None,
                             "target_epochs": proj.target_epochs if proj else None, "method": None, "fits": None,
                             "memory_need_mb": None, "precision": run_precision(runs[0].params) if runs else None,
                             "range_basis": None, "notes": []}
    mean, ci = _mean_ci(m)
    if inst.local_kind != LOCAL_MEASURED_DEVICE:
        entry["method"] = f"not projected: {inst.local_why}"
    elif m.source == Source.MEASURED and mean is not None and proj is not None and proj.hours is not None:
        ci = ci or [mean, mean]
        entry.update(epoch_ms=mean, epoch_ms_range=[max(0.0, ci[0]), ci[1]], method=Basis.MEASURED,
                     range_basis="95% interval of the measured mean", hours=proj.hours,
                     hours_range=proj.hours_range or proj.hours_ci95 or [proj.hours, proj.hours],
                     fits=True)  # it ran there
    elif m.source == Source.PROFILED:
        entry["method"] = (f"not projected: profiled at size {m.size}, not trained, and the local machine "
                           f"is {inst.gpu}, onto which nothing projects; name the local card (hardware=<entry>)")
    else:
        entry["method"] = "not projected: not measured"
    return entry


def _with_estimate(entry: ProjectionDraft, m: ModelEntry) -> ProjectionDraft:
    """A model the team estimated (decision.estimates) counts on the local instance with its estimate."""
    proj = m.projection
    if entry["hours"] is None and m.source == Source.ESTIMATE and proj is not None and proj.hours is not None:
        entry.update(epoch_ms=m.estimate_epoch_ms, epoch_ms_range=[m.estimate_epoch_ms] * 2,
                     hours=proj.hours, hours_range=[proj.hours, proj.hours],
                     target_epochs=proj.target_epochs, method="estimate (decision.estimates)",
                     range_basis="none: the team's estimate")
    return entry


def method_basis(method: str | None) -> Basis:
    """The kind of figure a projection method gives: ``measured``, ``scaled`` (from a measured GPU, or by the
    catalogue's relative_speed), ``estimate`` (decision.estimates) or ``projected`` (the roofline alone)."""
    m = (method or "").lower()
    if m.startswith(Basis.MEASURED):
        return Basis.MEASURED
    if m.startswith(Basis.SCALED) or m.startswith("decision.catalogue"):
        return Basis.SCALED
    if m.startswith(Basis.ESTIMATE):
        return Basis.ESTIMATE
    return Basis.PROJECTED


def project_report(models: dict[str, ModelEntry], runs_by_model: dict[str, list[Any]], plan: list[str],
                   device: str | None, comparisons: list[DeviceComparison], catalogue: list[Any], hardware: Any,
                   local_usd_per_hour: float | None, thresholds: tuple[float, float],
                   gpus: dict[str, GpuSpec] | None = None, extra: list[str] | None = None,
                   precision: str = "auto", buffer: float = 0.0, dp_runs: dict[str, list[Any]] | None = None,
                   data_parallel: int = 1) -> Projections:
    """The report's ``projections``, ``instances`` and ``cheapest`` blocks (schema in docs/report-schema.md).

    ``runs_by_model``: the timed runs of each model (on the reference ``device``); ``comparisons``:
    compare.device_comparison's list (medians measured on other devices), which win over projections.
    ``precision``: ``projection.precision`` (auto|fp32|tf32|bf16|fp16) of the projected entries.
    ``dp_runs``: each model's completed runs on several ranks (``world_size`` > 1), which calibrate and measure
    data parallelism; ``data_parallel``: ``projection.data_parallel``, the N also projected on ``extra`` GPUs
    (analysis/projection/data_parallel.py; multi-GPU instances are projected at every N up to their GPUs).
    """
    gpus = load_gpus() if gpus is None else gpus
    measured_gpu = gpu_for_device(gpus, device)
    instances = _instances(catalogue, gpus, hardware, local_usd_per_hour, extra, device)
    projections: list[ProjectionDraft] = []
    for inst in instances:
        spec = gpus.get(inst.gpu)
        for name in plan:
            m = models.get(name) or ModelEntry(model=name)
            if inst.local_kind in (LOCAL_MEASURED_DEVICE, LOCAL_UNKNOWN):
                entry = _measured_entry(name, m, runs_by_model.get(name, []), inst)
            else:
                entry = _one(name, m, runs_by_model.get(name, []), inst, spec, device, measured_gpu, comparisons,
                             precision)
            if inst.instance == LOCAL:
                entry = _with_estimate(entry, m)
            runs = runs_by_model.get(name) or []
            entry.update(data_parallel=1, comm_ms=0.0, comm_ms_range=[0.0, 0.0],
                         global_batch=dp.per_gpu_batch(runs[0]) if runs else None)
            projections.append(entry)
    if device is not None and device.lower().startswith("cpu"):  # the local card against this CPU (host_floor.py)
        host_floor.attach(projections, plan,
                          {n: profile_of_runs(runs_by_model.get(n) or [])[0] for n in plan},
                          lambda n: _cpu_epoch_ms(models.get(n) or ModelEntry(model=n)))
    summary = [_summarise(inst, [p for p in projections if p["instance"] == inst.instance], plan,
                          thresholds, buffer) for inst in instances]
    across: list[ProjectionDraft] = []  # one model across N GPUs of the instance
    for inst in instances:
        base = [p for p in projections if p["instance"] == inst.instance]
        for n in _dp_sizes(inst, data_parallel, extra or []):
            rows = _dp_rows(inst, n, base, models, runs_by_model, dp_runs or {}, gpus)
            across += rows
            row = _summarise_dp(inst, n, rows, base, plan, thresholds, buffer)
            plain = next(s for s in summary if s.instance == inst.instance and s.data_parallel == 1)
            if _helps(row, plain):
                summary.append(row)
    cheapest: list[Cheapest] = []
    for th in sorted(set(thresholds)):
        pick = cheapest_meeting([s for s in summary if s.price_source == PRICED], th)
        why = None
        if pick is None:
            priced = [s for s in summary if s.price_source == PRICED]
            if not any(s.complete for s in priced):
                missing = sorted({m for s in priced for m in s.missing})
                why = f"no instance projects every planned model (not projected: {', '.join(missing)})"
            else:
                why = "no instance that projects every planned model and fits them finishes within it"
        cheapest.append(Cheapest(within_hours=th, instance=pick.instance if pick else None,
                                 data_parallel=pick.data_parallel if pick else None,
                                 gpu=pick.gpu if pick else None, usd=pick.usd if pick else None,
                                 wall_hours=pick.wall_hours if pick else None,
                                 wall_hours_range=pick.wall_hours_range if pick else None, why_none=why))
    # the rows this stage assembled, as the report's types (a key without a field names itself: add the field,
    # with its doc, to analysis/report_types.py)
    return Projections(
        projections=[from_json(ProjectionRow, p, f"projections[{k}]") for k, p in enumerate(projections)],
        projections_data_parallel=[from_json(ProjectionRow, p, f"projections_data_parallel[{k}]")
                                   for k, p in enumerate(across)],
        instances=summary,
        cheapest=cheapest,
        projection_assumptions=from_json(ProjectionAssumptions, {
            **projection_assumptions(), "precision_asked": precision, "cuda_context_mb": CUDA_CONTEXT_MB,
            "measured_device_gpu": measured_gpu.name if measured_gpu else None}, "projection_assumptions"))


def _cpu_epoch_ms(m: ModelEntry) -> float | None:
    """The model's mean epoch measured on the sweep's device (a CPU here), or None."""
    return _mean_ci(m)[0] if m.source == Source.MEASURED else None


def _one(name: str, m: ModelEntry, runs: list[Any], inst: Offered, spec: GpuSpec | None,
         device: str | None, measured_gpu: GpuSpec | None, comparisons: list[DeviceComparison],
         precision: str = "auto") -> ProjectionDraft:
    target = m.projection.target_epochs if m.projection else None
    run_prec = run_precision(runs[0].params) if runs else None
    entry: ProjectionDraft = {"instance": inst.instance, "gpu": inst.gpu, "gpus": inst.gpus, "model": name,
                             "epoch_ms": None, "epoch_ms_range": None, "hours": None, "hours_range": None,
                             "target_epochs": target, "method": None, "fits": None, "memory_need_mb": None,
                             "precision": run_prec, "range_basis": None, "notes": []}
    if spec is None:
        entry["method"] = f"unknown GPU entry {inst.gpu!r} (no conf/hardware/{inst.gpu}.yaml with peaks)"
        return entry
    entry["gpu_name"] = spec.gpu
    need, need_src = memory_need_mb(runs)
    entry.update(memory_need_mb=need, memory_source=need_src, fits=fits(need, spec))
    smaller = fitting_micro_batch(runs, need, spec)
    if smaller is not None:
        entry["fits_with"] = smaller
    mean, ci = _mean_ci(m)
    if m.source == Source.MEASURED and spec.matches(device) and mean is not None:
        ci = ci or [mean, mean]
        entry.update(epoch_ms=mean, epoch_ms_range=[max(0.0, ci[0]), ci[1]], method=Basis.MEASURED,
                     range_basis="95% interval of the measured mean")
    else:
        elsewhere = [c for c in comparisons if c.model == name and spec.matches(c.device)]
        if elsewhere:
            ms = float(median([c.epoch_ms for c in elsewhere]))
            entry.update(epoch_ms=ms, epoch_ms_range=[ms * MEASURED_ELSEWHERE_RANGE[0],
                                                      ms * MEASURED_ELSEWHERE_RANGE[1]],
                         method=Basis.MEASURED, notes=[f"median measured on {elsewhere[0].device} in another "
                                                   "sweep of the experiment"],
                         range_basis=f"x{MEASURED_ELSEWHERE_RANGE[0]:g}-{MEASURED_ELSEWHERE_RANGE[1]:g} around "
                                     "a median measured elsewhere")
        elif inst.relative_speed and mean is not None:
            ms = mean / float(inst.relative_speed)
            entry.update(epoch_ms=ms, epoch_ms_range=[ms, ms], method="decision.catalogue relative_speed",
                         range_basis="none: a speed the user set")
        else:
            profile, n, unusable = profile_of_runs(runs)
            if profile is None:
                entry["method"] = (f"not projected: {unusable}" if unusable else
                                   "not projected: no workload profile in the runs" if runs else
                                   "not projected: not measured")
                return entry
            measured_ms = mean if measured_gpu is not None and m.source == Source.MEASURED else None
            p = project(profile, spec, measured_gpu if measured_ms else None, measured_ms,
                        profiled_on=device or "cpu", precision=precision, measured_precision=run_prec or "fp32")
            entry.update(epoch_ms=p["epoch_ms"], epoch_ms_range=p["epoch_ms_range"], method=p["method"],
                         notes=p["notes"], precision=p["precision"], range_basis=p["range_basis"])
    if entry["epoch_ms"] is not None:
        # the model's training plan (analysis/plan/plan.py): hours = epoch_ms x data_scale x epochs x batch_scale
        work = m.projection.work_scale if m.projection and m.projection.work_scale is not None else 1.0
        lo_e, hi_e = (m.plan.epochs_range if m.plan else None) or [target, target]
        entry["hours"] = _hours(entry["epoch_ms"] * work, target)
        if entry["epoch_ms_range"] and target:
            entry["hours_range"] = [_hours(entry["epoch_ms_range"][0] * work, lo_e or target),
                                    _hours(entry["epoch_ms_range"][1] * work, hi_e or target)]
    return entry


def _summarise(inst: Offered, entries: list[ProjectionDraft], plan: list[str],
               thresholds: tuple[float, float], buffer: float = 0.0) -> Instance:
    """One row of THE instances table (docs/report-schema.md): hours one model after another and in parallel
    (one model per GPU), the GPUs used, and one cost: the wall hours x the whole instance's hourly price."""
    done = [e for e in entries if e["hours"] is not None]
    hours = [e["hours"] for e in done]
    lows = [e["hours_range"][0] if e["hours_range"] else e["hours"] for e in done]
    highs = [e["hours_range"][1] if e["hours_range"] else e["hours"] for e in done]
    g = inst.gpus
    wall = schedule_hours(hours, g) if done else None
    wall_range = [schedule_hours(lows, g), schedule_hours(highs, g)] if done else None
    # a spot row's conservative hours also carry its restart allowance (decision.spot_restart_allowance)
    wall_cons = None if wall_range is None else wall_range[1] * (1 + buffer) * (1 + (inst.restart_allowance
                                                                                     or 0))
    price = inst.usd_per_hour
    usd = None if wall is None or price is None else wall * price
    fit_vals = [e["fits"] for e in done]
    kinds = [method_basis(e["method"]) for e in done]
    complete = bool(done) and len(done) == len(plan)
    return Instance(
        instance=inst.instance, gpu=inst.gpu, gpus=inst.gpus, usd_per_hour=inst.usd_per_hour,
        price_date=inst.price_date, price_source=inst.price_source,
        gpu_name=next((e.get("gpu_name") for e in entries if e.get("gpu_name")), None),
        models=[e["model"] for e in done], missing=[m for m in plan if m not in {e["model"] for e in done}],
        complete=complete,
        hours_serial=sum(hours) if done else None,
        hours_serial_range=[sum(lows), sum(highs)] if done else None,
        wall_hours=wall, wall_hours_range=wall_range, gpus_used=min(g, len(done)),
        usd=usd,
        usd_range=None if wall_range is None or price is None else [wall_range[0] * price, wall_range[1] * price],
        wall_hours_conservative=wall_cons,
        usd_conservative=None if wall_cons is None or price is None else wall_cons * price,
        basis=max(kinds, key=BASIS_ORDER.index) if kinds else None,
        model_basis={e["model"]: k for e, k in zip(done, kinds, strict=True)},
        fits_all=False if False in fit_vals else (True if fit_vals and all(fit_vals) else None),
        does_not_fit=[e["model"] for e in entries if e["fits"] is False],
        methods=sorted({e["method"] for e in done}),
        data_parallel=1, global_batch={e["model"]: e.get("global_batch") for e in done},
        within={f"within_{th:g}h": bool(wall_range and complete and wall_range[1] <= th)
                for th in sorted(set(thresholds))},
        local_kind=inst.local_kind, local_why=inst.local_why if inst.local_kind is not None else None,
        **{k: getattr(inst, k) for k in OFFER_KEYS})


# --------------------------------------------------------------------------------------------------
# one model across N GPUs (analysis/projection/data_parallel.py)
# --------------------------------------------------------------------------------------------------


def _dp_sizes(inst: Offered, asked: int, extra: list[str]) -> list[int]:
    """The N > 1 an instance is projected at: every N of DP_SIZES up to a catalogue instance's GPUs (and the asked
    one within them); ``projection.data_parallel`` on a ``project=`` GPU (a board of N of them)."""
    if inst.price_source == PRICED:
        return [n for n in dp.DP_SIZES if 1 < n <= inst.gpus]
    if inst.instance in extra and asked > 1:
        return [asked]
    return []


def _dp_rows(inst: Offered, n: int, base: list[ProjectionDraft], models: dict[str, ModelEntry],
             runs_by_model: dict[str, list[Any]], dp_runs: dict[str, list[Any]],
             gpus: dict[str, GpuSpec]) -> list[ProjectionDraft]:
    """The projections[] rows of every planned model of ``inst`` across ``n`` of its GPUs."""
    spec = gpus.get(inst.gpu)
    board = dp.load_boards().get(inst.gpu)
    every_dp = [r for rs in dp_runs.values() for r in rs]
    calib = dp.calibration(every_dp, board, spec.matches) if spec is not None and board is not None else None
    out: list[ProjectionDraft] = []
    for b in base:
        runs = runs_by_model.get(b["model"]) or []
        support = dp.split_support(runs) if runs else (False, "not projected: no run of the model to read")
        measured = (dp.measured_dp(dp_runs.get(b["model"]) or [], n, spec.matches)
                    if spec is not None and support[0] else None)
        row = dp.dp_row(b, n, runs[0] if runs else None, (models.get(b["model"]) or ModelEntry()).plan, board,
                        support, dp.grad_bytes(runs), calib, measured)
        out.append({**row, "gpus": inst.gpus if inst.price_source == PRICED else n})
    return out


def _summarise_dp(inst: Offered, n: int, rows: list[ProjectionDraft], base: list[ProjectionDraft],
                  plan: list[str], thresholds: tuple[float, float], buffer: float) -> Instance:
    """The instances row of ``inst`` training each model across ``n`` GPUs: the GPUs make ``gpus // n`` groups
    of ``n``, the models go to the groups longest first (LPT); a model that cannot be split (or is not projected
    across GPUs) trains on one GPU of its group, as measured or projected on one GPU."""
    gpus = inst.gpus if inst.price_source == PRICED else n
    by = {r["model"]: r for r in rows}
    entries = [by[b["model"]] if by[b["model"]]["hours"] is not None else b for b in base]
    out = _summarise(dataclasses.replace(inst, gpus=max(1, gpus // n)), entries, plan, thresholds, buffer)
    split = [e["model"] for e in entries if e.get("data_parallel", 1) > 1]
    return dataclasses.replace(
        out, gpus=gpus, gpus_used=min(gpus, out.gpus_used * n), data_parallel=n,
        global_batch={e["model"]: e.get("global_batch") for e in entries if e["hours"] is not None},
        split=split, not_split={r["model"]: r["method"] for r in rows if r["model"] not in split})


def _helps(row: Instance, plain: Instance) -> bool:
    """A row across N GPUs helps where at least one model is split and the plan finishes sooner than one model per
    GPU, both its central wall time and the slow end of its range (the same instance: sooner is also cheaper)."""
    if not row.split or not row.wall_hours_range or not row.complete or row.wall_hours is None:
        return False
    if plain.wall_hours is None or not plain.wall_hours_range:
        return True
    return row.wall_hours < plain.wall_hours and row.wall_hours_range[1] < plain.wall_hours_range[1]
