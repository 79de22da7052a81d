"""Data parallelism projected: one model trained across N GPUs of one instance (torch DDP: each rank holds the
whole model, takes 1/N of the epoch's batches at the per-GPU batch, and all-reduces the gradients every step).

Per (model, GPU, N) of ``DP_SIZES`` up to the instance's GPUs (docs/projection.md, "Data parallelism"):

- **Step.** The 1-GPU projection's epoch (measured, scaled or projected: analysis/projection/projection.py) at
  the runs' per-GPU batch, its training pass over ``steps(N) / steps(1)`` of its steps (``steps(N) =
  ceil(steps(1) / N)``); its validation pass (the runs' ``eval_time_ms`` share) over 1/N of the held-out windows
  where the runs shard validation (param ``validation_sharded``), whole where they do not (:func:`validation_split`).
- **All-reduce.** DDP reduces the gradients in buckets (1 MiB first, then 25 MiB, torch's defaults: the
  gradient bytes split into a 1 MiB bucket and ``ceil(rest / 25 MiB)`` of at most 25 MiB, the last the rest).
  One bucket's all-reduce across N ranks takes ``2(N-1)/N x bucket bytes / busbw(bucket bytes)``: the bus
  bandwidth (``busbw``, the figure nccl-tests reports) read at the bucket's size on the board's published
  ``all_reduce_perf`` table(s), linear in log(size) between their rows (``allreduce_busbw_tables.json``; a table's
  time includes the per-call latency, so none is added). The tables are of 8 GPUs and read as such at N = 2 and
  4 too (busbw is N-independent by nccl-tests' definition; the ring's latency grows with N, so fewer ranks would
  be faster: conservative). A board with no table falls back to the large-message figure plus a per-call
  latency, with a wider range (below). The gradient bytes are the run's logged ``model_info.num_params`` x 4
  (autocast keeps fp32 weights, so the gradients DDP reduces are fp32 whatever the precision).
- **Overlap with the backward.** :func:`exposed_ms` follows the buckets: gradients are produced evenly over the
  backward (``BACKWARD_SHARE`` of the step), a bucket is reduced when the backward has filled it, one after
  another, and the exposed time (``comm_ms``) is how far the last ends after the backward; the sum of the
  buckets' times (:func:`allreduce_total_ms`) is what a step would expose with no overlap at all.
- **Range.** Low: the 1-GPU epoch's low end, the tables' high busbw at each bucket's size, the backward at 2/3 of
  the step; high: the epoch's high end, the tables' low busbw, the backward at 1/2 (less to hide behind). The
  tables' busbw range at a size is their spread there (least to most over a board's tables), each table's level
  also moved to the ends of the board's published large-message range (its largest busbw scaled to the low and
  the high figure, where they lie beyond it). A board with no table: the large-message figure at its high
  busbw (fast end) and at its low busbw x ``Board.fallback_widen`` (slow end: the most that figure understated a
  tabled board's time at DDP's bucket sizes), and the row says so.
- **Calibration.** A measured DDP run of the model on that GPU (``world_size`` > 1, per-epoch
  ``comm_exposed_ms``) scales the projected exposed time of every model on that GPU by measured / projected,
  and its own N is then ``measured``.
- **Epochs.** N ranks at the per-GPU batch B train at the global batch N x B; the epochs that needs are the
  training plan's (analysis/plan/plan.py, ``plan.data_parallel_epochs``: McCandlish et al. 2018 through the
  measured gradient noise scale), read from the model's plan.

A model whose runs do not declare it can be split (run param ``data_parallel_supported``, DQN's false) gets no
projection across GPUs, and says why. The bus bandwidths: ``calibration_data/allreduce_busbw.json`` (the
large-message figures and latency, per board, with the tables each board reads) and
``calibration_data/allreduce_busbw_tables.json`` (the size tables; sources and the dates read). Never imports
torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any, TypedDict

from trainbench.analysis.logged import logged_int
from trainbench.analysis.projection.rows import ProjectionDraft
from trainbench.analysis.report_types import Basis, Plan
from trainbench.config.analyze import DATA_PARALLEL_SIZES
from trainbench.core.vocab import ParamKey, Series, model_info

#: The numbers of GPUs one model is projected across (up to the instance's GPUs): the config's own set.
DP_SIZES = DATA_PARALLEL_SIZES
#: Bytes of one parameter's gradient: autocast (bf16/fp16) keeps fp32 weights, so DDP reduces fp32 gradients.
GRAD_BYTES_PER_PARAM = 4
#: torch DDP's bucket sizes (``bucket_cap_mb=25``; the first bucket ``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB).
BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20
#: The share of a training step spent in the backward pass, which hides the all-reduce: [low, central]. The
#: backward computes the gradients of the inputs and of the weights, twice the forward's matmul work, so 2/3 of
#: the compute; 1/2 where the optimiser step and the host take their share.
BACKWARD_SHARE = (0.5, 2.0 / 3.0)
BUSBW_FILE = Path(__file__).parent / "calibration_data" / "allreduce_busbw.json"
TABLES_FILE = Path(__file__).parent / "calibration_data" / "allreduce_busbw_tables.json"
#: The ends of a range: the central figure, the fast end (high busbw), the slow end (low busbw).
CENTRAL, FAST, SLOW = 0, 1, 2


@dataclass(frozen=True)
class BusbwTable:
    """One published nccl-tests ``all_reduce_perf`` table of a board: busbw by message size."""

    name: str
    gpus: int
    sizes: tuple[float, ...]  # bytes, ascending
    busbw: tuple[float, ...]  # GB/s at each size: 2(g-1)/g x size / time where the time is printed, g the GPUs
    source: str
    column: str = "out-of-place"  # which of the run's two busbw columns (in-place where only that is published)

    @property
    def plateau(self) -> float:
        """The table's largest busbw (GB/s): its large-message level."""
        return max(self.busbw)

    def at(self, nbytes: float) -> float:
        """busbw (GB/s) at ``nbytes``: linear in log(size) between the two rows around it; below the smallest row
        that row's time (a latency-bound call: busbw in proportion to the size); above the largest, its busbw."""
        sizes, bw = self.sizes, self.busbw
        if nbytes <= sizes[0]:
            return bw[0] * nbytes / sizes[0]
        if nbytes >= sizes[-1]:
            return bw[-1]
        i = next(k for k in range(1, len(sizes)) if sizes[k] >= nbytes)
        f = math.log(nbytes / sizes[i - 1]) / math.log(sizes[i] / sizes[i - 1])
        return bw[i - 1] + f * (bw[i] - bw[i - 1])


