"""The base of the config's value sets: enums whose members are their values.

A config key with a fixed set of values (``trainer.precision``, ``analysis.outliers``, ...) is an enum, so that
Hydra refuses any other value with the list of choices. Its members subclass ``str`` and print as their value,
so that every reader (a comparison, an f-string, ``json.dumps``, an MLflow param) sees the plain string and no
code unwraps ``.value``. Each value set lives once, beside the rule that uses it.
"""

from __future__ import annotations

import enum


class ValueEnum(str, enum.Enum):
    """A config value set whose members are their values: a member equals, prints, formats and serialises
    (JSON, MLflow params) as its plain string."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
