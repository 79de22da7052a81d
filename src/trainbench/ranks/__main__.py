"""``python -m trainbench.ranks <folder>``: one rank of a data-parallel job, as torchrun's agent starts it
(:func:`trainbench.ranks.rank_main`); its exit status tells the agent how it ended."""

import sys
from pathlib import Path

from trainbench.ranks import rank_main

sys.exit(rank_main(Path(sys.argv[1])))