@dataclass(frozen=True)
class Board:
    """One GPU entry's board of NVLink-connected GPUs: its published all-reduce tables (busbw by message size), its
    large-message bus bandwidth and per-call latency (the tables' level spread, and the fallback without a
    table)."""

    gpu: str
    board: str
    max_gpus: int
    busbw_gbps: tuple[float, float]  # [low, high], GB/s, large messages
    latency_us: dict[int, float]  # per all-reduce call, by ranks
    sources: tuple[str, ...]
    tables: tuple[BusbwTable, ...] = ()
    tables_note: str = ""  # where a table was measured on another board than this one
    fallback_widen: float = 1.0  # the slow end's factor on the large-message figure, for a board with no table

    def latency(self, n: int) -> float:
        """The per-call latency at ``n`` ranks (µs): the figure at the nearest published count at or above it."""
        known = sorted(self.latency_us)
        return self.latency_us[next((k for k in known if k >= n), known[-1])]

    def busbw_at(self, nbytes: float) -> tuple[float, float, float]:
        """(central, low, high) busbw (GB/s) at a message of ``nbytes`` from the board's tables: central their mean
        there, low the least of them with each table's level moved down to the large-message range's low figure
        (where that lies below its largest busbw), high the most with it moved up to the high figure."""
        lo, hi = self.busbw_gbps
        vals = [(t.at(nbytes), t.plateau) for t in self.tables]
        return (sum(v for v, _ in vals) / len(vals), min(v * min(1.0, lo / p) for v, p in vals),
                max(v * max(1.0, hi / p) for v, p in vals))

    def bucket_ms(self, nbytes: float, n: int, end: int = CENTRAL) -> float:
        """One all-reduce of a bucket of ``nbytes`` across ``n`` ranks (ms) at the range's ``end`` (CENTRAL, FAST,
        SLOW): 2(N-1)/N x bytes / busbw(bytes) read on the tables; a board with no table: the large-message figure
        plus the per-call latency (:func:`allreduce_ms`), the slow end x ``fallback_widen``. 0 on one GPU."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        if self.tables:
            central, low, high = self.busbw_at(nbytes)
            bw = {CENTRAL: central, FAST: high, SLOW: low}[end]
            return ring_factor(n) * nbytes / (bw * 1e9) * 1e3
        lo, hi = self.busbw_gbps
        bw = ((lo + hi) / 2, hi, lo)[end]
        return allreduce_ms(nbytes, n, bw, self.latency(n)) * (self.fallback_widen if end == SLOW else 1.0)

    def basis(self, n: int) -> str:
        """How the row's all-reduce was read, in words (the range_basis and the row's notes)."""
        if not self.tables:
            lo, hi = self.busbw_gbps
            return (f"no published nccl-tests size table for the {self.gpu} board: the large-message busbw "
                    f"{lo:g}-{hi:g} GB/s plus {self.latency(n):g} us per call ({self.board}), the slow end "
                    f"x{self.fallback_widen:.2f} (the most that figure understated a tabled board's time at DDP's "
                    f"bucket sizes)")
        at = "; ".join(f"{lbl} {c:.3g} [{lo:.3g}, {hi:.3g}] GB/s" for lbl, (c, lo, hi) in
                       (("1 MiB", self.busbw_at(FIRST_BUCKET_BYTES)), ("25 MiB", self.busbw_at(BUCKET_BYTES))))
        names = ", ".join(f"{t.name} ({t.gpus} GPUs, {t.column})" for t in self.tables)
        return (f"busbw read per DDP bucket on the published nccl-tests all_reduce_perf table(s) {names}, linear "
                f"in log(size): {at}" + (f"; {self.tables_note}" if self.tables_note else ""))


def load_tables(path: Path | None = None) -> dict[str, BusbwTable]:
    """Every table of ``allreduce_busbw_tables.json``, by name: busbw from each row's time where the table prints
    it (``time_us`` among its ``columns``), else its busbw column."""
    raw = json.loads((path or TABLES_FILE).read_text())
    out = {}
    for name, t in raw["tables"].items():
        g, cols = int(t["gpus"]), list(t["columns"])
        size_at = cols.index("size_bytes")
        rows = sorted((float(r[size_at]), r) for r in t["rows"])
        if "time_us" in cols:
            at = cols.index("time_us")
            busbw = tuple(2.0 * (g - 1) / g * size / (float(r[at]) * 1e-6) / 1e9 for size, r in rows)
        else:
            busbw = tuple(float(r[cols.index("busbw_gbps")]) for _, r in rows)
        out[name] = BusbwTable(name=name, gpus=g, sizes=tuple(size for size, _ in rows), busbw=busbw,
                               source=f"{t['source']} (read {raw['read']})",
                               column="in-place" if t.get("in_place") else "out-of-place")
    return out


def fallback_widen(boards: list[Board]) -> float:
    """The most the large-message figure (its central busbw plus the per-call latency) understated a tabled
    board's all-reduce time at DDP's two bucket sizes on its table's GPUs; 1 when no board has a table."""
    ratios = [b.bucket_ms(size, n, CENTRAL) / allreduce_ms(size, n, sum(b.busbw_gbps) / 2, b.latency(n))
              for b in boards if b.tables for n in {min(b.max_gpus, t.gpus) for t in b.tables}
              for size in (FIRST_BUCKET_BYTES, BUCKET_BYTES)]
    return max([1.0, *ratios])


