"""``python -m trainbench.check <spec>``: the command users type for the conformance check.

An alias kept for that command; the check itself is :mod:`trainbench.conformance`
(``python -m trainbench.conformance`` runs the same).
"""

import sys

from trainbench.conformance import main

if __name__ == "__main__":
    sys.exit(main())
