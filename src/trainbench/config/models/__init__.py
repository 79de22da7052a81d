"""trainbench's own models as the configuration knows them, without their code (no torch): each model's config
class and :class:`~trainbench.config.models.spec.ModelSchema` (``<name>.py``), and :data:`SCHEMAS`, the schema
of each built-in model by name.

The built-in models themselves are the ``trainbench.models`` entry points of ``pyproject.toml``; each model
module builds its ``SPEC`` on its schema here (``ModelSpec.of(SCHEMA, build)``), and a test keeps the two lists
equal. What composes the configuration (:mod:`trainbench.compose`, ``--help``, ``python -m trainbench.config``)
reads the schemas here, so it imports neither torch nor a model module.
"""

from trainbench.config.models import dqn, mamba2, ppo, tft, tlob
from trainbench.config.models.spec import ModelSchema, ModelSpec

#: The schema of every built-in model, by name.
SCHEMAS: dict[str, ModelSchema] = {m.SCHEMA.name: m.SCHEMA for m in (dqn, mamba2, ppo, tft, tlob)}

__all__ = ["SCHEMAS", "ModelSchema", "ModelSpec"]
