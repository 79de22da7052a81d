"""From MLflow runs to statistics, coverage, a local-vs-cloud decision and a report.

Reads only what MLflow holds (docs/run-contract.md); never imports torch, ``models/`` or ``measure/``.
Entry points: :func:`trainbench.analysis.pipeline.run_analysis` (``python analyze.py``) and
:func:`trainbench.analysis.compare.run_compare` (``python analyze.py compare=a,b``). One home per job:
runs.py reads runs; stats.py (with block_bootstrap.py) computes the statistics; decision.py, devices.py and
projection.py (with gpus.py, roofline.py, kernel_model.py and calibration.py) decide and project; report.py
writes every text and JSON file, plots.py every PNG, record.py logs the reports back to MLflow.
"""

from trainbench.core.errors import AnalysisError

__all__ = ["AnalysisError"]
