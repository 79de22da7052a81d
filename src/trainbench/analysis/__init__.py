"""From MLflow runs to statistics, coverage, a local-vs-cloud decision and a report.

Reads only what MLflow holds (the run contract in DESIGN.md); never imports ``models/`` or ``measure/``.
Entry point: :func:`trainbench.analysis.pipeline.run_analysis` (``python analyze.py``).
"""

from trainbench.analysis.runs import AnalysisError

__all__ = ["AnalysisError"]
