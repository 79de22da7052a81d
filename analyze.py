"""Analyse a sweep's MLflow runs: statistics, coverage, the local-vs-cloud decision, and a report.

    python analyze.py                              the newest sweep in the experiment
    python analyze.py sweep=<sweep_id>             one sweep (sweep=all: every training run)
    python analyze.py hardware=rtx3050ti_4gb       price local training with that card's power and tariff
    python analyze.py tracking=server analysis.outliers=mad
    python analyze.py +decision.estimates.tft.epoch_ms=40 +decision.target_epochs.tft=1500
    python analyze.py compare=<sweep_a>,<sweep_b>  did b train faster or slower than a, model by model
    python analyze.py compare=previous,latest compare.threshold=0.03
    python analyze.py hardware=rtx3050ti_4gb       ... and print its projected per-model times
    python analyze.py project=t4,a100_40gb         per-model projections on those GPUs, side by side

Writes reports/<sweep_id>/ (report.json, report.md, PNG plots) and logs it to MLflow as a run tagged
kind=analysis; a comparison writes reports/compare_<a>_vs_<b>/ and a run tagged kind=compare
(docs/reproducibility.md). A problem with the input (no store, unknown sweep, bad config) prints one line
and exits 2.
"""

import sys

import hydra
from omegaconf import DictConfig

from trainbench.config.analyze import register_analysis_configs

register_analysis_configs()  # analyze.py's schemas only: no model registry, no torch


@hydra.main(version_base="1.3", config_path="conf", config_name="analyze")
def main(cfg: DictConfig) -> None:
    from trainbench.analysis.pipeline import run_analysis
    from trainbench.cli import task_started
    from trainbench.config.analyze import validate_analyze
    from trainbench.core.errors import EXIT_BAD_INPUT, AnalysisError, ConfigError

    task_started()
    valid = None
    try:
        valid = validate_analyze(cfg)
        check_store_writable(valid)
        if valid.compare.sweeps:
            from trainbench.analysis.compare import run_compare

            run_compare(valid)
        else:
            run_analysis(valid)
    except (AnalysisError, ConfigError) as e:
        from trainbench.cli import safe_message

        print(f"analyze: error: {safe_message(str(e))}", file=sys.stderr)  # may quote logged text: escaped
        sys.exit(EXIT_BAD_INPUT)
    except Exception as e:
        from trainbench.analysis.report.record import tracking_uri
        from trainbench.tracking.connection import store_lost_message

        uri = tracking_uri(valid) if valid is not None else str(cfg.tracking.uri)
        lost = store_lost_message(e, uri)  # the server died during the analysis: one line
        if lost is None:
            raise
        print(f"analyze: error: {lost}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def check_store_writable(valid) -> None:
    """The report is logged back to MLflow: a read-only SQLite store fails now, with the way around it."""
    from trainbench.analysis.report.record import tracking_uri
    from trainbench.core.errors import AnalysisError, StoreProblem
    from trainbench.tracking.store import check_sqlite_writable, sqlite_path

    path = sqlite_path(tracking_uri(valid))
    if valid.analysis.log_to_mlflow and path is not None and path.is_file():
        try:
            check_sqlite_writable(path)
        except StoreProblem as e:
            raise AnalysisError(f"{e} The report is logged back to the store: to analyse a read-only store, "
                                f"pass analysis.log_to_mlflow=false.") from None


if __name__ == "__main__":
    from trainbench.analysis.compare import compare_argv
    from trainbench.analysis.projection.projection import project_argv
    from trainbench.cli import run_app

    sys.argv[1:] = compare_argv(sys.argv[1:])  # compare=a,b would otherwise be a Hydra sweep over two values
    sys.argv[1:] = project_argv(sys.argv[1:])  # likewise project=a,b
    run_app(main)
