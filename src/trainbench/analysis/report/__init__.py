"""The report's outputs: report.json/report.md and the console, the plots, logging back to MLflow."""
