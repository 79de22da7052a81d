"""The command line: the two Hydra commands (``trainbench run``/``python run.py`` and ``trainbench
analyze``/``python analyze.py``, one shape), how a job's errors reach the user, and the `trainbench`
console script. The only module that turns an error into a printed line and an exit status.

The Hydra configs are the package's own (:data:`trainbench.CONF_DIR`), so the commands work from any folder
of an installed package; relative paths in them (data/, mlruns/, reports/, multirun/) resolve against the
working folder, and a ``conf/`` folder there (the team's own configs, :mod:`trainbench.config.team`) is
searched first.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from trainbench.core.collector import paused_for_imports, skip_final_collections
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
        with _group_listing_once() if {"--help", "-h", "--hydra-help"} & set(argv) else nullcontext():
            app()
    except SystemExit as e:
        if e.code == EXIT_FAILED and (not has_task_started()
                            or isinstance(e.__context__, HydraException | OmegaConfBaseException)):
            print("error: the command line above is not valid (see Hydra's message); `--help` lists the "
                  "options", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise


@contextmanager
def _group_listing_once() -> Iterator[None]:
    """Hydra's ``--help`` lists the config groups with one lookup per group (about 130 here), and each lookup
    deep-copies the whole config repository (the schemas included): seconds of work for one line each. In
    here, a config loader builds that repository once per (config, overrides) and answers every group from it:
    the same repository, the same answers, a fraction of the time. Hydra 1.3's own API
    (``ConfigLoaderImpl.get_group_options``); where it differs, Hydra's lookups are left as they are."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.object_type import ObjectType
    except ImportError:
        yield
        return
    if not hasattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo"):
        yield
        return
    original = ConfigLoaderImpl.get_group_options
    repos: dict[tuple[int, str | None, tuple[str, ...]], Any] = {}

    def get_group_options(self: Any, group_name: str, results_filter: Any = ObjectType.CONFIG,
                          config_name: str | None = None, overrides: list[str] | None = None) -> list[str]:
        key = (id(self), config_name, tuple(overrides or ()))
        if key not in repos:
            repos[key] = self._parse_overrides_and_create_caching_repo(config_name, list(overrides or ()))[1]
        return repos[key].get_group_options(group_name, results_filter)

    ConfigLoaderImpl.get_group_options = get_group_options
    try:
        yield
    finally:
        ConfigLoaderImpl.get_group_options = original


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