def load_boards(path: Path | None = None, tables_path: Path | None = None) -> dict[str, Board]:
    """Every board of ``allreduce_busbw.json``, by conf/hardware entry, with the tables it names."""
    raw = json.loads((path or BUSBW_FILE).read_text())
    tables = load_tables(tables_path)
    lat = {int(k): float(v) for k, v in raw["latency_us"]["by_ranks"].items()}
    boards = {name: Board(gpu=name, board=b["board"], max_gpus=int(b["max_gpus"]),
                          busbw_gbps=(float(b["busbw_gbps"][0]), float(b["busbw_gbps"][1])), latency_us=lat,
                          sources=tuple(b["sources"]) + (raw["latency_us"]["source"],)
                          + tuple(tables[t].source for t in b.get("tables", [])),
                          tables=tuple(tables[t] for t in b.get("tables", [])),
                          tables_note=b.get("tables_note", ""))
              for name, b in raw["boards"].items()}
    widen = fallback_widen(list(boards.values()))
    return {name: b if b.tables else replace(b, fallback_widen=widen) for name, b in boards.items()}


# --------------------------------------------------------------------------------------------------
# the all-reduce
# --------------------------------------------------------------------------------------------------


def ring_factor(n: int) -> float:
    """Bytes a ring all-reduce moves per rank, per byte reduced: 2(N-1)/N (0 on one GPU)."""
    return 2.0 * (n - 1) / n


