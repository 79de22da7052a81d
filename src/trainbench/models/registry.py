"""The single list of models. Every sweep, config file and report is checked against it.

Registering a name twice, or asking for a name that is not here, raises with the known names: a
benchmark must never silently skip a model.
"""

from __future__ import annotations

from trainbench.models import tlob
from trainbench.models.base import ModelSpec


class UnknownModelError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}

    def register(self, spec: ModelSpec) -> ModelSpec:
        if spec.name in self._specs:
            raise ValueError(f"model {spec.name!r} is already registered")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ModelSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownModelError(
                f"unknown model {name!r}: known models are {', '.join(self.names())}. "
                f"Pick one with model=<name>.") from None

    def names(self) -> list[str]:
        return sorted(self._specs)

    def specs(self) -> list[ModelSpec]:
        return [self._specs[n] for n in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)


REGISTRY = Registry()

# The list. One line per model module; each module exports SPEC.
from trainbench.models import dqn, mamba2, ppo, tft  # noqa: E402

_MODULES = (
    dqn,
    ppo,
    mamba2,
    tft,
    tlob,
)

for _module in _MODULES:
    REGISTRY.register(_module.SPEC)
