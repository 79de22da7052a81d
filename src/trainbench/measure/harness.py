"""The measured epoch loop: warmup, then measured epochs, timed correctly, with memory and stability.

Per epoch, in this order::

    memory.reset()                                     # harness work (counted as overhead)
    timer.start()                                      # synchronises the device first
    out = trainable.train_epoch()                      # the model's work only: device tensors back
    ms = timer.stop()                                  # returns after all device work has finished
    timer.start(); val = trainable.eval_epoch(); eval_ms = timer.stop()   # supervised models only
    scalars = read(out, val)                           # one host transfer for all scalars
    peaks, NVML sample, machine load, tracker.log_epoch(...)   # harness work, buffered, outside the timer
    progress: the bar on a terminal, else an epoch line at a bounded rate (core/progress.py)
    stop rule (between epochs: trainbench.measure.stoprule)

Nothing that talks to MLflow, writes a file or reads a tensor happens between ``start`` and ``stop``.
A model with a held-out split (Mamba-2, TFT, TLOB) has ``eval_epoch``: its validation pass is timed
separately (``eval_time_ms``, synchronised the same way, outside the training timer) and returns
``val_loss`` (and other ``val_*`` scalars) as device tensors. ``epoch_time_ms`` stays the training pass;
the time an epoch of the training plan costs, which the stop rule and the projections use, is
``epoch_time_ms + eval_time_ms``. RL models have no validation pass (their epoch is defined in their
module: a fixed number of environment steps and updates); the harness logs ``train_samples_per_s`` and
``env_steps_per_s`` beside ``samples_per_s`` from the trainable's ``train_samples`` and ``env_steps``.
The harness's own time (everything outside the timed regions inside the loop) is reported as
``harness_overhead_pct`` of the loop's wall time.

The summary's ``epoch_time_ms_mean`` (and std, p50, p95, p99) is over the measured epochs the analysis uses
under its default rule (:mod:`trainbench.core.contamination_policy`, ``auto``): contaminated epochs are left out when
at least three clean ones exist. ``epoch_time_ms_mean_raw`` is the mean over every finite measured epoch, and
``contaminated_used`` says whether the summary includes contaminated epochs.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainbench.core.contamination_policy import kept as kept_epochs
from trainbench.core.errors import PluginError
from trainbench.core.progress import EpochLog, duration, interactive
from trainbench.core.trainable import Evaluates, Trainable, work_counts
from trainbench.core.vocab import (
    HARNESS_OUTCOMES,
    MemoryKind,
    Outcome,
    Phase,
    Series,
    StopReason,
    Summary,
    Tag,
    at_batch,
    max_of,
    per_s,
)
from trainbench.measure.distributed import DistContext, slowest
from trainbench.measure.load import LoadSampler, contaminated, load_summary
from trainbench.measure.peak_memory import MemoryProbe
from trainbench.measure.stability import first_nonfinite, gradient_health, loss_trend
from trainbench.measure.stoprule import StopRule
from trainbench.measure.timing import EpochTimer, synchronize

log = logging.getLogger(__name__)
#: The latency budget's clock (tests replace it).
_clock = time.perf_counter

OUTCOMES = HARNESS_OUTCOMES
#: The stop rule's reasons, numbered for the ranks of a data-parallel job to agree on one.
_STOP_CODES = (StopReason.MAX_EPOCHS, StopReason.CONVERGED, StopReason.BUDGET)
#: Why a data-parallel run fails whose model validated without sharding (each rank over every window).
_UNSHARDED = ("the model declares data_parallel=True but its validation pass did not shard the held-out windows "
              "across the ranks: call trainbench.api.evaluate(..., dist=ctx.dist) in eval_epoch (see "
              "trainbench.core.trainable.DATA_PARALLEL)")


class EpochSink:
    """Where per-epoch metrics go (the MLflow writer, or nothing in a bare benchmark loop)."""

    def log_epoch(self, step: int, metrics: dict[str, float]) -> None: ...

    def flush(self) -> None: ...


@dataclass
class HarnessResult:
    outcome: str
    warmup_epochs: int
    series: dict[str, list[float]] = field(default_factory=dict)  # per-epoch metrics, warmup included
    summary: dict[str, float] = field(default_factory=dict)
    stability: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    memory_kind: str = MemoryKind.HOST
    #: Why the measured epochs ended: converged | budget | max_epochs (trainbench.measure.stoprule), or the
    #: outcome (oom, diverged, failed, interrupted) when the run did not complete.
    stop_reason: str = StopReason.MAX_EPOCHS
    #: Seconds of the ``warmup`` and ``measured_epochs`` phases (wall time, harness included).
    phase_s: dict[str, float] = field(default_factory=dict)
    #: Under data parallelism: each rank's own epoch times (ms, warmup included), by rank; the series'
    #: ``epoch_time_ms`` is the slowest of them.
    rank_epoch_ms: list[list[float]] = field(default_factory=list)

    @property
    def epochs_run(self) -> int:
        return len(self.series.get(Series.EPOCH_TIME_MS, []))


def read_scalars(out: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """All of an epoch's scalars in one device-to-host transfer."""
    keys = list(out)
    tensors = [v for v in out.values() if isinstance(v, torch.Tensor)]
    if not tensors:
        return {k: float(v) for k, v in out.items()}  # type: ignore[arg-type]
    dev = tensors[0].device
    stacked = torch.stack([v.detach().float().reshape(()) if isinstance(v, torch.Tensor)
                           else torch.tensor(float(v), device=dev) for v in out.values()])
    return dict(zip(keys, stacked.tolist(), strict=True))


