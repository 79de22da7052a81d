"""Every job of a sweep accounted for, and a sweep that stops at the first interrupt.

The job ledger
    Each job of a ``-m`` sweep writes one small JSON record, ``<sweep dir>/.trainbench/job-<num>.json``
    (its overrides, outcome, error and run id), when it ends, from whichever process ran it (the
    in-process launcher, submitit, SLURM). A job that fails before its MLflow run opens (an invalid
    value, ``trainer.device=cuda`` without a GPU, an unreachable store) is known only here; the sweep
    summary (:mod:`trainbench.sweep.summary`) merges the ledger with the runs it reads back, so such a
    job is counted as failed and the sweep exits non-zero.

Stopping
    In a sweep whose jobs run in this process (Hydra's default launcher), the first Ctrl-C or SIGTERM
    ends the current job's run as ``interrupted`` (the harness records the epochs measured so far) and
    stops the sweep: the jobs after it do not run (they are recorded as ``not_run``), and the summary
    lists them and exits 130. A second signal stops at once, without the summary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from trainbench.core.errors import DiskFull, classify
from trainbench.core.vocab import Outcome

log = logging.getLogger("trainbench")

LEDGER_DIR = ".trainbench"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    stop_signal: int | None = None  # the first stop signal received by this process's sweep
    in_job: bool = False
    installed: bool = False


STATE = _State()


def ledger_dir(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / LEDGER_DIR


def _on_signal(signum: int, frame: Any) -> None:
    if STATE.stop_signal is not None:  # the second signal: stop now
        raise KeyboardInterrupt(f"signal {signum} (second)")
    STATE.stop_signal = signum
    print(f"\nsignal {signal.Signals(signum).name}: ending the current run as interrupted and stopping the sweep "
          "(a second signal stops at once)", file=sys.stderr, flush=True)
    if STATE.in_job:
        raise KeyboardInterrupt(f"signal {signum}")


def install_stop_handlers() -> None:
    """SIGINT/SIGTERM: the first ends the running job as interrupted and stops the sweep (main thread only)."""
    with contextlib.suppress(ValueError):  # not the main thread
        for s in _SIGNALS:
            signal.signal(s, _on_signal)
        STATE.installed = True
    install_lost_interrupt_hook()


def _redeliver_lost_interrupt(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        # from another thread, a moment later: sent from here it would be handled inside this hook and dropped
        threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    _PREVIOUS_HOOK(unraisable)


_PREVIOUS_HOOK = sys.unraisablehook


def install_lost_interrupt_hook() -> None:
    """A signal's KeyboardInterrupt that lands in a finaliser or weakref callback (SQLAlchemy's, torch's) is
    printed as "Exception ignored" and dropped by Python, and the run would go on training. This hook
    delivers SIGINT again, so the interrupt reaches the training loop."""
    sys.unraisablehook = _redeliver_lost_interrupt


def runs_jobs_in_process(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs its jobs one after the other in this process (Hydra's default):
    only then can this process's signal handler end the running job and skip the rest."""
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
    return target.endswith("BasicLauncher")


def stop_requested() -> bool:
    return STATE.stop_signal is not None


def _job_identity() -> tuple[Path, int, list[str]]:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return Path(hc.sweep.dir), int(hc.job.num), [str(o) for o in hc.overrides.task]


def record_job(outcome: str, error: str | None = None, run_id: str | None = None) -> None:
    """Write this job's ledger record (never fails the job: a record it cannot write is logged)."""
    try:
        sweep_dir, num, overrides = _job_identity()
        folder = ledger_dir(sweep_dir)
        folder.mkdir(parents=True, exist_ok=True)
        from trainbench.core.secrets import redact

        doc = {"job": num, "overrides": [redact(o) for o in overrides], "outcome": outcome,
               "error": redact(error)[:2000] if error else None, "run_id": run_id}
        tmp = folder / f".job-{num}.json.{os.getpid()}"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, folder / f"job-{num}.json")
    except Exception as e:  # noqa: BLE001 - the ledger is a summary aid, the run is the record
        log.warning("could not write the sweep's job record: %s", e)


def read_ledger(sweep_dir: str | Path) -> dict[int, dict[str, Any]]:
    """The job records of a sweep, by job number (unreadable ones are skipped)."""
    out: dict[int, dict[str, Any]] = {}
    for p in sorted(ledger_dir(sweep_dir).glob("job-*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            doc = json.loads(p.read_text())
            out[int(doc["job"])] = doc
    return out


def sweep_job(cfg: DictConfig, body: Callable[[DictConfig], str]) -> str:
    """Run one job of a sweep: its failure is recorded and logged, never raised, and the sweep goes on
    (unless it was interrupted). Returns the outcome. What an error means is
    :func:`~trainbench.core.errors.classify`'s, as for a single run."""
    if stop_requested():
        log.warning("sweep stopped by a signal: this job does not run")
        record_job(Outcome.NOT_RUN, "the sweep was stopped by a signal before this job started")
        return Outcome.NOT_RUN
    outcome, error, run_id = Outcome.FAILED, None, None
    STATE.in_job = True
    try:
        outcome = body(cfg)
    except (Exception, KeyboardInterrupt, DiskFull) as e:  # recorded, even a bug: one job never stops the sweep
        failure = classify(e)
        outcome, error, run_id = failure.outcome, failure.message, failure.run_id
        if failure.unexpected:
            log.exception("job crashed")
        elif failure.recorded:
            log.error("%s", failure.message)
        elif failure.outcome != Outcome.INTERRUPTED:
            log.error("job failed: %s", failure.message)
    finally:
        STATE.in_job = False
        if STATE.installed:  # train_job installs its own SIGTERM handler for the job; the sweep's comes back
            install_stop_handlers()
    if outcome == Outcome.INTERRUPTED and STATE.stop_signal is None:
        STATE.stop_signal = int(signal.SIGINT)
    record_job(outcome, error, run_id)
    return outcome
