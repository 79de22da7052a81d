"""The Hydra callbacks of every run.py invocation (conf/config.yaml lists them, in this order).

:class:`LauncherChecksCallback`: the launchers' own checks at the two ends of a sweep (trainbench.sweep.slurm,
trainbench.sweep.local_gpus).

:class:`TrackingCallback`: before a sweep's jobs start it creates the tracking store and experiment once
(an embedded SQLite store is created and migrated by the first process that opens it: doing that in
parallel jobs races) and opens the sweep's parent run (trainbench.sweep.parent). After the sweep it reads
the sweep's runs back from MLflow (so it sees jobs of any launcher, in any process), prints what happened
and where the runs are, and exits non-zero when a job did not complete.

:class:`SaveJobConfig`: each job's config pickled without secrets, for Hydra's own rerun
(trainbench.rerun.hydra_pickle).

:class:`OutputDirCallback`: Hydra's output folder is checked writable before Hydra makes it (run.py and
analyze.py).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger("trainbench")


def _with_hydra(config: DictConfig) -> DictConfig:
    """Make ``${hydra:...}`` interpolations (paths.root) resolvable outside a job."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(config)
    return config


class TrackingCallback(Callback):
    def __init__(self) -> None:
        self.sweep_id: str | None = None
        self.sweep_run: Any = None  # the sweep's parent run in MLflow (sweep/parent.py)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from trainbench.core.errors import EXIT_BAD_INPUT, TrackingUnavailable, task_started
        from trainbench.tracking.connection import connect

        task_started()  # Hydra has accepted the command line: a later exit 1 is the sweep's, not bad input
        _check_sweep_names(config)
        from trainbench.sweep.jobs import (
            clear_stop_marker,
            install_stop_handlers,
            install_sweep_stop_handlers,
            runs_jobs_in_local_processes,
            runs_jobs_in_process,
        )

        clear_stop_marker(str(config.hydra.sweep.dir))  # an earlier sweep's stop, in a folder used again
        if runs_jobs_in_process(config):  # the first Ctrl-C/SIGTERM ends the running job and stops the sweep
            install_stop_handlers()
        elif runs_jobs_in_local_processes(config):  # ... passed on to the jobs' processes (submitit_local, local_gpus)
            install_sweep_stop_handlers(str(config.hydra.sweep.dir))
        try:
            client, experiment_id = connect(_with_hydra(config).tracking)  # creates the store and experiment once
        except TrackingUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        self.sweep_run = start_sweep_run(config, client, experiment_id)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Hydra has just written .hydra/ and opened the job log: keep secrets out of both."""
        from pathlib import Path

        from trainbench.core.secrets import install_log_redaction, redact_tree

        install_log_redaction()
        hc = config.hydra
        _redact_sweep_files(config)
        if hc.output_subdir is not None:
            changed = redact_tree(Path(hc.runtime.output_dir) / str(hc.output_subdir))
            if changed:
                log.warning("removed the value of a secret environment variable from %s; pass secrets "
                            "through the environment (${oc.env:NAME}), never on the command line",
                            ", ".join(p.name for p in changed))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Summarise every job; exit non-zero when one did not complete. Hydra turns an exception raised
        here into a warning and exits 0, so every error ends in an explicit exit."""
        from trainbench.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, TrackingUnavailable
        from trainbench.sweep.jobs import stop_requested
        from trainbench.sweep.summary import print_sweep_summary

        if self.sweep_run is not None:
            self.sweep_run.end(interrupted=stop_requested())
        _redact_sweep_files(config, finished=True)
        error = None
        try:
            from trainbench.tracking.connection import connect

            connect(_with_hydra(config).tracking)
        except TrackingUnavailable as e:
            error = str(e)
            print(f"error: cannot read the sweep's runs back: {e}\nRuns whose writes were spooled meanwhile "
                  f"are uploaded with `trainbench sync {config.tracking.spool_dir}`.", file=sys.stderr)
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}"
        try:
            failed = print_sweep_summary(config, error)
        except Exception as e:  # noqa: BLE001
            print(f"error: the sweep summary failed: {type(e).__name__}: {e}", file=sys.stderr)
            sys.exit(EXIT_FAILED)
        if stop_requested():
            sys.exit(EXIT_INTERRUPTED)
        if failed or error:
            sys.exit(EXIT_FAILED)


