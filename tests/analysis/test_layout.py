"""The analysis package's shape: torch-free, no module borrowing another's private helper."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "src" / "trainbench" / "analysis"
MODULES = sorted(".".join(p.relative_to(PKG).with_suffix("").parts) for p in PKG.rglob("*.py")
                 if p.stem != "__init__")


def test_the_analysis_never_loads_torch_the_models_or_the_harness():
    """analyze.py's whole import tree (every analysis module, imported as its entry points import them) stays
    free of torch, trainbench.models and trainbench.measure, so the analysis runs where torch is not installed."""
    code = ("import json, sys, runpy\n"
            + "".join(f"import trainbench.analysis.{m}\n" for m in MODULES)
            + "import trainbench.analysis.compare, trainbench.analysis.pipeline\n"
            "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] == 'torch'"
            " or k.startswith(('trainbench.models', 'trainbench.measure')))))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert len(MODULES) >= 12  # the glob found the package


def test_no_analysis_module_imports_a_private_name():
    for path in PKG.rglob("*.py"):
        src = path.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainbench"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in (
                    "dec", "pj", "rep", "stats"):
                assert not node.attr.startswith("_"), f"{path.name} uses {node.value.id}.{node.attr}"
