"""Lets these tests import the package from this folder when it is not installed (trainbench's own test
suite runs them so, from a fresh clone); after `pip install -e .` the installed package is used.

The package is loaded from its folder rather than by putting src/ on sys.path, where a `pip install -e`
leaves an egg-info that would look like an installed copy to importlib.metadata."""

import importlib.util
import sys
from pathlib import Path

try:
    import lstm_forecaster  # noqa: F401
except ImportError:
    _PKG = Path(__file__).resolve().parents[1] / "src" / "lstm_forecaster"
    _spec = importlib.util.spec_from_file_location("lstm_forecaster", _PKG / "__init__.py",
                                                   submodule_search_locations=[str(_PKG)])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["lstm_forecaster"] = _module
    _spec.loader.exec_module(_module)