def is_oom(e: BaseException) -> bool:
    if isinstance(e, torch.OutOfMemoryError):
        return True
    msg = str(e).lower()
    # CUDA: "CUDA out of memory", "CUDA error: out of memory"; CPU: "DefaultCPUAllocator: can't allocate memory"
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def summarize(times_ms: list[float], contaminated_flags: list[float] | None = None) -> dict[str, float]:
    """Summary metrics of the measured epochs (warmup excluded), over the epochs the analysis uses: finite,
    and without the contaminated ones where enough clean ones exist (:mod:`trainbench.core.contamination_policy`,
    ``auto``). ``epoch_time_ms_mean_raw`` is the mean of every finite measured epoch."""
    if not times_ms:
        return {}
    raw = np.asarray(times_ms, dtype=float)
    k = kept_epochs(raw, contaminated_flags)
    x = raw[k.mask]
    out = {Summary.EPOCH_TIME_MS_MEAN_RAW: float(raw[np.isfinite(raw)].mean()) if np.isfinite(raw).any()
           else float("nan"), Summary.CONTAMINATED_USED: float(k.used_contaminated)}
    if not x.size:
        return out
    return {**out,
        Summary.EPOCH_TIME_MS_MEAN: float(x.mean()),
        Summary.EPOCH_TIME_MS_STD: float(x.std(ddof=1)) if x.size > 1 else 0.0,
        Summary.EPOCH_TIME_MS_P50: float(np.percentile(x, 50)),
        Summary.EPOCH_TIME_MS_P95: float(np.percentile(x, 95)),
        Summary.EPOCH_TIME_MS_P99: float(np.percentile(x, 99)),
    }


