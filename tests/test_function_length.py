"""No function a reader must scroll: none in ``src/`` is longer than :data:`MAX_LINES` lines (its ``def`` line to
its last, docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "trainbench"
MAX_LINES = 100


def long_functions(root: Path = PACKAGE, limit: int = MAX_LINES) -> dict[str, int]:
    """``{"<path under root>:<function>": lines}`` of every function (methods and nested ones too) over ``limit``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return out


def test_no_function_in_src_is_over_100_lines():
    assert long_functions() == {}


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert long_functions(tmp_path) == {"m.py:long": MAX_LINES + 1}
