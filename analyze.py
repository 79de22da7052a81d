"""Analyse a sweep's MLflow runs: statistics, coverage, the local-vs-cloud decision, and a report.

    python analyze.py                              the newest sweep in the experiment
    python analyze.py sweep=<sweep_id>             one sweep (sweep=all: every training run)
    python analyze.py hardware=rtx3050ti_4gb       price local training with that card's power and tariff
    python analyze.py tracking=server analysis.outliers=mad
    python analyze.py +decision.estimates.tft.epoch_ms=40 +decision.target_epochs.tft=1500
    python analyze.py compare=<sweep_a>,<sweep_b>  did b train faster or slower than a, model by model
    python analyze.py compare=previous,latest compare.threshold=0.03

Writes reports/<sweep_id>/ (report.json, report.md, PNG plots) and logs it to MLflow as a run tagged
kind=analysis; a comparison writes reports/compare_<a>_vs_<b>/ and a run tagged kind=compare
(docs/reproducibility.md). A problem with the input (no store, unknown sweep, bad config) prints one line
and exits 2.
"""

import sys

import hydra
from omegaconf import DictConfig

from trainbench.config import register_configs

register_configs(include_models=False)


@hydra.main(version_base="1.3", config_path="conf", config_name="analyze")
def main(cfg: DictConfig) -> None:
    from trainbench.analysis.pipeline import run_analysis
    from trainbench.analysis.runs import AnalysisError
    from trainbench.config import ConfigError, validate_analyze

    try:
        valid = validate_analyze(cfg)
        if valid.compare.sweeps:
            from trainbench.analysis.sweep_compare import run_compare

            run_compare(valid)
        else:
            run_analysis(valid)
    except (AnalysisError, ConfigError) as e:
        print(f"analyze: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    from trainbench.analysis.sweep_compare import compare_argv

    sys.argv[1:] = compare_argv(sys.argv[1:])  # compare=a,b would otherwise be a Hydra sweep over two values
    from trainbench.cli import hydra_app

    hydra_app(main)  # Hydra's own errors (unknown option, misspelled key) exit 2 like ours
