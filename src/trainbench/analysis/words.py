"""Words every stage writes the same way (the decision's rationale, the report, the analysis run's description):
below the stages, so that the decision and the report share them without one importing the other."""

from __future__ import annotations


def hours_phrase(x: float | None) -> str:
    """Hours in a sentence (the decision's rationale, the analysis run's description)."""
    if x is None:
        return "n/a"
    if x < 1 / 60:
        return f"{x * 3600:.3g} s"
    if x < 1:
        return f"{x * 60:.1f} min ({x:.3f} h)"
    return f"{x:.1f} h"
