"""Values as MLflow keeps them (params and tags are strings) read back as numbers, in one way for every
stage of the analysis."""

from __future__ import annotations

import math
from typing import Any


def logged_int(value: Any, minimum: int | None = None) -> int | None:
    """A logged param or tag as an integer (``"64"``, ``"64.0"``, 64): None when it is missing, not a number,
    not finite (``"inf"``, ``"nan"``) or below ``minimum`` (a count or a batch size: ``minimum=1``)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x):
        return None
    n = int(x)
    return None if minimum is not None and n < minimum else n
