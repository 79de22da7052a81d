"""trainbench: how long will training take on this GPU, what will it cost, local or cloud?"""

from pathlib import Path

__version__ = "0.1.0"

#: The shipped Hydra configs (package data): run's and analyze's configs, the models, data sets, trainer
#: profiles and the GPU catalogue (``conf/hardware``). Relative paths in them (``paths.root``: data/, mlruns/,
#: reports/, multirun/) resolve against the working folder, never this package.
CONF_DIR = Path(__file__).resolve().parent / "conf"
