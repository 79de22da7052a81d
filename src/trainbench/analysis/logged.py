"""Values as MLflow keeps them (params and tags are strings) read back as numbers, in one way for every
stage of the analysis."""

from __future__ import annotations

import math
from typing import Any


def logged_int(value: Any) -> int | None:
    """A logged param or tag as an integer (``"64"``, ``"64.0"``, 64): None when it is missing, not a number or
    not finite (``"inf"``, ``"nan"``)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return int(x) if math.isfinite(x) else None