def run_epochs(trainable: Trainable, device: torch.device, epochs: int, warmup_epochs: int,
               sink: EpochSink | None = None, sample_device: Callable[[], dict[str, float]] | None = None,
               progress: bool = False, desc: str = "", stop: StopRule | None = None,
               progress_every_epochs: int = 10, progress_every_s: float = 30.0,
               dist: DistContext | None = None, load: LoadSampler | None = None,
               on_loop_end: Callable[[], None] | None = None) -> HarnessResult:
    """Run ``warmup_epochs + epochs`` epochs of ``trainable``; never raises for a training failure.

    ``epochs`` is a maximum: ``stop`` (:class:`StopRule`) may end the measurement earlier, checked between
    epochs. ``res.stop_reason`` says why it ended: ``converged``, ``budget``, ``max_epochs`` or the outcome.

    The outcome is ``completed``, ``oom``, ``diverged`` (a non-finite loss or gradient), ``failed``
    (any other exception; the message is kept) or ``interrupted`` (KeyboardInterrupt / SIGTERM).
    The epochs measured before the failure are kept in the result.

    Progress: a bar on a terminal (``progress``); otherwise an epoch line every ``progress_every_epochs``
    epochs or ``progress_every_s`` seconds (both 0: none), and a line at the start and end of the warmup and
    of the measured epochs with their durations (core/progress.py).

    ``dist`` (a rank of a data-parallel job, :mod:`trainbench.measure.distributed`): after each epoch, outside
    the timed regions, the ranks exchange their epoch, validation and exposed-communication times (the epoch's
    ``epoch_time_ms`` and ``eval_time_ms`` are the slowest rank's, ``comm_exposed_ms`` the largest), average
    the epoch's scalars, and take rank 0's stop decision; each rank's own times are kept in
    ``res.rank_epoch_ms``. The validation pass is the rank's share of the held-out windows, its sums added
    over the ranks inside the pass (``evaluate(..., dist=...)``); a model whose pass did not shard fails the run.

    ``load``: the run's :class:`~trainbench.measure.load.LoadSampler`, started when the run opened, so that the
    first epoch's load figures cover more than a few clock ticks (/proc/stat counts in 10 ms ticks: one tick of
    a short first epoch can read an idle machine on a busy one, and the next epochs under 0.1 s carry it); by
    default one started here.

    ``on_loop_end``: called once the epoch loop has ended, however it ended, before the result is summarised
    (train.py: from there on a stop signal is noted, not raised, so that it cannot cut the recording of what
    was measured). A stop signal that lands while a failure is being handled, or in that call before it took
    effect, leaves the failure as the outcome (or makes a completed loop ``interrupted``) and the call is made
    again: what was measured is summarised whatever signal arrives.
    """
    loop = _Loop(trainable, device, epochs, warmup_epochs, sink or EpochSink(), sample_device, stop or StopRule(),
                 dist, load if load is not None else LoadSampler(), _progress(warmup_epochs + epochs, desc, progress),
                 progress_every_epochs, progress_every_s, desc)
    loop.run()
    while on_loop_end is not None:
        try:
            on_loop_end()
            break
        except KeyboardInterrupt:  # landed before the call took effect: taken as above, and the call made again
            _interrupted(loop.res)
    return loop.summarise()


