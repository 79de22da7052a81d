"""Command-line glue: how a job's errors reach the user, and the `trainbench` console script."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from trainbench.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    USER_ERRORS,
    DiskFull,
    JobFailed,
    PluginError,
    classify,
    has_task_started,
    task_started,
)

log = logging.getLogger("trainbench")

#: What a single run reports as one line and an exit status (trainbench.core.errors.classify); anything
#: else (a bug, a Ctrl-C before the run opened) keeps Python's traceback.
_REPORTED = (*USER_ERRORS, JobFailed, DiskFull)


def _multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except (ImportError, ValueError):
        return False


def run_app(app: Callable[[], Any], argv: list[str] | None = None) -> None:
    """Run a ``@hydra.main`` app so that bad input exits :data:`EXIT_BAD_INPUT` everywhere (run.py and
    analyze.py), keeping Hydra's own text.

    Hydra prints its own errors (unknown option, misspelled key, bad enum value) and exits 1; those come
    before the app's function starts (or carry Hydra's or OmegaConf's exception as the exit's context), so
    such an exit 1 becomes 2. A missing ``--experimental-rerun`` file is refused here with one line (Hydra
    would raise a traceback).
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    argv = sys.argv[1:] if argv is None else argv
    refuse_uri_credentials(argv)  # before Hydra writes the command line to .hydra/*.yaml
    if "--experimental-rerun" in argv:
        i = argv.index("--experimental-rerun")
        path = argv[i + 1] if i + 1 < len(argv) else None
        if path is None or not Path(path).is_file():
            print(f"error: --experimental-rerun needs an existing file (a job's .hydra/config.pickle); "
                  f"{path or 'none was given'} does not exist.", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
    try:
        app()
    except SystemExit as e:
        if e.code == EXIT_FAILED and (not has_task_started()
                            or isinstance(e.__context__, HydraException | OmegaConfBaseException)):
            print("error: the command line above is not valid (see Hydra's message); `--help` lists the "
                  "options", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise


def refuse_uri_credentials(argv: list[str]) -> None:
    """A URI with a password (any scheme: ``tracking.uri=postgresql+psycopg2://user:pw@host/db``, ``http://``)
    in any override of the command line: one ``error:`` line naming where the credentials go instead
    (:func:`trainbench.config.shared.uri_credentials_problem`), exit :data:`EXIT_BAD_INPUT`, before Hydra
    composes (and writes ``.hydra/{config,overrides,hydra}.yaml`` and ``config.pickle``)."""
    from trainbench.config.shared import uri_credentials_problem

    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep:
            problem = uri_credentials_problem(value, key.lstrip("+~"))
            if problem:
                print(f"error: {safe_message(problem)}", file=sys.stderr)
                raise SystemExit(EXIT_BAD_INPUT)


def safe_message(text: str) -> str:
    """What the command line prints of a message that may hold logged or user text: no secret value
    (:func:`trainbench.core.secrets.redact`) and no terminal control (:func:`trainbench.core.safe_text.term`)."""
    from trainbench.core.safe_text import term
    from trainbench.core.secrets import redact

    return term(redact(text), keep_newlines=True)


def load_custom_model(argv: list[str]) -> None:
    """run.py's ``model.spec=<package.module>:<SPEC>``, loaded before Hydra composes ``model=custom``; a bad
    path is one ``error:`` line and exits :data:`~trainbench.core.errors.EXIT_BAD_INPUT`."""
    from trainbench.models.registry import register_custom_from_argv

    try:
        register_custom_from_argv(argv)
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


def run_job(cfg: DictConfig) -> str:
    """Run one training job with user-facing error handling.

    A single run reports its error as :func:`~trainbench.core.errors.classify` says: bad input as one
    ``error:`` line, exit 2 (a full disk before the run opened: the same, exit 1); a failure its run
    recorded, such as a diverged run, in the log, exit 1. In a sweep (trainbench.sweep.jobs) the job's
    failure is recorded in MLflow where its run opened and in the sweep's job ledger, with the same
    message, and the sweep goes on; the sweep callback's summary counts every job and exits non-zero at
    the end.
    """
    task_started()
    if _multirun():
        from trainbench.sweep.jobs import sweep_job

        return sweep_job(cfg, _job)
    from trainbench.sweep.jobs import install_lost_interrupt_hook

    install_lost_interrupt_hook()  # a Ctrl-C that lands in a finaliser still ends the run as interrupted
    try:
        return _job(cfg)
    except _REPORTED as e:
        failure = classify(e)
        if failure.recorded:
            log.error("%s", safe_message(failure.message))
        else:
            print(f"error: {safe_message(failure.message)}", file=sys.stderr)
        sys.exit(failure.exit_code)
    except Exception:  # a bug, or a model's own exception: the traceback, without secrets (not Hydra's)
        crash = traceback.format_exc()
    # Hydra would print the exception raw (and HYDRA_FULL_ERROR=1 re-raises it to Python): a model's message
    # may hold a secret value, which the run's error tag already has redacted. Printed here, redacted.
    print(safe_message(crash), file=sys.stderr, end="")
    raise SystemExit(EXIT_FAILED)


def _job(cfg: DictConfig) -> str:
    from trainbench.train import train_job

    if cfg.get("rerun"):  # python run.py rerun=<run_id>: the config comes from that MLflow run
        from trainbench.rerun import run_rerun

        return run_rerun(cfg)
    from trainbench.rerun import hydra_rerun

    cfg, tags = hydra_rerun(cfg)  # --experimental-rerun: its own sweep id and a tag; else unchanged
    return train_job(cfg, tags)


def main(argv: list[str] | None = None) -> int:
    """`trainbench <command>`: small utilities that are not Hydra apps."""
    import argparse

    ap = argparse.ArgumentParser(prog="trainbench", description="trainbench utilities")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("config", help="print every config key with its default and doc")
    from trainbench.tracking import sync

    sync.add_arguments(sub.add_parser("sync", help="upload runs' spooled writes (tracking server was away)"))
    args = ap.parse_args(argv)
    if args.cmd == "config":
        import runpy

        runpy.run_module("trainbench.config", run_name="__main__")
    if args.cmd == "sync":
        return sync.run(args)
    return EXIT_OK
