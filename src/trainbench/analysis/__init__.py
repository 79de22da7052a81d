"""From MLflow runs to statistics, coverage, a local-vs-cloud decision and a report.

Reads only what MLflow holds (docs/run-contract.md); never imports torch, ``models/`` or ``measure/``.
Entry points: :func:`trainbench.analysis.pipeline.run_analysis` (``python analyze.py``) and
:func:`trainbench.analysis.compare.run_compare` (``python analyze.py compare=a,b``). One home per job, a
sub-package per stage: runs.py reads runs; statistics/ computes the statistics (stats.py with
block_bootstrap.py, and the busy-machine words); projection/ projects to other GPUs (gpus.py the catalogue,
roofline.py, kernel_model.py, calibration.py, devices.py); plan/ plans the training (plan.py, curves.py,
montecarlo.py); decision/ decides; report/ writes every text and JSON file (report.py), every PNG (plots.py)
and logs the reports back to MLflow (record.py), from the report's types (report_types.py,
statistics/timing.py; fields.py: their docs and JSON form). pipeline.py runs the stages in order; compare.py
compares two sweeps.
"""

from trainbench.core.errors import AnalysisError

__all__ = ["AnalysisError"]