def allreduce_ms(nbytes: float, n: int, busbw_gbps: float, latency_us: float) -> float:
    """One all-reduce of ``nbytes`` across ``n`` ranks at a fixed busbw: latency + 2(N-1)/N x bytes / busbw (0 on
    one GPU)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return latency_us / 1e3 + ring_factor(n) * nbytes / (busbw_gbps * 1e9) * 1e3


def buckets(grad_bytes: float) -> list[float]:
    """DDP's buckets in the order the backward fills them: 1 MiB, then 25 MiB each, the rest last."""
    out, left = [], float(grad_bytes)
    for cap in [FIRST_BUCKET_BYTES] + [BUCKET_BYTES] * max(0, math.ceil((grad_bytes - FIRST_BUCKET_BYTES)
                                                                        / BUCKET_BYTES)):
        if left <= 0:
            break
        out.append(min(cap, left))
        left -= cap
    return out


def allreduce_total_ms(grad_bytes: float, n: int, board: Board, end: int = CENTRAL) -> float:
    """The sum of the per-bucket all-reduce times of one step's gradients (ms): what a step exposes with no
    overlap with the backward. 0 on one GPU."""
    return sum(board.bucket_ms(size, n, end) for size in buckets(grad_bytes)) if n > 1 else 0.0


def bucketed_exposed_ms(grad_bytes: float, backward_ms: float, bucket_ms: Callable[[float], float]) -> float:
    """The all-reduce time of one step the backward does not hide: buckets ready as the backward produces their
    gradients (evenly over ``backward_ms``), reduced one after another (``bucket_ms(size)`` each); the exposed
    time is how far the last ends after the backward."""
    if grad_bytes <= 0:
        return 0.0
    ready = finish = 0.0
    for size in buckets(grad_bytes):
        ready += backward_ms * size / grad_bytes
        finish = max(finish, ready) + bucket_ms(size)
    return max(0.0, finish - backward_ms)


def exposed_ms(grad_bytes: float, n: int, busbw_gbps: float, latency_us: float, backward_ms: float) -> float:
    """:func:`bucketed_exposed_ms` at a fixed busbw and per-call latency (:func:`allreduce_ms` per bucket). 0 on
    one GPU."""
    if n <= 1 or grad_bytes <= 0:
        return 0.0
    return bucketed_exposed_ms(grad_bytes, backward_ms, lambda size: allreduce_ms(size, n, busbw_gbps, latency_us))


def step_comm_ms(grad_bytes: float, n: int, board: Board, step_ms: float) -> tuple[float, float, float]:
    """(central, low, high) exposed all-reduce ms of one step, each bucket read at its size on the board
    (:meth:`Board.bucket_ms`): central at the central busbw and the backward at 2/3 of the step, low at the fast
    end, high at the slow end with the backward at 1/2."""
    if n <= 1 or grad_bytes <= 0:
        return 0.0, 0.0, 0.0

    def exposed(end: int, backward_share: float) -> float:
        return bucketed_exposed_ms(grad_bytes, step_ms * backward_share, lambda size: board.bucket_ms(size, n, end))

    return exposed(CENTRAL, BACKWARD_SHARE[1]), exposed(FAST, BACKWARD_SHARE[1]), exposed(SLOW, BACKWARD_SHARE[0])


# --------------------------------------------------------------------------------------------------
# what the runs say
# --------------------------------------------------------------------------------------------------


def world_size(params: dict[str, str]) -> int:
    """A run's ranks (param ``world_size``); 1 for runs logged before it existed (and for an unreadable value)."""
    return logged_int(params.get(ParamKey.WORLD_SIZE), minimum=1) or 1


