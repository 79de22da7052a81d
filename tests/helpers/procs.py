"""Child processes of the tests (run.py, analyze.py, workers): where they run and their environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this process's environment) for a child that imports this checkout's sources
    (``PYTHONPATH=src``) on one thread (``OMP_NUM_THREADS=1``), with ``extra`` variables."""
    return {**(os.environ if base is None else base), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"),
            **extra}