def use_team_conf(argv: list[str]) -> None:
    """The project folder's own ``conf/`` (:mod:`trainbench.config.team`), searched before the packaged configs:
    the folder the command line names (``paths.root=``) or the working folder; a file there that is not valid
    YAML is one ``error:`` line naming it, exit :data:`~trainbench.core.errors.EXIT_BAD_INPUT`."""
    from trainbench.config.team import check_team_conf, use_root_of
    from trainbench.core.errors import ConfigError

    use_root_of(argv)
    try:
        check_team_conf()
    except ConfigError as e:
        print(f"error: {safe_message(str(e))}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


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
    if cfg.get("rerun"):  # python run.py rerun=<run_id>: the config comes from that MLflow run
        with paused_for_imports():
            from trainbench.rerun import run_rerun
            from trainbench.train import train_job  # noqa: F401 - imported here, without the collector

        return run_rerun(cfg)
    from trainbench.config.run import validate
    from trainbench.rerun import hydra_rerun

    cfg, tags = hydra_rerun(cfg)  # --experimental-rerun: its own sweep id and a tag; else unchanged
    validate(cfg)  # bad input is refused before torch and the job's modules load (the job checks it again)
    from omegaconf import OmegaConf

    with paused_for_imports():  # torch, dynamo, SciPy, MLflow: core/collector.py
        from trainbench.ranks import run_ranks, run_slurm_rank, slurm_tasks
        from trainbench.train import train_job

    if slurm_tasks() > 1:  # a SLURM job of several tasks: this task is one rank
        return run_slurm_rank(cfg, tags)
    if (OmegaConf.select(cfg, "trainer.distributed.nproc", default=1) or 1) > 1:  # config key
        return run_ranks(cfg, tags)  # torchrun's way: N ranks on this node, rank 0 writes the run
    from trainbench.reference_profile import profile_reference, reference_plan

    ref = reference_plan(cfg)  # the reference size: the same workload (tagged), or profiled after the run
    opened: list[str] = []
    outcome = train_job(cfg, {**tags, **ref.tags}, on_run_open=opened.append)
    profile_reference(cfg, ref, opened[0] if opened else None, tags)
    return outcome


def _hydra_app(config_name: str, body: Callable[[DictConfig], Any]) -> Callable[[], Any]:
    """``body`` as a ``@hydra.main`` app of the shipped config ``config_name`` (``config``: run, ``analyze``);
    Hydra reads its command line from ``sys.argv``. ``body`` stays the task function, a module-level function
    that launchers pickle by reference."""
    import hydra

    from trainbench import CONF_DIR

    return hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(body)


def run_command(argv: list[str] | None = None) -> None:
    """``python run.py ...`` and ``trainbench run ...``: Hydra overrides as arguments (``-m`` for a sweep).

    ``model.size=X`` selects the size group; ``trainer=auto`` (the default) becomes the GPU profile on a GPU
    and the CPU profile elsewhere, printed with the reason (not for ``rerun=<id>``, which takes the profile
    the original resolved); ``model=custom model.spec=pkg.module:SPEC`` is loaded before Hydra composes.
    """
    from trainbench.compose import register_configs, size_alias, trainer_auto

    skip_final_collections()
    with paused_for_imports(freeze=False):
        register_configs()
        import hydra  # noqa: F401 - Hydra's own imports, without the collector
    args = size_alias(list(sys.argv[1:] if argv is None else argv))
    use_team_conf(args)
    rerun = any(a.lstrip("+").startswith("rerun=") for a in args)
    if not rerun and not {"--experimental-rerun", "--help", "-h", "--hydra-help", "--shell-completion",
                          "-sc"} & set(args):
        args = trainer_auto(args, announce=True)
    load_custom_model(args)
    sys.argv[1:] = args
    run_app(_hydra_app("config", run_job), args)


def analyze_command(argv: list[str] | None = None) -> None:
    """``python analyze.py ...`` and ``trainbench analyze ...``: Hydra overrides as arguments.

    ``compare=a,b`` and ``project=a,b`` are one value each (Hydra would read them as a sweep over two
    values). Registers analyze's schemas only: no model registry, no torch.
    """
    from trainbench.config.analyze import compare_argv, project_argv, register_analysis_configs

    skip_final_collections()
    with paused_for_imports(freeze=False):
        register_analysis_configs()
        import hydra  # noqa: F401 - Hydra's own imports, without the collector
    args = project_argv(compare_argv(list(sys.argv[1:] if argv is None else argv)))
    use_team_conf(args)
    sys.argv[1:] = args
    run_app(_hydra_app("analyze", analyze_job), args)


def analyze_job(cfg: DictConfig) -> None:
    """One analysis (or comparison) with user-facing error handling: bad input (no store, an unknown sweep,
    a bad config, a tracking server lost midway) is one ``analyze: error:`` line, exit
    :data:`EXIT_BAD_INPUT`; anything else keeps its traceback. The config and the store's presence are checked
    before the analysis' modules and MLflow load."""
    from trainbench.analysis.runs import require_store
    from trainbench.config.analyze import tracking_uri, validate_analyze
    from trainbench.core.errors import AnalysisError, ConfigError

    task_started()
    valid = None
    try:
        valid = validate_analyze(cfg)
        require_store(tracking_uri(valid))
        check_store_writable(valid)
        with paused_for_imports():
            from trainbench.analysis.pipeline import run_analysis
            from trainbench.tracking.connection import connect  # noqa: F401 - MLflow, without the collector

        if valid.compare.sweeps:
            from trainbench.analysis.compare import run_compare

            run_compare(valid)
        else:
            run_analysis(valid)
    except (AnalysisError, ConfigError) as e:
        print(f"analyze: error: {safe_message(str(e))}", file=sys.stderr)  # may quote logged text: escaped
        sys.exit(EXIT_BAD_INPUT)
    except Exception as e:
        from trainbench.tracking.connection import store_lost_message

        uri = tracking_uri(valid) if valid is not None else str(cfg.tracking.uri)
        lost = store_lost_message(e, uri)  # the server died during the analysis: one line
        if lost is None:
            raise
        print(f"analyze: error: {lost}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def check_store_writable(valid: Any) -> None:
    """The report is logged back to MLflow: a read-only SQLite store fails now, with the way around it."""
    from trainbench.config.analyze import tracking_uri
    from trainbench.core.errors import AnalysisError, StoreProblem
    from trainbench.tracking.store import check_sqlite_writable, sqlite_path

    path = sqlite_path(tracking_uri(valid))
    if valid.analysis.log_to_mlflow and path is not None and path.is_file():
        try:
            check_sqlite_writable(path)
        except StoreProblem as e:
            raise AnalysisError(f"{e} The report is logged back to the store: to analyse a read-only store, "
                                f"pass analysis.log_to_mlflow=false.") from None


def offers_command(args: Any) -> int:
    """`trainbench offers refresh|list`: bad input (a folder that is no catalogue, a malformed or oversized file,
    a bad filter) is one ``error:`` line and exit :data:`EXIT_BAD_INPUT`."""
    from trainbench.analysis.decision import offers
    from trainbench.analysis.projection.gpus import load_gpus
    from trainbench.config.analyze import DecisionConfig
    from trainbench.core.errors import ConfigError

    try:
        gpus = load_gpus()
        if args.offers_cmd == "refresh":
            commits = dict(c.split("=", 1) for c in args.commit if "=" in c)
            if len(commits) != len(args.commit):
                raise ConfigError(f"--commit {args.commit}: give CLOUD=SHA, e.g. --commit aws=e385a0d")
            cat, files = offers.refresh(args.source, args.to, gpus, commits, args.read)
            print(f"wrote {len(cat.offers)} offers ({cat.described}, read {cat.read}) to {files[-1].parent}")
            print(cat.screened_line())
            return EXIT_OK
        filters = dict(f.split("=", 1) for f in args.filters if "=" in f)
        bad = [f for f in args.filters if "=" not in f or f.split("=", 1)[0] not in ("gpu", "cloud")]
        if bad:
            raise ConfigError(f"offers list {' '.join(bad)}: filters are gpu=<entry or accelerator> and "
                              "cloud=<name>, e.g. gpu=h100")
        d = DecisionConfig(plan=[])
        cat = offers.load(args.offers, gpus)
        used = offers.decision_offers(cat, list(d.gpu_counts), args.spot, d.spot_restart_allowance)
        print(offers.listing(cat, used, filters))
        return EXIT_OK
    except ConfigError as e:
        print(f"trainbench offers: error: {safe_message(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT


#: The Hydra commands of `trainbench`: everything after the name is Hydra's command line.
HYDRA_COMMANDS = {"run": run_command, "analyze": analyze_command}


def main(argv: list[str] | None = None) -> int:
    """`trainbench <command>`: ``run`` and ``analyze`` (Hydra apps, as run.py and analyze.py) and small
    utilities."""
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in HYDRA_COMMANDS:
        HYDRA_COMMANDS[argv[0]](argv[1:])
        return EXIT_OK
    ap = argparse.ArgumentParser(prog="trainbench", description="trainbench: train and measure models, "
                                 "analyse the runs, and small utilities")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="train and measure (Hydra overrides as arguments, -m for a sweep; as run.py)",
                   add_help=False)
    sub.add_parser("analyze", help="analyse a sweep's runs and write the report (Hydra overrides as "
                   "arguments; as analyze.py)", add_help=False)
    sub.add_parser("config", help="print every config key with its default and doc")
    docs = sub.add_parser("docs", help="write the generated documents (docs/report-schema.md, from the report's "
                          "types) under the working folder; --check: fail when they differ")
    docs.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    offers = sub.add_parser("offers", help="the cloud offers the decision prices (SkyPilot's catalogue format)")
    osub = offers.add_subparsers(dest="offers_cmd", required=True)
    ref = osub.add_parser("refresh", help="rebuild the packaged extract from a SkyPilot catalogue folder")
    ref.add_argument("--from", dest="source", type=Path, help="a folder of <cloud>/vms.csv files (SkyPilot's "
                     "catalogs/v8/); default: the newest ~/.sky/catalogs/<version>/")
    ref.add_argument("--to", type=Path, help="where to write the extract; default: the packaged one (conf/offers/)")
    ref.add_argument("--commit", action="append", default=[], metavar="CLOUD=SHA",
                     help="the catalogue's commit of a cloud's file (else the folder's source.json)")
    ref.add_argument("--read", help="the date the catalogue was read (default: source.json's, else today)")
    lst = osub.add_parser("list", help="print the offers the decision considers: gpu=<entry or accelerator>, "
                          "cloud=<name>")
    lst.add_argument("filters", nargs="*", metavar="KEY=VALUE", help="gpu=h100, cloud=aws")
    lst.add_argument("--offers", default="packaged", help="packaged | skypilot | a folder or vms.csv "
                     "(as decision.offers)")
    lst.add_argument("--spot", action="store_true", help="also the spot rows (as decision.spot=true)")
    from trainbench.tracking import sync

    sync.add_arguments(sub.add_parser("sync", help="upload runs' spooled writes (tracking server was away)"))
    args = ap.parse_args(argv)
    if args.cmd == "config":
        import runpy

        runpy.run_module("trainbench.config", run_name="__main__")
    if args.cmd == "sync":
        return sync.run(args)
    if args.cmd == "offers":
        return offers_command(args)
    if args.cmd == "docs":
        from trainbench.analysis.report import schema

        try:
            if args.check:
                problem = schema.check()
                if problem:
                    print(f"trainbench docs: {problem}", file=sys.stderr)
                    return EXIT_FAILED
                return EXIT_OK
            print(f"wrote {schema.write()}")
        except USER_ERRORS as e:  # not the repository's root, or a folder that cannot be written
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return EXIT_OK
