"""Child processes of the tests (run.py, analyze.py, workers): where they run and their environment; and a
command run in the test's own process where a child would prove nothing more (:func:`in_process`)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) for a child that imports this checkout's sources
    (``PYTHONPATH=src``) on one thread (``OMP_NUM_THREADS=1``), with ``extra`` variables."""
    return {**(os.environ if base is None else base), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"),
            **extra}


def in_process(command: Callable[[list[str]], None], argv: list[str], cwd: Path | None = None,
               **env: str) -> subprocess.CompletedProcess:
    """``python run.py *argv`` or ``python analyze.py *argv`` run in this process through its command
    (:func:`trainbench.cli.run_command` or :func:`~trainbench.cli.analyze_command`): its exit status, stdout and
    stderr, as :func:`subprocess.run` would give them. For the tests where a child process would prove nothing
    more than the command's exit and words (a child pays ~3 CPU-s of imports). An exception other than
    SystemExit propagates: where the script would print a traceback, the test fails. ``env``: environment
    variables set for the call.

    The state a command sets in its process is this call's only, as if it had been a process of its own:
    ``sys.argv``, the working folder (``cwd``), the project folder of the team's ``conf/``, the task-started
    mark of the exit status, the environment variables (the tracking connection sets MLflow's HTTP defaults),
    every logger's handlers and level (Hydra configures logging for its job) and Hydra's singletons (the job's
    ``HydraConfig``, the ``GlobalHydra``)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton

    from trainbench.config import team
    from trainbench.core import errors

    script = str(REPO / f"{command.__name__.removesuffix('_command')}.py")  # run.py, analyze.py
    loggers = [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    kept = [(x, x.handlers[:], x.level, x.propagate, x.disabled) for x in loggers]
    environ = dict(os.environ)
    singletons = dict(Singleton._instances)
    hydra_state = [(x, dict(vars(x))) for x in singletons.values() if isinstance(x, HydraConfig | GlobalHydra)]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys, "argv", [script, *argv])
        m.setattr(errors, "_TASK_STARTED", errors._TASK_STARTED)
        m.setattr(team, "_ROOT", list(team._ROOT))
        if cwd is not None:
            m.chdir(cwd)
        for name, value in env.items():
            m.setenv(name, value)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    command(list(argv))
                except SystemExit as e:  # as the interpreter ends: a message is printed, and exits 1
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                    if e.code is not None and not isinstance(e.code, int):
                        print(e.code, file=sys.stderr)
        finally:
            for x, handlers, level, propagate, disabled in kept:
                x.handlers[:] = handlers
                x.level, x.propagate, x.disabled = level, propagate, disabled
            for name in set(os.environ) - set(environ):
                del os.environ[name]
            os.environ.update(environ)
            Singleton._instances.clear()
            Singleton._instances.update(singletons)
            for x, attributes in hydra_state:
                vars(x).clear()
                vars(x).update(attributes)
    return subprocess.CompletedProcess([script, *argv], code, out.getvalue(), err.getvalue())
