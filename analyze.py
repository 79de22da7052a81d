"""Analyse a sweep's MLflow runs: statistics, coverage, the local-vs-cloud decision, and a report (the same
as `trainbench analyze`).

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
and exits 2. A thin wrapper: the command is :func:`trainbench.cli.analyze_command` (no torch is loaded).
"""

from trainbench.cli import analyze_command

if __name__ == "__main__":
    analyze_command()
