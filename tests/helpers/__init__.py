"""Helpers shared by the tests, imported from here and never copied or imported from a test file.

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), so tests import them as
``helpers.<module>``:

- :mod:`helpers.data`: an in-memory MBP-10 book (``random_book``, ``book_data``, ``make_book_data``),
  the bars (``make_market_data``), data of a model's kind (``data_for``), a small ``DataConfig``.
- :mod:`helpers.models`: every registered model's composed config (``model=<name> size=tiny``, with overrides)
  and builders for it.
- :mod:`helpers.workloads`: workload profiles as runs record them (a small DQN, one reference TFT step).
- :mod:`helpers.fakes`: a fake trainable for the harness (epochs of given losses, raises on request).
- :mod:`helpers.runs`: reading a store's train runs and metric steps with MLflow's client.
- :mod:`helpers.procs`: the environment of a child process (run.py, analyze.py, workers).
- :mod:`helpers.servers`: a real ``mlflow server`` and a throwaway PostgreSQL cluster.
- :mod:`helpers.slurm_cluster`: a throw-away single-node SLURM cluster.
"""
