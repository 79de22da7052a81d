"""Fitting training into a memory budget: the budget cap, the `auto` batch search, gradient accumulation.

- :func:`apply_budget`: on a GPU, cap this process's caching allocator to ``hardware.vram_budget_mb``
  (``torch.cuda.set_per_process_memory_fraction`` of the device's real total), so a large GPU stands in
  for a small one. An allocation past the cap raises ``torch.OutOfMemoryError`` exactly as the small
  card would.
- :func:`search_batch_size`: the largest batch size for which ``probe(batch_size)`` says it fits, by
  doubling from ``start`` and then bisecting between the last fit and the first failure. Pure: the probe
  is a callable, so a test can hand it a fake allocator. It assumes that fitting is monotone in the
  batch size (a bigger batch never needs less memory).
- :func:`measured_probe`: the GPU probe: build the model at that batch size, run a few real training
  steps, and call it a fit when nothing ran out of memory and the reserved peak stayed within
  ``budget x (1 - margin)``. A probe that runs out of memory frees everything (the trainable, the
  exception's frames, the allocator's cache) before the next one.
- :func:`predicted_probe`: the same question answered by :mod:`trainbench.measure.predict` (no GPU).
- :func:`plan_batches`: micro-batch, accumulation steps and optimiser batch from ``model.batch_size``,
  ``trainer.grad_accum`` and ``trainer.effective_batch``.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from trainbench.core.errors import ConfigError
from trainbench.core.host_memory import host_memory_available
from trainbench.core.trainable import StepsForMemory, Trainable
from trainbench.core.vocab import BatchSizeSource, ParamKey, Summary, Tag, auto_batch
from trainbench.measure.harness import is_oom
from trainbench.measure.predict import Predictor, check_step_outputs

log = logging.getLogger(__name__)

MB = 2 ** 20


# Control flow inside the batch search, never seen by the user: resolve() turns it into a ConfigError.
class DoesNotFit(RuntimeError):
    """Not even the smallest batch fits the memory budget."""


# --------------------------------------------------------------------------------------------------
# the budget
# --------------------------------------------------------------------------------------------------


def budget_mb(vram_budget_mb: int | None, vram_mb: int | None, device: torch.device) -> tuple[float | None, str]:
    """The memory budget of a run and where it comes from.

    ``hardware.vram_budget_mb`` when set; else ``hardware.vram_mb`` (the card the hardware profile
    describes); else, on a GPU, the device's total; else None (a CPU run with no card in view).
    """
    if vram_budget_mb is not None:
        return float(vram_budget_mb), "hardware.vram_budget_mb"
    if vram_mb is not None:
        return float(vram_mb), "hardware.vram_mb"
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / MB, "device total"
    return None, "none"


def apply_budget(device: torch.device, budget: float | None) -> dict[str, Any]:
    """Cap the caching allocator of ``device`` to ``budget`` MB; return what to record with the run.

    Returns ``vram_total_mb`` (the device's real total), ``vram_budget_mb`` and ``vram_fraction`` (the
    fraction applied; 1.0 when the budget is at least the total, which leaves the device uncapped).
    On a CPU nothing is capped and nothing is returned.
    """
    if device.type != "cuda" or budget is None:
        return {}
    total = torch.cuda.get_device_properties(device).total_memory / MB
    fraction = min(1.0, budget / total)
    if budget > total:
        log.warning("memory budget %.0f MB is more than the device's %.0f MB: the device is not capped",
                    budget, total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return {ParamKey.VRAM_TOTAL_MB: round(total, 1), ParamKey.VRAM_BUDGET_MB: round(min(budget, total), 1),
            ParamKey.VRAM_FRACTION: round(fraction, 6)}


def free_device(device: torch.device) -> None:
    """Release what a dropped model held: collect cycles, return cached blocks, reset the peak."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# --------------------------------------------------------------------------------------------------
# micro-batches and accumulation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchPlan:
    """``accum`` micro-batches of at most ``micro`` samples make one optimiser step of ``optimiser``."""

    micro: int
    accum: int
    optimiser: int