def split_support(runs: list[Any]) -> tuple[bool, str]:
    """(can the model be trained across GPUs, why): the runs' param ``data_parallel_supported``."""
    vals = {str(r.params.get(ParamKey.DATA_PARALLEL_SUPPORTED, "")).strip().lower() for r in runs}
    if "false" in vals:
        return False, "cannot be split across GPUs: the model declares it trains on one GPU only (run param " \
                      f"{ParamKey.DATA_PARALLEL_SUPPORTED}=false)"
    if vals == {"true"}:
        return True, f"run param {ParamKey.DATA_PARALLEL_SUPPORTED}=true"
    return False, ("cannot be split across GPUs: its runs do not declare data-parallel support (no run param "
                   f"{ParamKey.DATA_PARALLEL_SUPPORTED}: recorded before data parallelism existed, or a model "
                   "that does not declare it)")


def grad_bytes(runs: list[Any]) -> float | None:
    """Gradient bytes one all-reduce of a step moves per rank before the ring factor: the logged
    ``model_info.num_params`` x :data:`GRAD_BYTES_PER_PARAM`; None when no run logged it."""
    vals = [n for r in runs if (n := logged_int(r.params.get(model_info("num_params")), minimum=1))]
    return float(max(vals)) * GRAD_BYTES_PER_PARAM if vals else None


def per_gpu_batch(run: Any) -> int | None:
    """The batch one rank trains per step: ``batch_size_per_rank`` (a DDP run), else the resolved batch."""
    for key in (ParamKey.BATCH_SIZE_PER_RANK, ParamKey.BATCH_SIZE_RESOLVED, ParamKey.BATCH_SIZE):
        b = logged_int(run.params.get(key), minimum=1)
        if b:
            return b
    return None


def steps_per_epoch(run: Any, n: int = 1) -> int | None:
    """Optimiser steps of one rank's epoch at ``n`` ranks, each at the run's per-GPU batch: ceil(steps(1) / n),
    steps(1) = ceil(training windows (``model_info.train_windows``; else ``samples_per_epoch``) / batch)."""
    batch = per_gpu_batch(run)
    work = logged_int(run.params.get(model_info("train_windows"))) or logged_int(run.params.get(ParamKey.SAMPLES_PER_EPOCH))
    if not batch or not work or work <= 0:
        return None
    return math.ceil(math.ceil(work / batch) / max(1, n))


def _measured(run: Any, key: str) -> list[float]:
    s = run.measured(key) if hasattr(run, "measured") else run.series.get(key, [])
    return [float(x) for x in s if math.isfinite(float(x))]


def validation_split(run: Any, n: int) -> tuple[float, float, str]:
    """(the validation pass's share of the run's epoch, the part of that pass one of ``n`` ranks runs, what it
    rests on). The share: the measured ``eval_time_ms`` over the training pass plus it (0 without a validation
    pass). A run whose param ``validation_sharded`` is true validates 1/N of the held-out windows on each rank
    (``ceil(model_info.val_windows / N)`` of them); any other, a run logged before validation was sharded among
    them, validates all of them on every rank, so its validation is not divided."""
    evals = _measured(run, Series.EVAL_TIME_MS)
    train = _measured(run, Series.TRAIN_TIME_MS) or _measured(run, Series.EPOCH_TIME_MS)
    if not evals or not train or n <= 1 or median(evals) <= 0:
        return 0.0, 1.0, ""
    share = median(evals) / (median(train) + median(evals))
    if str(run.params.get(ParamKey.VALIDATION_SHARDED, "")).strip().lower() != "true":
        return share, 1.0, (f"validation ({share:.0%} of the epoch) whole on every rank: the runs validate unsharded "
                            f"(no run param {ParamKey.VALIDATION_SHARDED}=true)")
    windows = logged_int(run.params.get(model_info("val_windows")))
    if not windows:
        part = 1.0 / n
    else:  # fewer windows than ranks: every rank evaluates all of them
        part = math.ceil(windows / n) / windows if windows >= n else 1.0
    return share, part, f"validation ({share:.0%} of the epoch) sharded: x{part:.3g} of it per rank"


