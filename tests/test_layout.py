"""The shape of the code base: no import circle, no oversized file, an analysis free of torch and the models.

The import graph is read from the sources (``ast``), so a circle is found before it bites at run time. An
import inside a function (run when the function is called) is an edge of its own kind: a circle through one
works, but only the module-level graph must be free of circles. Imports under ``if TYPE_CHECKING:`` never
run and are left out.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "trainbench"
MAX_LINES = 500


@dataclass
class ImportGraph:
    """Project modules and their imports of each other: ``module`` (at import time) and ``function`` edges."""

    modules: dict[str, Path]
    module_level: dict[str, set[str]] = field(default_factory=dict)
    function_level: dict[str, set[str]] = field(default_factory=dict)
    #: top-level names of outside packages imported anywhere in each module (torch, mlflow, ...)
    external: dict[str, set[str]] = field(default_factory=dict)
    #: function-level edges by the module's top-level function (or class) they are in
    by_function: dict[str, dict[str, set[str]]] = field(default_factory=dict)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool, str | None]]:
    """Every import statement: whether it runs at import time (not inside a function), and the top-level
    function or class it is in (None at module level)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool, str | None]] = []

    def visit(node: ast.AST, in_function: bool, top: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_stmt(stmt, in_function, top)
                continue
            visit_stmt(child, in_function, top)

    def visit_stmt(node: ast.AST, in_function: bool, top: str | None) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, not in_function, top))
        if top is None and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top = node.name
        visit(node, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda), top)

    visit(tree, False, None)
    return found


def build_graph(src: Path = SRC, package: str = PACKAGE) -> ImportGraph:
    files = sorted((src / package).rglob("*.py"))
    g = ImportGraph(modules={_module_name(p): p for p in files})
    for name, path in g.modules.items():
        g.module_level[name], g.function_level[name], g.external[name] = set(), set(), set()
        g.by_function[name] = {}
        is_package = path.name == "__init__.py"
        for node, at_import, top in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's own package
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in g.modules else base for a in node.names]
            for t in targets:
                if t == package or t.startswith(package + "."):
                    while t not in g.modules and "." in t:  # `import a.b.c` of a name inside a module
                        t = t.rsplit(".", 1)[0]
                    if t != name:
                        (g.module_level if at_import else g.function_level)[name].add(t)
                        if not at_import and top:
                            g.by_function[name].setdefault(top, set()).add(t)
                else:
                    g.external[name].add(t.split(".")[0])
    return g


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := dfs(start)):
            return found
    return None


def reachable(g: ImportGraph, starts: list[str], calls_into: str) -> dict[str, list[str]]:
    """Every project module that importing ``starts`` and calling their functions may load, with a path to it.

    Imports at import time are followed everywhere; imports inside functions only in ``starts`` and in the
    modules under ``calls_into`` (the code whose functions the caller runs: a module-level graph cannot tell
    which functions of a helper module are called). ``module:f,g`` starts from that module's module-level
    imports and the imports inside its functions f and g only."""
    via: dict[str, list[str]] = {}
    todo = []
    for s in starts:
        module, _, functions = s.partition(":")
        via[module] = [module]
        if not functions:
            todo.append(module)
            continue
        for nxt in sorted(g.module_level[module].union(*(g.by_function[module].get(f, set())
                                                          for f in functions.split(",")))):
            if nxt not in via:
                via[nxt] = [s, nxt]
                todo.append(nxt)
    while todo:
        m = todo.pop()
        lazy = g.function_level[m] if m in starts or m == calls_into or m.startswith(calls_into + ".") else set()
        for nxt in sorted(g.module_level[m] | lazy):
            if nxt not in via:
                via[nxt] = via[m] + [nxt]
                todo.append(nxt)
    return via


GRAPH = build_graph()


def test_the_graph_is_read_from_the_sources():
    """The reader sees what the code imports (it would pass vacuously on an empty graph)."""
    assert {"trainbench.compose", "trainbench.config.run", "trainbench.config.analyze", "trainbench.train"} <= set(
        GRAPH.modules)
    assert "trainbench.models.registry" in GRAPH.function_level["trainbench.compose"]  # register_configs
    assert "trainbench.config.run" in GRAPH.module_level["trainbench.train"]
    assert "torch" in GRAPH.external["trainbench.models.base"]
    assert "trainbench.config.run" not in GRAPH.module_level["trainbench.models.base"]  # under TYPE_CHECKING


def test_reachable_follows_lazy_imports_only_where_asked():
    g = ImportGraph(modules={m: Path(m) for m in ["a", "b", "c", "d"]},
                    module_level={"a": set(), "b": {"c"}, "c": set(), "d": set()},
                    function_level={"a": {"b"}, "b": {"d"}, "c": set(), "d": set()},
                    by_function={"a": {"f": {"b"}}, "b": {}, "c": {}, "d": {}})
    assert reachable(g, ["a"], calls_into="a") == {"a": ["a"], "b": ["a", "b"], "c": ["a", "b", "c"]}
    assert set(reachable(g, ["a:g"], calls_into="x")) == {"a"}
    assert set(reachable(g, ["a"], calls_into="x")) == {"a", "b", "c"}  # a start's own lazy imports count
    assert set(reachable(g, ["a"], calls_into="b")) == {"a", "b", "c", "d"}


def test_find_cycle_reports_the_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_among_module_level_imports():
    cycle = find_cycle(GRAPH.module_level)
    assert cycle is None, "module-level import circle: " + " -> ".join(cycle or [])


