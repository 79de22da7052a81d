"""MLflow: the run writer (one run per job, the contract of DESIGN.md) and the Hydra sweep callback."""

from trainbench.tracking.writer import RunWriter, TrackingUnavailable, connect, flatten, resolve_uri

__all__ = ["RunWriter", "TrackingUnavailable", "connect", "flatten", "resolve_uri"]
