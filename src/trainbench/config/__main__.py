"""``python -m trainbench.config``: every key with its type, default and doc, every registered model's included.

A command, so it stands on top of the floors: it asks the model registry (which imports torch and the
models) for the models' config classes; the rest of the package ``trainbench.config`` never does.
"""

from trainbench.config.reference import reference
from trainbench.models.registry import REGISTRY, describe_models

for key, type_, default, doc in reference(REGISTRY.specs()):
    print(f"{key:40s} {type_:16s} {default:14s} {doc}")
print("\n" + describe_models())