def start_sweep_run(config: DictConfig, client: Any, experiment_id: str) -> Any:
    """Open the sweep's parent run (jobs nest under it) in the store the sweep connected to; None when it
    cannot be written."""
    from trainbench.sweep.parent import SweepRun
    from trainbench.sweep.summary import sweep_id_of

    hc = config.hydra
    try:
        root = str(config.paths.root)
    except Exception:  # noqa: BLE001 - only the git commit tag depends on it
        root = None
    return SweepRun.start(client, experiment_id, sweep_id_of(config), str(hc.sweep.dir),
                          list(hc.overrides.task), root=root)


def _check_sweep_names(config: DictConfig) -> None:
    """A sweep id or experiment name outside the safe set fails the sweep before any job (exit 2)."""
    from trainbench.core.errors import EXIT_BAD_INPUT, UnsafeName
    from trainbench.core.safe_names import check_experiment, check_sweep_id

    try:
        if config.get("sweep_id"):  # config key
            check_sweep_id(str(config.sweep_id))
        check_experiment(str(config.tracking.experiment))
    except UnsafeName as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _redact_sweep_files(config: DictConfig, finished: bool = False) -> None:
    """Hydra's sweep-level files (multirun.yaml; any .hydra/ at the sweep root) lose secret values too; once
    every job has finished, so do submitit's pickled jobs (.submitit/, which the jobs read while they run)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from trainbench.core.secrets import redact_file, redact_tree

    if not str(OmegaConf.select(config, "hydra.mode", default="")).endswith("MULTIRUN"):
        return
    try:
        root = Path(str(config.hydra.sweep.dir))
        changed = [p for p in (root / "multirun.yaml",) if p.is_file() and redact_file(p)]
        changed += redact_tree(root / ".hydra")
        if finished:
            changed += redact_tree(root / ".submitit")
    except Exception as e:  # noqa: BLE001 - never fail a job over it; say so
        log.warning("could not check the sweep's Hydra files for secrets: %s", e)
        return
    if changed:
        log.warning("removed the value of a secret environment variable from the sweep's %s",
                    ", ".join(p.name for p in changed))


class LauncherChecksCallback(Callback):
    """The launchers' own checks at the two ends of a sweep; does nothing with the other launchers.

    Listed first under hydra.callbacks: its on_multirun_start runs first, before the tracking store is even
    opened: a SLURM request is checked against the partition (trainbench.sweep.slurm), a ``local_gpus``
    device list against the machine (trainbench.sweep.local_gpus), each a one-line exit 2. Its
    on_multirun_end runs last (after the summary): it exits 1 if a SLURM job ended without a result.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from trainbench.sweep.local_gpus import check_launcher
        from trainbench.sweep.slurm import preflight_launcher

        preflight_launcher(config.hydra.launcher)
        check_launcher(config.hydra.launcher)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from trainbench.core.errors import EXIT_FAILED
        from trainbench.sweep.slurm import lost_jobs

        lost = lost_jobs()
        if lost:
            print(f"{len(lost)} SLURM job(s) ended without a result: {', '.join(lost)}", file=sys.stderr)
            sys.exit(EXIT_FAILED)


class OutputDirCallback(Callback):
    """Hydra's output folder (``hydra.run.dir``, or ``hydra.sweep.dir`` of a sweep) must be creatable and
    writable: checked before Hydra makes it, so that a folder that cannot be written is one ``error:`` line
    naming it and the fix (exit 2), not a ``PermissionError`` traceback. Listed first under hydra.callbacks
    (run.py and analyze.py)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check_output_dir(config, "hydra.run.dir", probe=config.hydra.output_subdir is not None)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check_output_dir(config, "hydra.sweep.dir", probe=True)


def _check_output_dir(config: DictConfig, key: str, probe: bool) -> None:
    """Create ``key``'s folder (as Hydra would) and, with ``probe``, write a file there; exit 2 on failure."""
    import tempfile
    from pathlib import Path

    from trainbench.core.errors import EXIT_BAD_INPUT

    try:
        folder = Path(str(_with_hydra(config).hydra.run.dir if key == "hydra.run.dir" else config.hydra.sweep.dir))
    except Exception:  # noqa: BLE001 - an interpolation Hydra reports itself, in its own words
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if probe:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
                pass
    except OSError as e:
        print(f"error: cannot write Hydra's output folder {folder} ({e.strerror or type(e).__name__}): make it "
              f"writable, or choose another with {key}=<folder>.", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


class SaveJobConfig(Callback):
    """Writes ``<job>/.hydra/config.pickle`` without secrets, for ``python run.py --experimental-rerun``
    (:func:`trainbench.rerun.hydra_pickle.save_job_config`)."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from trainbench.rerun.hydra_pickle import save_job_config

        save_job_config(config)
