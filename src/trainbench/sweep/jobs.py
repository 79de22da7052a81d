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

    In a sweep whose jobs run in other processes on this machine (``hydra/launcher=submitit_local``,
    ``local_jobs`` or ``local_gpus``), the first signal does the same across processes: the sweep marks itself stopped
    (``<sweep dir>/.trainbench/stop``: a job that has not started yet records ``not_run``) and sends SIGTERM
    to submitit's job controllers, which pass it to the jobs; each job ends its run as ``interrupted`` (its
    own handler, :func:`install_job_stop_handlers`), the sweep waits for them, closes its parent run,
    prints the summary and exits 130. A second signal kills the job processes and stops at once.
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
from trainbench.core.stop_signals import ends_the_running_job
from trainbench.core.vocab import Outcome

log = logging.getLogger("trainbench")

LEDGER_DIR = ".trainbench"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    stop_signal: int | None = None  # the first stop signal received by this process's sweep
    in_job: bool = False
    installed: bool = False
    #: The sweep folder of a sweep whose jobs run in other local processes: a signal is passed on to them.
    jobs_elsewhere: Path | None = None


STATE = _State()


def ledger_dir(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / LEDGER_DIR


STOP_MARKER = "stop"


@ends_the_running_job
def _on_signal(signum: int, frame: Any) -> None:
    if STATE.stop_signal is not None:  # the second signal: stop now
        if STATE.jobs_elsewhere is not None:
            _signal_job_processes(signal.SIGKILL, recursive=True)
        raise KeyboardInterrupt(f"signal {signum} (second)")
    STATE.stop_signal = signum
    if STATE.jobs_elsewhere is not None:
        print(f"\nsignal {signal.Signals(signum).name}: stopping the sweep's jobs (their runs end as interrupted), "
              "then the summary (a second signal stops at once)", file=sys.stderr, flush=True)
        _mark_stopped(STATE.jobs_elsewhere)
        _signal_job_processes(signal.SIGTERM, recursive=False)
        return
    print(f"\nsignal {signal.Signals(signum).name}: ending the current run as interrupted and stopping the sweep "
          "(a second signal stops at once)", file=sys.stderr, flush=True)
    if STATE.in_job:
        raise KeyboardInterrupt(f"signal {signum}")


def _mark_stopped(sweep_dir: Path) -> None:
    with contextlib.suppress(OSError):
        ledger_dir(sweep_dir).mkdir(parents=True, exist_ok=True)
        (ledger_dir(sweep_dir) / STOP_MARKER).touch()


def clear_stop_marker(sweep_dir: str | Path) -> None:
    """A new sweep in a folder an earlier one used: its jobs must not read that sweep's stop."""
    with contextlib.suppress(OSError):
        (ledger_dir(sweep_dir) / STOP_MARKER).unlink(missing_ok=True)


def stopped_on_disk(sweep_dir: str | Path) -> bool:
    """Whether the sweep that owns ``sweep_dir`` was stopped by a signal (its stop marker)."""
    return (ledger_dir(sweep_dir) / STOP_MARKER).is_file()


def _job_processes(recursive: bool) -> list[Any]:
    """This process's children that are submitit's job controllers (``recursive``: and everything under
    them, the jobs themselves)."""
    import psutil

    out = []
    for child in psutil.Process().children(recursive=False):
        with contextlib.suppress(psutil.Error):
            if any("submitit" in part for part in child.cmdline()):
                out.append(child)
                if recursive:
                    out += child.children(recursive=True)
    return out


def _signal_job_processes(sig: int, recursive: bool) -> None:
    """Send ``sig`` to the sweep's job controllers (SIGTERM: each passes it on to its job once), or with
    ``recursive`` to every job process (SIGKILL: the second signal)."""
    import psutil

    with contextlib.suppress(Exception):  # never let a vanished process stop the handler
        for p in _job_processes(recursive):
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)


def _stopped_elsewhere() -> bool:
    try:
        return stopped_on_disk(_job_identity()[0])
    except (ValueError, OSError):  # no Hydra job (a test), or no sweep folder yet
        return False


def runs_jobs_in_local_processes(config: DictConfig) -> bool:
    """Whether the sweep's launcher runs its jobs in processes it starts on this machine (submitit's local
    executor: ``hydra/launcher=submitit_local``, ``local_jobs`` or ``local_gpus``)."""
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
    return ("submitit" in target and target.endswith("LocalLauncher")) or target.endswith(".LocalGpusLauncher")


def install_sweep_stop_handlers(sweep_dir: str | Path) -> None:
    """A sweep whose jobs run in local processes: the first SIGINT/SIGTERM stops every job (its run ends as
    interrupted) and the sweep then ends with its summary, exit 130; the second kills the job processes."""
    import psutil  # noqa: F401 - imported now, not inside the signal handler

    STATE.jobs_elsewhere = Path(sweep_dir)
    install_stop_handlers()


def install_job_stop_handlers() -> None:
    """A job in a process of submitit's local executor: SIGTERM/SIGINT end the job like in the sweep's own
    process (submitit's job environment would let SIGTERM pass by, and the job would train on)."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "local" and not STATE.installed:
        install_stop_handlers()


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


def _secondary_rank() -> bool:
    """A task of a multi-task SLURM job other than its first: a rank of a data-parallel job, which its rank 0
    records (trainbench.ranks)."""
    return int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and int(os.environ.get("SLURM_PROCID", "0") or 0) > 0


def record_job(outcome: str, error: str | None = None, run_id: str | None = None) -> None:
    """Write this job's ledger record (never fails the job: a record it cannot write is logged); a data-parallel
    job's ranks other than rank 0 write none."""
    if _secondary_rank():
        return
    try:
        sweep_dir, num, overrides = _job_identity()
    except Exception as e:  # noqa: BLE001 - the ledger is a summary aid, the run is the record
        log.warning("could not write the sweep's job record: %s", e)
        return
    write_record(sweep_dir, num, overrides, outcome, error, run_id)


def write_record(sweep_dir: str | Path, num: int, overrides: list[str], outcome: str, error: str | None = None,
                 run_id: str | None = None) -> None:
    """Write job ``num``'s ledger record: by the job itself (:func:`record_job`), or by the launcher for a job
    that could not write its own (never raises: a record it cannot write is logged)."""
    try:
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
    install_job_stop_handlers()
    if not stop_requested() and _stopped_elsewhere():  # the sweep's own process was signalled
        STATE.stop_signal = int(signal.SIGTERM)
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
