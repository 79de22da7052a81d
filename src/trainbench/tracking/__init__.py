"""MLflow: the run writer (one run per job, in the run contract of trainbench.core.vocab) and the Hydra sweep callback."""

from trainbench.core.errors import TrackingUnavailable
from trainbench.tracking.connection import connect, resolve_uri
from trainbench.tracking.writer import RunWriter, flatten

__all__ = ["RunWriter", "TrackingUnavailable", "connect", "flatten", "resolve_uri"]
