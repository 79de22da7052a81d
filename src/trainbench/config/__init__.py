"""The configuration's schemas, on the ground floor (no torch, no MLflow): run.py's (:mod:`.run`), analyze.py's
(:mod:`.analyze`), and the key reference (:mod:`.reference`, ``python -m trainbench.config``).

Hydra's ConfigStore registration of every schema, the models' included, is :mod:`trainbench.compose`
(above the models, since the models' config classes live in their modules).
"""
