"""``python -m trainbench.config``: every key with its type, default and doc, every registered model's included.

A command, so it stands on top of the floors: it asks the model registry for the models' schemas (the built-in
models' are in :mod:`trainbench.config.models`; a plugin's is loaded from its entry point), and no torch is
imported for trainbench's own; the rest of the package ``trainbench.config`` never asks the registry.
"""

from trainbench.config.reference import reference
from trainbench.models.registry import REGISTRY, describe_models

for key, type_, default, doc in reference(REGISTRY.schemas()):
    print(f"{key:40s} {type_:16s} {default:14s} {doc}")
print("\n" + describe_models())


def _packaged_offers() -> str:
    """Where decision.offers=packaged's prices come from: conf/offers/source.json (analysis/decision/offers.py)."""
    import json

    from trainbench import CONF_DIR

    f = CONF_DIR / "offers" / "source.json"
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"decision.offers=packaged: no readable {f} (trainbench offers refresh writes it)"
    return f"decision.offers=packaged: {meta.get('described')}, read {meta.get('read')} ({f})"


print("\n" + _packaged_offers())