def calibration(dp_runs: list[Any], board: Board, matches: Any) -> tuple[float, str] | None:
    """(measured / projected exposed all-reduce, what it rests on) from the measured DDP runs (of any model) on
    the GPU whose device names ``matches`` accepts, projected on its ``board``; None without one that logged
    ``comm_exposed_ms``."""
    ratios, used = [], []
    for r in dp_runs:
        n = world_size(r.params)
        comm, epoch = _measured(r, Series.COMM_EXPOSED_MS), _measured(r, Series.EPOCH_TIME_MS)
        steps, gb = steps_per_epoch(r, n), grad_bytes([r])
        if n <= 1 or not matches(r.device) or not comm or not epoch or not steps or not gb:
            continue
        projected = step_comm_ms(gb, n, board, max(0.0, median(epoch) - median(comm)) / steps)[0] * steps
        if projected > 0:
            ratios.append(median(comm) / projected)
            used.append(f"{r.run_name} ({n} ranks, {r.model})")
    if not ratios:
        return None
    return float(median(ratios)), "calibrated on measured DDP run(s) " + ", ".join(used)


class MeasuredDp(TypedDict):
    """The measured DDP runs of one model at N ranks on a GPU: median epoch, its span, the exposed all-reduce."""

    epoch_ms: float
    epoch_ms_range: list[float]
    comm_ms: float | None
    runs: list[str]


def measured_dp(dp_runs: list[Any], n: int, matches: Callable[[str | None], bool]) -> MeasuredDp | None:
    """The median epoch and exposed all-reduce of the measured DDP runs of one model at ``n`` ranks on a GPU
    (``matches(device)``), or None."""
    runs = [r for r in dp_runs if world_size(r.params) == n and matches(r.device)]
    epochs = [x for r in runs for x in _measured(r, Series.EPOCH_TIME_MS)]
    if not epochs:
        return None
    comm = [x for r in runs for x in _measured(r, Series.COMM_EXPOSED_MS)]
    return {"epoch_ms": float(median(epochs)), "epoch_ms_range": [min(epochs), max(epochs)],
            "comm_ms": float(median(comm)) if comm else None, "runs": [r.run_name for r in runs]}


# --------------------------------------------------------------------------------------------------
# one (instance, model, N) row
# --------------------------------------------------------------------------------------------------


def epochs_scale(plan: Plan | None, n: int) -> tuple[float, float, float, str]:
    """(central, low, high) factor on the epochs at N ranks' global batch, from the plan's
    ``data_parallel_epochs`` (the noise scale's relation) and its range from the noise scale's standard error
    (``data_parallel_epochs_range``); without a measured noise scale the bounds of that relation, [1, N], central
    N (the conservative end), with the reason."""
    if n <= 1:
        return 1.0, 1.0, 1.0, ""
    f = ((plan.data_parallel_epochs if plan else None) or {}).get(str(n))
    if f is not None and plan is not None:
        note = plan.data_parallel_note
        lo, hi = (plan.data_parallel_epochs_range or {}).get(str(n)) or [f, f]
        return float(f), min(float(lo), float(f)), max(float(hi), float(f)), (
            f"epochs x {f:.3g} [{lo:.3g}, {hi:.3g}] at the global batch (the range from the noise scale's "
            "standard error)" + (f"; {note}" if note else ""))
    return float(n), 1.0, float(n), (f"epochs x [1, {n}] at the {n}x global batch: no measured gradient noise "
                                     f"scale to place it (the hours take x{n}, the conservative end)")


def across_method(method: str, n: int) -> str:
    """The method of a row across ``n`` GPUs from its 1-GPU row's: ``scaled to N GPUs from <that>`` when that was
    measured or scaled (a measured time with a modelled all-reduce), else ``projected across N GPUs: <that>``."""
    m = method.lower()
    if m.startswith((Basis.MEASURED, Basis.SCALED, "decision.catalogue")):
        return f"scaled to {n} GPUs from {method}"
    return f"projected across {n} GPUs: {method}"