class _Loop:
    """One run of :func:`run_epochs`: the timed epoch, the exchange between ranks, the epoch's record, the stop
    rule between epochs, and the summary; the harness's own time is counted in ``harness_ns``."""

    def __init__(self, trainable: Trainable, device: torch.device, epochs: int, warmup_epochs: int,
                 sink: EpochSink, sample_device: Callable[[], dict[str, float]] | None, stop: StopRule,
                 dist: DistContext | None, machine: LoadSampler, bar: Any, progress_every_epochs: int,
                 progress_every_s: float, desc: str) -> None:
        self.trainable, self.device, self.epochs, self.warmup_epochs = trainable, device, epochs, warmup_epochs
        self.sink, self.sample_device, self.stop, self.dist = sink, sample_device, stop, dist
        self.machine = machine  # per-epoch load, read after the timer
        self.timer, self.memory = EpochTimer(device), MemoryProbe(device)
        self.samples = int(trainable.samples_per_epoch)
        self.evaluate = trainable.eval_epoch if isinstance(trainable, Evaluates) else None
        self.rates = {per_s(k): n for k, n in work_counts(trainable).items()}
        self.res = HarnessResult(outcome=Outcome.COMPLETED, warmup_epochs=warmup_epochs, memory_kind=self.memory.kind)
        self.bar = bar
        total = warmup_epochs + epochs
        self.lines = (EpochLog(total, warmup_epochs, desc, progress_every_epochs, progress_every_s)
                      if bar is None and (progress_every_epochs > 0 or progress_every_s > 0) else None)
        self.harness_ns = 0
        self.phase_t0 = time.perf_counter()
        self.loop_t0 = 0

    # the epoch loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """The warmup and measured epochs; a failure or a stop signal ends them with its outcome."""
        res = self.res
        if self.warmup_epochs:
            log.info("phase warmup: started (%d epochs)", self.warmup_epochs)
        else:
            log.info("phase measured epochs: started (at most %d)", self.epochs)
        self.loop_t0 = time.perf_counter_ns()
        try:
            try:
                for epoch in range(self.warmup_epochs + self.epochs):
                    if not self.epoch(epoch):
                        break
            except KeyboardInterrupt:
                _interrupted(res)
            except Exception as e:  # the run is recorded with its outcome; the sweep goes on
                self.failed(e)
            finally:
                if self.bar is not None:
                    self.bar.close()
        except KeyboardInterrupt:  # a stop signal while a failure was being handled (a data-parallel rank whose
            _interrupted(res)      # peer died: the broken collective, then torchrun's SIGTERM): the failure stays

    def epoch(self, epoch: int) -> bool:
        """One epoch: timed, exchanged, recorded, then the stop rule; whether the loop goes on."""
        h0 = time.perf_counter_ns()
        self.memory.reset()
        self.harness_ns += time.perf_counter_ns() - h0
        out, ms, eval_ms = self.timed_epoch()
        h0 = time.perf_counter_ns()
        comm_ms = None
        if self.dist is not None:  # after the timers: the slowest rank's times, the ranks' mean scalars
            out, ms, eval_ms, comm_ms = self.exchange(out, ms, eval_ms)
        values = self.record(epoch, out, ms, eval_ms, comm_ms)
        bad = first_nonfinite(values)
        self.progress(epoch, values, ms, eval_ms)
        if bad is None and epoch >= self.warmup_epochs:  # the stop rule, between epochs
            self.check_stop(ms, eval_ms)
        self.harness_ns += time.perf_counter_ns() - h0
        if bad is not None:
            self.res.outcome = Outcome.DIVERGED
            self.res.error = f"non-finite {bad} at epoch {epoch} ({values[bad]})"
            log.error("run diverged: %s", self.res.error)
            return False
        if self.res.stop_reason != StopReason.MAX_EPOCHS:
            log.info("measurement stopped after %d measured epochs: %s", epoch + 1 - self.warmup_epochs,
                     self.res.stop_reason)
            return False
        return True

    def timed_epoch(self) -> tuple[dict[str, Any], float, float | None]:
        """The training pass and the validation pass, each timed until its device work has finished."""
        self.timer.start()
        out = self.trainable.train_epoch()
        ms = self.timer.stop()
        eval_ms = None
        if self.evaluate is not None:
            self.timer.start()
            out = {**out, **self.evaluate()}
            eval_ms = self.timer.stop()
            if self.dist is not None and not self.dist.sharded_evals:
                raise PluginError(_UNSHARDED)
        return out, ms, eval_ms

    def exchange(self, out: dict[str, Any], ms: float, eval_ms: float | None
                 ) -> tuple[dict[str, Any], float, float | None, float]:
        """Between the ranks, after the timers: every rank's times (each rank's epoch kept), the slowest rank's
        epoch and validation, the largest exposed communication, and the ranks' mean scalars."""
        assert self.dist is not None
        per_rank = self.dist.exchange([ms, math.nan if eval_ms is None else eval_ms, self.dist.comm.take_epoch_ms()])
        if not self.res.rank_epoch_ms:
            self.res.rank_epoch_ms = [[] for _ in per_rank]
        for mine, theirs in zip(self.res.rank_epoch_ms, per_rank, strict=True):
            mine.append(theirs[0])
        eval_ms = None if eval_ms is None else slowest(per_rank, 1)
        return self.dist.average(out), slowest(per_rank, 0), eval_ms, slowest(per_rank, 2)

    def record(self, epoch: int, out: dict[str, Any], ms: float, eval_ms: float | None,
               comm_ms: float | None) -> dict[str, float]:
        """The epoch's metrics (its scalars read in one transfer, rates, memory, device and machine samples)
        appended to the series and handed to the sink; returns the scalars."""
        values = read_scalars(out)
        metrics = {Series.EPOCH_TIME_MS: ms, **values,
                   Series.SAMPLES_PER_S: self.samples / (ms / 1e3) if ms > 0 else float("nan")}
        metrics.update({k: n / (ms / 1e3) if ms > 0 else float("nan") for k, n in self.rates.items()})
        if eval_ms is not None:
            metrics[Series.EVAL_TIME_MS] = eval_ms
        if comm_ms is not None:
            metrics[Series.COMM_EXPOSED_MS] = comm_ms
        metrics.update(self.memory.peak())
        if self.sample_device is not None:
            metrics.update(self.sample_device())
        metrics.update(self.machine.sample())
        metrics[Series.CONTAMINATED] = contaminated(metrics, self.device.type)
        for k, v in metrics.items():
            self.res.series.setdefault(k, []).append(v)
        self.sink.log_epoch(epoch, metrics)
        return values

    def progress(self, epoch: int, values: dict[str, float], ms: float, eval_ms: float | None) -> None:
        """The bar or the epoch line, and the phase lines at the end of the warmup."""
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{values.get(Series.LOSS, float('nan')):.4g}", ms=f"{ms:.1f}",
                                 warmup=epoch < self.warmup_epochs, refresh=False)
            self.bar.update(1)
        elif self.lines is not None:
            self.lines.update(epoch, ms, values.get(Series.LOSS, math.nan))
        if epoch + 1 == self.warmup_epochs:
            self.res.phase_s[Phase.WARMUP] = time.perf_counter() - self.phase_t0
            log.info("phase warmup: done in %.1f s", self.res.phase_s[Phase.WARMUP])
            self.phase_t0 = time.perf_counter()
            pace = self.epochs * (ms + (eval_ms or 0.0)) / 1e3
            budget = self.stop.budget_s if getattr(self.stop, "budget_s", None) else None
            log.info("phase measured epochs: started (at most %d; about %s at the last warmup epoch's pace%s)",
                     self.epochs, duration(pace), f", at most {duration(budget)} by the budget" if budget else "")

    def check_stop(self, ms: float, eval_ms: float | None) -> None:
        """The stop rule on this epoch (training plus validation); rank 0's decision on every rank (the budget
        reads each rank's clock)."""
        res = self.res
        self.stop.add(ms + (eval_ms or 0.0))
        res.stop_reason = self.stop.check((time.perf_counter_ns() - self.loop_t0) / 1e9) or res.stop_reason
        if self.dist is not None:
            res.stop_reason = _STOP_CODES[self.dist.agree(_STOP_CODES.index(res.stop_reason))]

    def failed(self, e: Exception) -> None:
        """The outcome of an exception in an epoch: ``oom`` (with the peak at the failure) or ``failed``."""
        res = self.res
        if is_oom(e):
            res.outcome = Outcome.OOM
            res.error = f"out of memory at epoch {len(res.series.get(Series.EPOCH_TIME_MS, []))}: {str(e)[:500]}"
            if self.device.type == "cuda":
                res.summary[Summary.PEAK_VRAM_MB_AT_FAILURE] = torch.cuda.max_memory_allocated(self.device) / 2**20
                torch.cuda.empty_cache()
            else:
                res.summary[Summary.PEAK_HOST_MB_AT_FAILURE] = self.memory.peak()[Series.PEAK_HOST_MB]
        else:
            res.outcome = Outcome.FAILED
            res.error = f"{type(e).__name__}: {e}"
            log.exception("training failed")

    # the summary --------------------------------------------------------------------------------

    def summarise(self) -> HarnessResult:
        """The result once the loop (and its end call) is over: the flushed sink, the phase's duration, the
        summary over the measured epochs the analysis uses, and the stability."""
        res, series, warmup_epochs = self.res, self.res.series, self.warmup_epochs
        loop_ns = time.perf_counter_ns() - self.loop_t0
        h0 = time.perf_counter_ns()
        self.sink.flush()
        self.harness_ns += time.perf_counter_ns() - h0
        loop_ns += time.perf_counter_ns() - h0
        if res.outcome != Outcome.COMPLETED:
            res.stop_reason = res.outcome
        times = series.get(Series.EPOCH_TIME_MS, [])
        measured = times[warmup_epochs:]
        in_measured = len(times) > warmup_epochs or not warmup_epochs
        res.phase_s[Phase.MEASURED_EPOCHS if in_measured else Phase.WARMUP] = time.perf_counter() - self.phase_t0
        log.info("phase %s: %s after %.1f s, %d measured epoch(s) (%s)",
                 "measured epochs" if in_measured else "warmup",
                 "done" if res.outcome == Outcome.COMPLETED else "stopped", time.perf_counter() - self.phase_t0,
                 len(measured), res.stop_reason)
        flags = series.get(Series.CONTAMINATED, [])[warmup_epochs:]
        res.summary.update(summarize(measured, flags))
        res.summary.update(_eval_summary(measured, series.get(Series.EVAL_TIME_MS, [])[warmup_epochs:], flags))
        res.summary.update(self.stop.summary())
        res.summary[Summary.EPOCHS_MEASURED] = float(len(measured))
        res.summary[Summary.HARNESS_OVERHEAD_PCT] = 100.0 * self.harness_ns / loop_ns if loop_ns else 0.0
        res.summary.update(load_summary(series, warmup_epochs))
        peak_key = self.memory.metric
        if series.get(peak_key):
            res.summary[max_of(peak_key)] = float(max(series[peak_key]))
        if series.get(Series.GPU_POWER_W):
            res.summary[Summary.GPU_POWER_W_MEAN] = float(np.mean(series[Series.GPU_POWER_W]))
        trend = loss_trend(series.get(Series.LOSS, [])[warmup_epochs:])
        res.stability = {Tag.LOSS_TREND: trend.trend, Summary.LOSS_START: trend.start, Summary.LOSS_END: trend.end,
                         Tag.GRADIENT_HEALTH: gradient_health(series.get(Series.GRAD_NORM, [])[warmup_epochs:])}
        return res