def test_import_circles_through_function_level_imports_are_listed_not_hidden():
    """Circles that close only through an import inside a function run, but each is a seam to watch: the
    report names them (printed with -s); the module-level graph alone stays circle-free."""
    both = {m: GRAPH.module_level[m] | GRAPH.function_level[m] for m in GRAPH.modules}
    cycle = find_cycle(both)
    if cycle:
        print("circle through a function-level import:", " -> ".join(cycle))
        assert any(b in GRAPH.function_level[a] and b not in GRAPH.module_level[a]
                   for a, b in zip(cycle, cycle[1:], strict=False))


def test_the_schemas_import_nothing_from_the_project_at_import_time():
    """Model modules build on trainbench.config.run; it must not import them (or anything else of trainbench)."""
    assert GRAPH.module_level["trainbench.config.run"] == set()
    assert GRAPH.module_level["trainbench.config.analyze"] == {"trainbench.config.run"}
    assert "torch" not in GRAPH.external["trainbench.config.run"] | GRAPH.external["trainbench.config.analyze"]


def test_no_source_file_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"source files over {MAX_LINES} lines (split them along their jobs): {long}"


def test_the_line_count_rule_sees_the_sources():
    counts = [len(p.read_text().splitlines()) for p in SRC.rglob("*.py")]
    assert len(counts) > 50 and max(counts) > 100


#: What analyze.py must never load: it reads MLflow only.
FORBIDDEN = ("torch", "trainbench.models", "trainbench.measure", "trainbench.bench")


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


#: analyze.py's own imports (the script is outside the package): its module level and main(); of
#: trainbench.cli it calls only task_started and run_app (run_job, run.py's, imports the trainer).
ANALYZE_ENTRY = ["trainbench.config.analyze", "trainbench.analysis.pipeline", "trainbench.analysis.compare",
                 "trainbench.analysis.record",
                 "trainbench.analysis.projection", "trainbench.analysis.runs", "trainbench.cli:task_started,run_app",
                 "trainbench.tracking.store", "trainbench.config.run"]


def test_analyze_py_imports_only_what_it_names():
    """ANALYZE_ENTRY lists analyze.py's trainbench imports; a new one must be added there (and checked)."""
    tree = ast.parse((REPO / "analyze.py").read_text())
    named = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
        PACKAGE)}
    entry = {e.partition(":")[0] for e in ANALYZE_ENTRY}
    assert named and named <= entry, sorted(named - entry)


def test_nothing_the_analysis_may_call_imports_torch_the_models_or_the_harness():
    """Static: from analyze.py's imports, through every import at import time and every import inside the
    analysis' own functions (the test below checks a real run of analyze.py)."""
    via = reachable(GRAPH, ANALYZE_ENTRY, calls_into="trainbench.analysis")
    bad = {m: " -> ".join(p) for m, p in via.items() if _forbidden(m)}
    assert not bad, f"the analysis reaches: {bad}"
    torch_users = {m: " -> ".join(via[m]) for m in via if "torch" in GRAPH.external[m]}
    assert not torch_users, f"these analysis modules import torch: {torch_users}"


def test_importing_analyze_loads_no_torch_models_or_harness(tmp_path):
    """Real imports in a fresh interpreter: analyze.py, its entry functions and every analysis module; then
    `python analyze.py` against an empty store runs main() up to its error line."""
    code = f"""
import json, pkgutil, importlib, sys, runpy
sys.path.insert(0, {str(REPO)!r})
import analyze
from trainbench.analysis.pipeline import run_analysis
from trainbench.analysis.compare import run_compare
import trainbench.analysis
for m in pkgutil.iter_modules(trainbench.analysis.__path__):
    importlib.import_module("trainbench.analysis." + m.name)
loaded = sorted(sys.modules)
sys.argv = ["analyze.py", "tracking.uri=sqlite:///{tmp_path}/none.db", "paths.reports={tmp_path}/reports"]
try:
    runpy.run_path({str(REPO / 'analyze.py')!r}, run_name="__main__")
except SystemExit as e:
    code = e.code
print(json.dumps({{"imported": loaded, "after_main": sorted(sys.modules), "exit": code}}))
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.stdout.strip(), p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "trainbench.analysis.pipeline" in out["imported"] and "trainbench.config.analyze" in out["imported"]
    assert out["exit"] == 2, p.stderr  # main() ran: no store there is bad input
    for when in ("imported", "after_main"):
        bad = [m for m in out[when] if _forbidden(m)]
        assert not bad, f"{when}: analyze.py loaded {bad[:10]}"


def test_config_names_are_imported_from_where_they_are_defined():
    """trainbench.compose registers and composes; the schemas are imported from trainbench.config.run and
    trainbench.config.analyze (no name passes through compose.py on its way)."""
    config = ast.parse((SRC / PACKAGE / "compose.py").read_text())
    own = {n.name for n in config.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    files = [p for d in ("src", "tests", "benchmarks", "scripts", "examples") for p in (REPO / d).rglob("*.py")]
    wrong = {}
    for path in [*files, REPO / "run.py", REPO / "analyze.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            bad = [a.name for a in node.names if a.name not in own] if (
                isinstance(node, ast.ImportFrom) and node.module == "trainbench.compose") else []
            if bad:
                wrong[str(path.relative_to(REPO))] = bad
    assert "compose_run" in own and "register_configs" in own
    assert not wrong, f"import these from trainbench.config.run / trainbench.config.analyze: {wrong}"
