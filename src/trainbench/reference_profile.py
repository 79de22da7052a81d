"""The reference size, profiled: where a job trains another size than ``reference`` (the CPU profile's ``small``),
the model is also *profiled* at its reference size, without training it, in a run of its own.

A machine without a GPU cannot train the published sizes in minutes, but the analysis needs no trained epoch to
project one onto a GPU: it needs the workload of one epoch (FLOPs, bytes, kernels and chains per step, steps per
epoch on the run's data) and whether the model fits the card's memory at its batch. Both are traced on fake
tensors in seconds. So after the trained run ends, :func:`profile_reference`:

1. composes the job's own config at ``size=reference`` (Hydra's compose, with the job's overrides: a key the user
   set on the command line keeps its value at either size);
2. where the two sizes are one config (DQN and PPO: the team's networks train in minutes on a CPU), profiles
   nothing: the trained run carries the tag ``size_same_as=reference`` and stands for both sizes;
3. else opens a run of its own (tag ``kind=size_profile``, ``profile_of`` = the trained run, the same sweep and job),
   logs the reference config, loads the data, builds the model, predicts its CUDA peak at the reference batch
   (the batch and accumulation a card would need follow from it in the analysis) and profiles one epoch on fake
   tensors (measure/workload.py); the run ends with outcome ``profiled``.

Everything is bounded by ``trainer.reference_profile.budget_s`` (60 s): past it the profile stops, its run ends
``failed`` saying so, and the job still completes. A failure of the profile never fails the job: the analysis
projects the model from what exists and names what is missing. Data-parallel jobs, SLURM ranks and reruns are
not profiled (``trainer.reference_profile.enabled=false`` turns it off everywhere).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trainbench.core.progress import duration
from trainbench.core.safe_text import term
from trainbench.core.secrets import redact
from trainbench.core.vocab import Kind, Outcome, ParamKey, Tag

log = logging.getLogger("trainbench")

REFERENCE = "reference"
#: keys of a model config that name it rather than size it
_NOT_WORKLOAD = ("size",)


@dataclass(frozen=True)
class ReferencePlan:
    """What the job does about the reference size: ``model`` the reference model config to profile (None: nothing
    to profile), ``same`` whether the trained size is the reference workload, ``note`` why (logged, tagged)."""

    model: DictConfig | None
    same: bool
    note: str

    @property
    def tags(self) -> dict[str, str]:
        """The tags the trained run carries about its reference size."""
        if self.same:
            return {Tag.SIZE_SAME_AS: REFERENCE}
        return {Tag.REFERENCE_PROFILE_NOTE: self.note[:500]} if self.model is None and self.note else {}


def _workload(model: Any) -> dict[str, Any]:
    d = OmegaConf.to_container(model, resolve=True) if isinstance(model, DictConfig) else dict(model)
    return {k: v for k, v in d.items() if k not in _NOT_WORKLOAD}


def compose_reference(cfg: DictConfig) -> DictConfig:
    """The job's model config at ``size=reference``: Hydra's compose with the job's own overrides (the size's
    replaced), inside the running Hydra app. Raises RuntimeError where no Hydra app is running."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    if not GlobalHydra.instance().is_initialized() or not HydraConfig.initialized():
        raise RuntimeError("no running Hydra app to compose the reference size with")
    hc = HydraConfig.get()
    keep = [o for o in hc.overrides.task if o.lstrip("+~").split("=", 1)[0] not in ("size", ParamKey.MODEL_SIZE)]
    return compose(hc.job.config_name, overrides=[*keep, f"size={REFERENCE}"]).model


def reference_plan(cfg: DictConfig) -> ReferencePlan:
    """Whether (and what) this job profiles at the reference size; never raises. (A data-parallel job, a SLURM
    rank and a rerun never ask: the command line's job returns before.)"""
    rp = OmegaConf.select(cfg, "trainer.reference_profile.enabled", default=True)
    size = str(OmegaConf.select(cfg, ParamKey.MODEL_SIZE, default=REFERENCE))
    if size == REFERENCE:
        return ReferencePlan(None, False, "")
    if not rp:
        return ReferencePlan(None, False, "not profiled: trainer.reference_profile.enabled=false")
    if not OmegaConf.select(cfg, "trainer.profile_workload", default=True):
        return ReferencePlan(None, False, "not profiled: trainer.profile_workload=false")
    try:
        ref = compose_reference(cfg)
    except Exception as e:  # noqa: BLE001 - never fails the job: the analysis says what is missing
        return ReferencePlan(None, False, f"not profiled: the reference config could not be composed "
                                          f"({type(e).__name__}: {e})")
    if _workload(ref) == _workload(cfg.model):
        return ReferencePlan(None, True, f"size {size} is the reference workload (one config)")
    return ReferencePlan(ref, False, "")


class _OverBudget(Exception):
    """The reference profile ran past ``trainer.reference_profile.budget_s``."""


@contextlib.contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Raise :class:`_OverBudget` inside the block once ``seconds`` have passed (a real-time timer, main thread
    only: elsewhere the block runs unbounded and the caller checks the time after it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def over(signum: int, frame: Any) -> None:
        raise _OverBudget(f"past its budget of {seconds:g} s (trainer.reference_profile.budget_s)")

    previous = signal.signal(signal.SIGALRM, over)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def profile_reference(cfg: DictConfig, plan: ReferencePlan, trained_run_id: str | None,
                      extra_tags: dict[str, str] | None = None) -> str | None:
    """Profile ``plan.model`` in a run of its own (outcome ``profiled``); returns the outcome, or None where there
    was nothing to profile. Never raises but KeyboardInterrupt (a stop signal): the run then ends interrupted."""
    if plan.model is None:
        return None
    from trainbench import train

    ref_cfg = cfg.copy()
    with open_dict(ref_cfg):
        ref_cfg.model = plan.model
    budget = float(OmegaConf.select(cfg, "trainer.reference_profile.budget_s", default=60.0))
    name = str(plan.model.get("name", "?"))
    t0 = time.perf_counter()
    line = f"reference profile: {name} at size {REFERENCE}, profiled on fake tensors without training it " \
           f"(at most {budget:g} s)"
    print(term(redact(line)), flush=True)
    log.info("%s", line)
    run = None
    outcome, error = Outcome.FAILED, None
    try:
        with _budget(budget):
            job = train.resolve_profile_job(ref_cfg)
            tags = {**(extra_tags or {}), Tag.KIND: Kind.PROFILE}
            if trained_run_id:
                tags[Tag.PROFILE_OF] = trained_run_id
            run = train.open_profile_run(job, tags)
            train.profile_stages(job, run)
        outcome = Outcome.PROFILED
    except KeyboardInterrupt:
        outcome, error = Outcome.INTERRUPTED, "interrupted by the user or a signal"
        if run is not None:
            train.end_profile_run(run, outcome, error)
        raise
    except _OverBudget as e:
        error = f"reference profile {e}: the reference size is projected from what exists (raise the budget to " \
                "profile it)"
    except Exception as e:  # noqa: BLE001 - a profile that fails never fails the job
        error = f"reference profile failed: {type(e).__name__}: {e}"
    if run is not None:
        train.end_profile_run(run, outcome, error)
    took = duration(time.perf_counter() - t0)
    done = (f"reference profile: {name} at size {REFERENCE}: {outcome} in {took}"
            + (f" ({error})" if error else f", run {run.run_id if run else '?'}"))
    print(term(redact(done)), flush=True)
    (log.warning if error else log.info)("%s", done)
    return outcome