def dp_row(base: ProjectionDraft, n: int, run: Any | None, plan: Plan | None, board: Board | None,
           support: tuple[bool, str], gb: float | None, calib: tuple[float, str] | None = None,
           measured: MeasuredDp | None = None) -> ProjectionDraft:
    """The projections[] row of ``base`` (the model's 1-GPU row on that instance) across ``n`` GPUs."""
    row: ProjectionDraft = {**base, "data_parallel": n, "comm_ms": None, "comm_ms_range": None, "notes": list(base["notes"]),
           "epoch_ms": None, "epoch_ms_range": None, "hours": None, "hours_range": None}
    batch = per_gpu_batch(run) if run is not None else None
    row["global_batch"] = None if batch is None else batch * n
    steps1, steps_n = (steps_per_epoch(run), steps_per_epoch(run, n)) if run is not None else (None, None)
    why = (None if support[0] else support[1]) or (
        None if board is not None else f"not projected: no published all-reduce bus bandwidth for a board of "
                                       f"{base['gpu']} (analysis/projection/calibration_data/allreduce_busbw.json)") or (
        None if n <= board.max_gpus else f"not projected: a {base['gpu']} board holds {board.max_gpus} GPUs") or (
        None if base["epoch_ms"] is not None else base["method"]) or (
        None if gb is not None else "not projected: the runs logged no model_info.num_params (gradient bytes)") or (
        None if steps1 and steps_n else "not projected: steps per epoch unknown (no model_info.train_windows "
                                        "or samples_per_epoch, or no batch)")
    if why is not None:
        row["method"] = why if why.startswith("not projected") else f"not projected: {why}"
        return row
    assert board is not None and gb is not None and steps1 and steps_n and run is not None
    share = steps_n / steps1
    lo1, hi1 = base["epoch_ms_range"] or [base["epoch_ms"]] * 2
    comm = [c * steps_n for c in step_comm_ms(gb, n, board, base["epoch_ms"] / steps1)]
    comm[1] = step_comm_ms(gb, n, board, lo1 / steps1)[1] * steps_n
    comm[2] = step_comm_ms(gb, n, board, hi1 / steps1)[2] * steps_n
    basis = (f"ring all-reduce of {gb / 1e6:.3g} MB of fp32 gradients in {len(buckets(gb))} DDP bucket(s) x "
             f"2({n}-1)/{n}, {board.basis(n)}; the backward hiding all but what the last buckets leave exposed")
    if calib is not None:
        comm = [c * calib[0] for c in comm]
        basis += f"; x{calib[0]:.3g}, {calib[1]}"
    f, f_lo, f_hi, f_note = epochs_scale(plan, n)
    if measured is not None:
        m_comm = measured["comm_ms"]
        row.update(epoch_ms=measured["epoch_ms"], epoch_ms_range=measured["epoch_ms_range"],
                   comm_ms=m_comm if m_comm is not None else comm[0],
                   comm_ms_range=[m_comm, m_comm] if m_comm is not None else [comm[1], comm[2]],
                   method=f"measured ({n} ranks)",
                   range_basis=f"the measured DDP run(s)' epochs: {', '.join(measured['runs'])}")
    else:  # the training pass over steps(N) of its steps, the validation pass divided where the runs divide it
        val, val_part, val_note = validation_split(run, n)
        share = (1.0 - val) * share + val * val_part
        if val_note:
            row["notes"].append(val_note)
        row.update(epoch_ms=base["epoch_ms"] * share + comm[0],
                   epoch_ms_range=[lo1 * share + comm[1], hi1 * share + comm[2]], comm_ms=comm[0],
                   comm_ms_range=[comm[1], comm[2]], method=across_method(base["method"], n),
                   range_basis=f"{base['range_basis']}; all-reduce: {basis}")
    if base["hours"] is not None:
        h_lo, h_hi = base["hours_range"] or [base["hours"]] * 2
        row["hours"] = base["hours"] * row["epoch_ms"] / base["epoch_ms"] * f
        row["hours_range"] = [h_lo * row["epoch_ms_range"][0] / lo1 * f_lo if lo1 else None,
                              h_hi * row["epoch_ms_range"][1] / hi1 * f_hi if hi1 else None]
    row["notes"].append(f"{n} GPUs: all-reduce {board.basis(n)}")
    row["notes"].append(f"{n} GPUs: {steps_n} steps per rank per epoch at batch {per_gpu_batch(run)} per GPU "
                        f"(global {row['global_batch']}); {f_note}")
    return row
