"""The single list of models. Every sweep, config file and report is checked against it.

Registering a name twice, or asking for a name that is not here, raises with the known names: a
benchmark must never silently skip a model.
"""

from __future__ import annotations

from trainbench.models import dqn, mamba2, ppo, tlob  # noqa: E402

_MODULES = (
    dqn,
    ppo,
    mamba2,
    tlob,
)

for _module in _MODULES:
    REGISTRY.register(_module.SPEC)