def plan_batches(micro_max: int, grad_accum: int = 1, effective_batch: int | None = None) -> BatchPlan:
    """The batch plan of a run.

    - ``effective_batch`` None: micro-batches of ``micro_max``, ``grad_accum`` of them per step.
    - ``effective_batch`` E: ``accum = ceil(E / micro_max)`` micro-batches per step, of ``E / accum``
      samples (sizes differ by at most one), so the optimiser sees exactly E samples per step.
    """
    if micro_max < 1 or grad_accum < 1:
        raise ValueError(f"micro_max ({micro_max}) and grad_accum ({grad_accum}) must be >= 1")
    if effective_batch is None:
        return BatchPlan(micro_max, grad_accum, micro_max * grad_accum)
    accum = -(-effective_batch // micro_max)
    return BatchPlan(-(-effective_batch // accum), accum, effective_batch)


# --------------------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------------------


@dataclass
class Probe:
    batch_size: int
    fits: bool
    peak_mb: float | None = None  # measured reserved peak, or the predicted reserved peak
    note: str = ""
    seconds: float = 0.0


@dataclass
class SearchResult:
    """The chosen batch size and every probe in the order it ran."""

    batch_size: int
    probes: list[Probe] = field(default_factory=list)
    limit: int = 0  # the cap the search ran under

    def as_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "limit": self.limit, "probes": [asdict(p) for p in self.probes]}


def search_batch_size(probe: Callable[[int], bool | Probe], max_batch: int, start: int = 1) -> SearchResult:
    """The largest ``b`` in ``[1, max_batch]`` with ``probe(b)`` true, assuming fitting is monotone.

    Doubles from ``start`` (capped at ``max_batch``) while probes fit, then bisects between the largest
    fit and the smallest failure; a failing ``start`` bisects below it. About ``2 log2(answer / start)``
    probes. ``probe`` returns a bool or a :class:`Probe`. Raises :class:`DoesNotFit` when 1 does not fit.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    probes: list[Probe] = []

    def fits(b: int) -> bool:
        t0 = time.perf_counter()
        r = probe(b)
        p = r if isinstance(r, Probe) else Probe(b, bool(r))
        p.seconds = time.perf_counter() - t0
        probes.append(p)
        log.info("batch-size probe %d: %s%s", b, "fits" if p.fits else "does not fit",
                 f" ({p.note})" if p.note else "")
        return p.fits

    lo, hi = 0, max_batch + 1  # lo: largest known fit (0: none); hi: smallest known failure
    b = max(1, min(start, max_batch))
    while True:
        if fits(b):
            lo = b
            if b >= max_batch:
                break
            b = min(2 * b, max_batch)
        else:
            hi = b
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    if lo == 0:
        raise DoesNotFit("not even batch size 1 fits the memory budget")
    return SearchResult(lo, probes, max_batch)


# --------------------------------------------------------------------------------------------------
# probes
# --------------------------------------------------------------------------------------------------


def measured_probe(build: Callable[[int], Trainable], device: torch.device, budget: float, margin: float,
                   steps: int) -> Callable[[int], Probe]:
    """A GPU probe: ``build(batch_size)`` a trainable, run ``steps`` optimiser steps of its ``memory_step``
    (at its own ``batch_size``), measure.

    It fits when no step ran out of memory and the reserved peak is at most ``budget x (1 - margin)``
    MB. Whatever happens, the trainable is dropped and the allocator's cache emptied before returning.
    """
    limit = budget * (1.0 - margin)

    def probe(batch_size: int) -> Probe:
        free_device(device)
        oom_note = ""
        peak = None
        try:
            trainable = build(batch_size)
            step = trainable.memory_step(trainable.batch_size)
            for _ in range(steps):
                check_step_outputs(step(), type(trainable).__name__)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_reserved(device) / MB
        except Exception as e:  # only out-of-memory is an answer; anything else is a real failure
            if not is_oom(e):
                raise
            oom_note = "out of memory"
        # the exception (and its frames holding tensors) is gone here; drop the model too
        trainable = step = None  # noqa: F841
        free_device(device)
        if oom_note:
            return Probe(batch_size, False, None, oom_note)
        assert peak is not None
        ok = peak <= limit
        return Probe(batch_size, ok, peak,
                     "" if ok else f"reserved peak {peak:.0f} MB is above {limit:.0f} MB (budget less margin)")

    return probe


def predicted_probe(predictor: Any, budget: float, margin: float, scale: int = 1) -> Callable[[int], Probe]:
    """The same question answered by a :class:`trainbench.measure.predict.Predictor` (no GPU involved).

    ``scale``: the predictor's trainable accumulates this many micro-batches, so a micro-batch of ``b``
    is traced as an optimiser batch of ``scale x b``.
    """
    limit = budget * (1.0 - margin)

    def probe(batch_size: int) -> Probe:
        p = predictor.predict(batch_size * scale)
        reserved = p.reserved_bytes / MB
        return Probe(batch_size, reserved <= limit, reserved,
                     f"predicted reserved peak {reserved:.0f} MB vs {limit:.0f} MB")

    return probe


def start_size(max_batch: int, hint: int = 32) -> int:
    """Where the doubling starts: ``hint`` (a power of two small enough for most models) within the cap."""
    return max(1, min(hint, max_batch, 2 ** int(math.log2(max(max_batch, 1)))))


# --------------------------------------------------------------------------------------------------
# a run's memory plan: what train_job calls
# --------------------------------------------------------------------------------------------------


@dataclass
class MemoryFit:
    """How a run's batch was chosen and what its memory is predicted to be; recorded with the run."""

    plan: BatchPlan
    source: str  # BatchSizeSource: config | measured | predicted
    device: torch.device
    budget_mb: float | None = None
    budget_source: str = "none"
    margin: float = 0.0
    cap: dict[str, Any] = field(default_factory=dict)  # apply_budget's record
    search: SearchResult | None = None
    prediction: Any = None  # predict.Prediction at the final plan
    prediction_error: str | None = None
    wants_prediction: bool = False

    def predict(self, trainable: Trainable, extra: tuple[Any, ...] = ()) -> None:
        """Predict the peak of the run's own trainable at its plan (when :func:`resolve` asked for it).

        The trace runs on a fake copy: the trainable is left as it was. A failure is recorded, not raised:
        a prediction must never cost the measurement.
        """
        if not self.wants_prediction:
            return
        try:
            capability = torch.cuda.get_device_capability(self.device) if self.device.type == "cuda" else None
            self.prediction = Predictor(trainable, extra, capability=capability).predict(trainable.batch_size)
        except Exception as e:
            log.warning("memory prediction failed: %s: %s", type(e).__name__, e)
            self.prediction_error = f"{type(e).__name__}: {e}"

    @property
    def predicted_fits(self) -> bool | None:
        if self.prediction is None or self.budget_mb is None:
            return None
        return self.prediction.reserved_bytes / MB <= self.budget_mb * (1.0 - self.margin)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {ParamKey.BATCH_SIZE_RESOLVED: self.plan.optimiser,
                               ParamKey.MICRO_BATCH_SIZE: self.plan.micro,
                               ParamKey.GRAD_ACCUM_RESOLVED: self.plan.accum, ParamKey.BATCH_SIZE_SOURCE: self.source}
        if self.budget_mb is not None:
            out.update({ParamKey.MEMORY_BUDGET_MB: round(self.budget_mb, 1),
                        ParamKey.MEMORY_BUDGET_SOURCE: self.budget_source})
        out.update(self.cap)
        if self.search is not None:
            out.update({auto_batch("method"): self.source, auto_batch("probes"): len(self.search.probes),
                        auto_batch("limit"): self.search.limit, auto_batch("margin"): self.margin,
                        auto_batch("micro_batch"): self.search.batch_size})
        return out

    def tags(self) -> dict[str, str]:
        out = {Tag.BATCH_SIZE_SOURCE: self.source}
        if self.source == BatchSizeSource.PREDICTED:
            out[Tag.PREDICTED_BATCH_SIZE] = str(self.plan.micro)
        if self.predicted_fits is not None:
            out[Tag.PREDICTED_FITS] = str(self.predicted_fits).lower()
        if self.cap:
            out[Tag.VRAM_BUDGET_MB] = str(self.cap[ParamKey.VRAM_BUDGET_MB])
            out[Tag.VRAM_TOTAL_MB] = str(self.cap[ParamKey.VRAM_TOTAL_MB])
        if self.prediction_error:
            out[Tag.PREDICTION_ERROR] = self.prediction_error[:500]
        return out

    def metrics(self) -> dict[str, float]:
        if self.prediction is None:
            return {}
        mb = self.prediction.mb()
        return {Summary.PREDICTED_PEAK_VRAM_MB: mb["peak_mb"], Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: mb["reserved_mb"],
                Summary.PREDICTED_ACTIVATIONS_MB: mb["activations_mb"]}

    def as_dict(self) -> dict[str, Any]:
        return {"plan": asdict(self.plan), "source": self.source, "device": str(self.device),
                "budget_mb": self.budget_mb, "budget_source": self.budget_source, "margin": self.margin,
                "cap": self.cap, "search": self.search.as_dict() if self.search else None,
                "prediction": ({"batch_size": self.prediction.batch_size, **self.prediction.mb(),
                                "allocator_overhead": self.prediction.overhead}
                               if self.prediction is not None else None),
                Tag.PREDICTED_FITS: self.predicted_fits, Tag.PREDICTION_ERROR: self.prediction_error}

    def summary_line(self, model: str, hardware: str) -> str:
        """The line a user reads; a prediction says that it is one."""
        p = self.prediction
        peak = (f"predicted peak {p.mb()['peak_mb']:.0f} MB allocated / {p.mb()['reserved_mb']:.0f} MB reserved"
                if p is not None else "no prediction")
        budget = (f"budget {self.budget_mb:.0f} MB from {self.budget_source}, margin {self.margin:.0%}"
                  if self.budget_mb is not None else "no budget")
        acc = f" x {self.plan.accum} micro-batches = {self.plan.optimiser} per step" if self.plan.accum > 1 else ""
        if self.source == BatchSizeSource.PREDICTED:
            return (f"PREDICTION (fake-tensor trace on {self.device.type}; no GPU used): {model} on "
                    f"hardware={hardware} ({budget}): largest batch predicted to fit = {self.search.batch_size}"
                    f"{' (the search cap)' if self.search and self.search.batch_size == self.search.limit else ''};"
                    f" {peak}. Training on {self.device.type} with micro-batch {self.plan.micro}{acc}.")
        if self.source == BatchSizeSource.MEASURED:
            return (f"MEASURED: {model} ({budget}): largest batch that trained within it = "
                    f"{self.search.batch_size if self.search else self.plan.micro} after "
                    f"{len(self.search.probes) if self.search else 0} probes; {peak}. Micro-batch "
                    f"{self.plan.micro}{acc}.")
        fits = self.predicted_fits
        verdict = "" if fits is None else (" PREDICTED TO FIT." if fits else " PREDICTED NOT TO FIT.")
        return f"{model}: batch {self.plan.micro}{acc} on hardware={hardware} ({budget}); {peak}.{verdict}"


def check_host_memory(batch: int, max_batch: int, build: Callable[[int, int], Trainable], extra: tuple[Any, ...] = (),
                      accum: int = 1, available: int | None = None) -> None:
    """Refuse, before anything of that size is allocated, a configured CPU batch above ``model.max_batch_size``
    whose training step the memory predictor puts past the host memory available (a batch of a billion
    would otherwise grow the process until the kernel kills it, leaving its run RUNNING).

    The model is built at a small batch and its step traced at ``batch`` on fake tensors
    (:class:`~trainbench.measure.predict.Predictor`, ``target="cpu"``): nothing of the size is allocated. A
    prediction that fails, or no reading of the host's memory, lets the run go on as configured."""
    available = host_memory_available() if available is None else available
    if available is None:
        return
    probe = build(2 * accum, accum)
    try:
        prediction = Predictor(probe, extra, target="cpu").predict(batch)
    except Exception as e:  # noqa: BLE001 - a model whose step cannot be traced at that size: train as asked
        log.warning("could not predict the host memory of batch %d (%s: %s); training as configured",
                    batch, type(e).__name__, e)
        return
    finally:
        probe = None
        gc.collect()
    need = prediction.peak_bytes - prediction.resident_bytes  # what the step allocates beyond the data/model
    if need > available:
        raise ConfigError(
            f"model.batch_size={batch}: the memory predictor puts one training step at {need / 2**30:,.1f} GB of "
            f"host memory (a fake-tensor trace; nothing was allocated), more than the {available / 2**30:,.1f} GB "
            f"available on this machine. Lower model.batch_size (up to model.max_batch_size={max_batch} is "
            f"always accepted), or let the search choose with model.batch_size=auto hardware.vram_budget_mb=<MB>.")


def resolve(model_cfg: Any, trainer_cfg: Any, hardware_cfg: Any, device: torch.device,
            build: Callable[[int, int], Trainable], extra: tuple[Any, ...] = ()) -> MemoryFit:
    """Cap the device to the budget, resolve the batch plan (searching for `auto`), predict its peak.

    ``build(optimiser_batch, grad_accum)`` builds a trainable for the run (the final one is built by the
    caller with :attr:`MemoryFit.plan`). On a GPU `auto` probes for real; on a CPU it asks the predictor
    and the result is labelled a prediction. :meth:`MemoryFit.predict` then predicts the final
    trainable's peak: on a GPU (when ``trainer.memory.predict``), and on a CPU whenever a budget is in view.
    """
    mem = trainer_cfg.memory
    budget, source = budget_mb(hardware_cfg.vram_budget_mb, hardware_cfg.vram_mb, device)
    fit = MemoryFit(plan=BatchPlan(1, 1, 1), source=BatchSizeSource.CONFIG, device=device, budget_mb=budget,
                    budget_source=source, margin=mem.margin, cap=apply_budget(device, budget))
    accum_in_play = trainer_cfg.grad_accum > 1 or trainer_cfg.effective_batch is not None
    probe_accum = 2 if accum_in_play else 1  # probe with accumulation: grads live beside activations

    if model_cfg.batch_size == "auto":
        if budget is None:
            raise ConfigError("model.batch_size=auto needs a memory budget to fit: on a CPU choose a hardware "
                              "profile that names its card's memory (e.g. hardware=rtx3050ti_4gb) or set "
                              "hardware.vram_budget_mb=<MB>; on a GPU the device's memory is used.")
        first = build(2 * probe_accum, probe_accum)
        cap = model_cfg.max_batch_size
        if trainer_cfg.effective_batch is not None:
            cap = min(cap, trainer_cfg.effective_batch)
        limit = first.batch_limit if isinstance(first, StepsForMemory) else None
        if limit is not None:
            cap = min(cap, max(1, limit // probe_accum))
        if device.type == "cuda":
            del first
            free_device(device)
            probe = measured_probe(lambda b: build(b * probe_accum, probe_accum), device, budget, mem.margin,
                                   mem.probe_steps)
            fit.source = BatchSizeSource.MEASURED
        else:
            probe = predicted_probe(Predictor(first, extra), budget, mem.margin, probe_accum)
            fit.source = BatchSizeSource.PREDICTED
        try:
            fit.search = search_batch_size(probe, cap, start_size(cap))
        except DoesNotFit as e:
            raise ConfigError(f"model.batch_size=auto: {e} ({budget:.0f} MB from {source}, margin "
                              f"{mem.margin:.0%}); the model itself is too large for this card.") from None
        finally:
            probe = None  # type: ignore[assignment]
            first = None
            free_device(device)
        micro = fit.search.batch_size
    else:
        micro = int(model_cfg.batch_size)
        if device.type == "cpu" and micro > model_cfg.max_batch_size:
            check_host_memory(micro, model_cfg.max_batch_size, build, extra, probe_accum)
    fit.plan = plan_batches(micro, trainer_cfg.grad_accum, trainer_cfg.effective_batch)

    fit.wants_prediction = fit.source == BatchSizeSource.PREDICTED or (
        mem.predict and (device.type == "cuda" or budget is not None))
    return fit
