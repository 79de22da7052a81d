"""Test helpers live in one place (tests/helpers/) and are imported from there: no test imports another test
file, and a module under tests/ is a test, a conftest, or a helper module."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_imports_another_test_file_or_a_conftest():
    bad = {str(p.relative_to(TESTS)): sorted(m for m in _imported_modules(p)
                                             if m.split(".")[-1].startswith("test_") or m.split(".")[-1] == "conftest")
           for p in _sources()}
    assert not {k: v for k, v in bad.items() if v}, "import the helper from tests/helpers/ instead"


def test_every_module_is_a_test_a_conftest_or_a_helper():
    others = [str(p.relative_to(TESTS)) for p in _sources()
              if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")
              and "helpers" not in p.relative_to(TESTS).parts and not p.stem.endswith("_helpers")]
    assert others == [], "shared test code belongs in tests/helpers/"


def test_the_guard_sees_a_cross_test_import(tmp_path):
    p = tmp_path / "test_x.py"
    p.write_text("from test_pipeline import _analyze\nimport helpers.data\n")
    assert _imported_modules(p) == {"test_pipeline", "helpers.data"}
