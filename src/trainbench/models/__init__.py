"""The models trainbench measures; :mod:`trainbench.models.registry` is the single list of them."""