def _eval_summary(measured: list[float], evals: list[float], flags: list[float]) -> dict[str, float]:
    """The validation pass's mean and the epoch's total (training plus validation), over the same epochs as
    ``epoch_time_ms_mean``; empty without a validation pass."""
    if not evals:
        return {}
    use = kept_epochs(measured, flags).mask[:len(evals)]
    ev = np.asarray(evals, dtype=float)[use]
    totals = (np.asarray(measured[:len(evals)], dtype=float) + np.asarray(evals, dtype=float))[use]
    if not ev.size:
        return {}
    return {Summary.EVAL_TIME_MS_MEAN: float(np.mean(ev)), Summary.EPOCH_TOTAL_MS_MEAN: float(np.mean(totals)),
            Summary.EPOCH_TOTAL_MS_P50: float(np.percentile(totals, 50))}


def _interrupted(res: HarnessResult) -> None:
    """A stop signal ended the epoch loop: the outcome, unless a failure already is."""
    if res.outcome == Outcome.COMPLETED:
        res.outcome, res.error = Outcome.INTERRUPTED, "interrupted by the user or a signal"


def measure_latency(trainable: Trainable, device: torch.device, batch_sizes: list[int], warmup: int,
                    samples: int, budget_s: float | None = None) -> dict[str, float]:
    """Forward latency at each batch size: untimed warmup, then device-synchronised samples.

    ``budget_s``: the time the passes may take, shared equally by the batch sizes; at each, a pass starts only
    while the time spent there plus one more pass (their mean so far) fits its share, the first warmup pass
    and the first sample always (a large training batch on a CPU: a pass can take seconds). The log says
    when the budget cut the samples.

    Returns ``infer_latency_ms_p50/_p99`` and ``infer_throughput_per_s`` for batch 1 (the trading case)
    and the same keys suffixed ``_b<N>`` for the others.
    """
    out: dict[str, float] = {}
    timer = EpochTimer(device)
    share = None if budget_s is None else budget_s / max(1, len(batch_sizes))
    for bs in batch_sizes:
        fn = trainable.inference(bs)
        t0, calls = _clock(), 0
        for _ in range(warmup):
            if not _fits(share, t0, calls):
                break
            fn()
            calls += 1
        synchronize(device)
        ts: list[float] = []
        for _ in range(samples):
            if ts and not _fits(share, t0, calls):
                break
            timer.start()
            fn()
            ts.append(timer.stop())
            calls += 1
        if len(ts) < samples:
            log.info("latency at batch %d: the budget (%.3g s) allowed %d of %d samples", bs, share, len(ts), samples)
        p50 = float(np.percentile(ts, 50))
        out[at_batch(Summary.INFER_LATENCY_MS_P50, bs)] = p50
        out[at_batch(Summary.INFER_LATENCY_MS_P99, bs)] = float(np.percentile(ts, 99))
        out[at_batch(Summary.INFER_THROUGHPUT_PER_S, bs)] = bs / (statistics.mean(ts) / 1e3) if statistics.mean(ts) > 0 else 0.0
    return {k: v for k, v in out.items() if math.isfinite(v)}


def _fits(share: float | None, t0: float, calls: int) -> bool:
    """Whether one more pass fits ``share`` seconds from ``t0``, at the mean of the ``calls`` passes so far
    (the first always does; no share: always)."""
    if share is None or calls == 0:
        return True
    spent = _clock() - t0
    return spent + spent / calls <= share


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled or not interactive():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="epoch", leave=False, dynamic_ncols=True)
