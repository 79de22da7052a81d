"""The one error of a rerun that cannot be set up."""

from __future__ import annotations

from trainbench.config.run import ConfigError


class RerunError(ConfigError):
    """The rerun cannot be set up (unknown run, missing artifacts, incompatible config); says why and the fix."""
