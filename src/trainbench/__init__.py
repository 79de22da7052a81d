"""trainbench: how long will training take on this GPU, what will it cost, local or cloud?"""

from pathlib import Path

__version__ = "0.1.0"

#: Root of the source checkout (where ``conf/``, ``mlruns/`` and ``data/`` live).
REPO_ROOT = Path(__file__).resolve().parents[2]
