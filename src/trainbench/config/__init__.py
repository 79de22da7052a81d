"""The configuration's schemas, on the ground floor (no torch, no MLflow): run.py's (:mod:`.run`), analyze.py's
(:mod:`.analyze`), trainbench's own models' (:mod:`.models`: each model's config class and schema, apart from
its code), and the key reference (:mod:`.reference`, ``python -m trainbench.config``).

Hydra's ConfigStore registration of every schema, the models' included, is :mod:`trainbench.compose`
(above the models, since it asks the model registry, which declares the plugins).
"""
