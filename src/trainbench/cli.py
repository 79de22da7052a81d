"""Command-line glue: how a job's errors reach the user, and the `trainbench` console script."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

log = logging.getLogger("trainbench")


def _multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except (ImportError, ValueError):
        return False


#: Set once a Hydra app's own function runs: an exit 1 before that is Hydra refusing the command line.
_TASK_STARTED = False


def task_started() -> None:
    global _TASK_STARTED
    _TASK_STARTED = True


#: The exit status of bad input (a value, a key, an option, a path) in run.py, analyze.py and trainbench.
EXIT_BAD_INPUT = 2


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
        if e.code == 1 and (not _TASK_STARTED
                            or isinstance(e.__context__, HydraException | OmegaConfBaseException)):
            print("error: the command line above is not valid (see Hydra's message); `--help` lists the "
                  "options", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise


def run_job(cfg: DictConfig) -> str:
    """Run one training job with user-facing error handling.

    A single run prints bad input as one ``error:`` line and exits 2 (1 for a recorded failure such as
    a diverged run). In a sweep (trainbench.sweep.jobs) the job's failure is recorded in MLflow where
    its run opened and in the sweep's job ledger, and the sweep goes on; the sweep callback's summary
    counts every job and exits non-zero at the end.
    """
    task_started()
    if _multirun():
        from trainbench.sweep.jobs import sweep_job

        return sweep_job(cfg, _job)
    from trainbench.sweep.jobs import install_lost_interrupt_hook
    from trainbench.tracking.store import DiskFull
    from trainbench.train import USER_ERRORS, JobFailed

    install_lost_interrupt_hook()  # a Ctrl-C that lands in a finaliser still ends the run as interrupted
    try:
        return _job(cfg)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except JobFailed as e:
        log.error("%s", e)
        sys.exit(1)
    except DiskFull as e:  # the disk filled up before the run could record anything
        print(f"error: {e}. Free some space and run it again.", file=sys.stderr)
        sys.exit(1)


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
    return 0
