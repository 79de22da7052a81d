"""Fixtures for the plugin tests: fake installed distributions and a clean Hydra ConfigStore.

A fake distribution is a ``<name>-<version>.dist-info`` folder (METADATA and entry_points.txt) on
``sys.path``, which importlib.metadata finds like an installed one; its modules are written beside it.
So the tests need no ``pip install`` and run on a fresh clone.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.plugins import EXAMPLE


@pytest.fixture
def example_on_path() -> None:
    """The example package imported from its folder, without installing it and without putting its src/ on
    sys.path (where a `pip install -e` leaves an egg-info that importlib.metadata would take for an
    installed distribution)."""
    if "lstm_forecaster" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location("lstm_forecaster", EXAMPLE / "__init__.py",
                                                  submodule_search_locations=[str(EXAMPLE)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["lstm_forecaster"] = module
    spec.loader.exec_module(module)


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``fake_dist(name, version, entry_points={model: "pkg.mod:SPEC"}, modules={"pkg/mod.py": source})``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def make(name: str, version: str = "1.0", entry_points: dict[str, str] | None = None,
             modules: dict[str, str] | None = None) -> Path:
        info = tmp_path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = ["[trainbench.models]"] + [f"{k} = {v}" for k, v in (entry_points or {}).items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for rel, source in (modules or {}).items():
            path = tmp_path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
            written.append(rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))
        importlib.invalidate_caches()
        return info

    yield make
    for mod in written:  # a later test may write a module of the same name
        sys.modules.pop(mod, None)


@pytest.fixture
def clean_config_store():
    """Restore the ConfigStore's ``model`` group after a test that stores plugin model configs (the rest,
    Hydra's own configs included, registers once per process and is left alone)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    saved = copy.deepcopy(cs.repo.get("model", {}))
    yield cs
    cs.repo["model"] = saved
