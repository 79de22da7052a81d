"""Every error raised for the user, the exit codes, and what an error means for a job (:func:`classify`).

Bad input (:data:`USER_ERRORS`: a config value, the data, the model, the device, the tracking store) is one
line naming the problem and the fix, never a traceback. A job that ran and recorded a non-completed outcome
raises :class:`JobFailed`; a full disk unwinds the job as :class:`DiskFull`. The classes are defined here and
nowhere else, so that any floor can raise them; the command line (:mod:`trainbench.cli`) and the sweep
(:mod:`trainbench.sweep.jobs`) report them alike, through :func:`classify`. Only the command line prints an
error line or exits; the rest of the package raises.

The ground floor: the standard library and the run vocabulary only (no torch, no MLflow, no Hydra).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainbench.core.vocab import Outcome

#: Everything went as asked.
EXIT_OK = 0
#: A job ran and did not complete (diverged, out of memory, a crash, a full disk), or a sweep counted one.
EXIT_FAILED = 1
#: Bad input (a value, a key, an option, a path, a model) in run.py, analyze.py and every trainbench command;
#: also a tracking store that cannot be reached (or stops answering) and a folder that cannot be written.
EXIT_BAD_INPUT = 2
#: 128 + SIGINT, what a shell reports for a Ctrl-C'd command: a sweep stopped by a signal.
EXIT_INTERRUPTED = 130


class ConfigError(ValueError):
    """A configuration value is out of range or inconsistent; the message names the key and the fix."""


class DeviceRefused(ConfigError):
    """A GPU list or a job's request (``hydra/launcher=local_gpus``) that would put two timed jobs on one GPU,
    or no GPU at all."""


class UnsafeName(ValueError):
    """A sweep id or experiment name outside the safe character set."""


class DataError(ValueError):
    """Bad input data. The message names the file, the problem and what is needed instead."""


class ModelDataError(ValueError):
    """The data does not suit the model (wrong kind, too few bars for the window, ...)."""


class UnknownModelError(KeyError):
    """No model of that name is registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class PluginError(UnknownModelError):
    """A model that is listed but cannot be used (import error, bad SPEC, duplicate name, bad path)."""


class DeviceError(RuntimeError):
    """The requested device is not available."""


class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written; the message names the URI and the fix."""


class StoreNotFound(TrackingUnavailable):
    """A reader's store does not exist (nothing was created); the caller adds what to do."""


class ExperimentNotFound(TrackingUnavailable):
    """A reader's experiment does not exist in the store (nothing was created); the caller adds what to do."""


class StoreProblem(RuntimeError):
    """A store or folder that cannot be used as it is; the message names the problem and the fix."""


class SpoolDamaged(RuntimeError):
    """A spool folder whose meta.json is unreadable (a full disk or a crash while it was written)."""


class DiskFull(BaseException):  # noqa: N818 - like KeyboardInterrupt it unwinds the training loop
    """The disk a run writes to (SQLite store, artifacts or spool) is full. Derived from BaseException so
    that the harness's catch-all does not record it as an ordinary training failure: the run ends as
    ``disk_full`` (train.py)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class RerunError(ConfigError):
    """The rerun cannot be set up (unknown run, missing artifacts, incompatible config); says why and the fix."""


class AnalysisError(RuntimeError):
    """The analysis cannot run; the message says why and what to do. analyze.py prints it and exits 2."""


class UnknownReportKey(ValueError):
    """A JSON-shaped report object holds a key its type has no field for (a programming error of the analysis:
    a stage wrote a field that analysis/report_types.py does not declare)."""


class ConformanceError(AssertionError):
    """A model failed the conformance check; the message lists each failed check and its fix."""


class JobFailed(RuntimeError):
    """The job ran and recorded a non-completed outcome (diverged, oom, failed, interrupted, disk_full)."""

    def __init__(self, outcome: str, message: str, run_id: str | None) -> None:
        super().__init__(f"run {run_id} ended as {outcome}: {message}")
        self.outcome = outcome
        self.run_id = run_id


#: Problems with the user's input: one clear message, no traceback (RerunError and PluginError included).
USER_ERRORS = (ConfigError, DataError, ModelDataError, UnknownModelError, DeviceError, TrackingUnavailable)

#: What a job records that a signal ended before its run opened.
INTERRUPTED_MESSAGE = "interrupted by the user or a signal before its run opened"
#: What a full disk before anything was recorded adds to the error.
DISK_FULL_FIX = "Free some space and run it again."


@dataclass(frozen=True)
class Failure:
    """What an error that ended a job means: its outcome, the exit status of a single run, and the message."""

    outcome: str
    exit_code: int
    message: str
    #: The run that recorded the failure (JobFailed), else None: nothing recorded it yet.
    run_id: str | None = None
    #: The job's own run recorded the failure and said why (the message is logged, not an ``error:`` line).
    recorded: bool = False
    #: An error trainbench did not expect (a bug): it is reported with its traceback.
    unexpected: bool = False


def classify(e: BaseException) -> Failure:
    """The :class:`Failure` an error that ended a job stands for, the same for a single run and a sweep.

    Bad input is ``failed``, exit 2, its own message; :class:`JobFailed` keeps the outcome its run recorded,
    exit 1; a full disk before the run recorded anything is ``disk_full``, exit 1, with the fix; an interrupt
    is ``interrupted``, exit 130; anything else is ``failed``, exit 1, named by its type.
    """
    if isinstance(e, USER_ERRORS):
        return Failure(Outcome.FAILED, EXIT_BAD_INPUT, str(e))
    if isinstance(e, JobFailed):
        return Failure(e.outcome, EXIT_FAILED, str(e), run_id=e.run_id, recorded=True)
    if isinstance(e, DiskFull):
        return Failure(Outcome.DISK_FULL, EXIT_FAILED, f"{e}. {DISK_FULL_FIX}")
    if isinstance(e, KeyboardInterrupt):
        return Failure(Outcome.INTERRUPTED, EXIT_INTERRUPTED, INTERRUPTED_MESSAGE)
    return Failure(Outcome.FAILED, EXIT_FAILED, f"{type(e).__name__}: {e}", unexpected=True)


#: Set once a Hydra app's own function (or a sweep's first callback) runs: an exit 1 before that is Hydra
#: refusing the command line, which the command line turns into :data:`EXIT_BAD_INPUT`.
_TASK_STARTED = False


def task_started() -> None:
    """Hydra accepted the command line: from now on an exit 1 is the job's or the sweep's, not bad input."""
    global _TASK_STARTED
    _TASK_STARTED = True


def has_task_started() -> bool:
    """Whether :func:`task_started` was called in this process."""
    return _TASK_STARTED
