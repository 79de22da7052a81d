"""Plugin test data: where the example package lives, and a plugin module that re-exports it."""

from __future__ import annotations

from helpers.procs import REPO

EXAMPLE = REPO / "examples" / "lstm_forecaster" / "src" / "lstm_forecaster"

#: A plugin module re-exporting the example's model under another name, so that the tests hold whether or
#: not the example itself is installed.
FAKE_LSTM = ("import dataclasses\nfrom lstm_forecaster.model import SPEC as _S\n"
             "SPEC = dataclasses.replace(_S, name={name!r})\n")
