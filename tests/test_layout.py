"""The floors of the code: each imports only the floors below it, no package holds an import cycle, and the
analysis runs without torch.

The rules are import-linter contracts (``[tool.importlinter]`` in pyproject.toml, described in
docs/architecture.md); import-linter reads every import, those inside functions included, so a cycle or an
upward dependency cannot hide in a function. These tests run the contracts on the sources, show that each
kind of rule fails when it is broken (a copy of the sources with one bad import added), and check at run time
that analyze.py loads neither torch nor the models.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.procs import child_env

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "trainbench"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _contracts() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def _floors() -> list[list[str]]:
    """The package's layers contract's floors, highest first, each a list of the sibling modules it holds."""
    (layers,) = [c for c in _contracts()["contracts"] if c["type"] == "layers" and c["containers"] == [PACKAGE]]
    return [[m.strip() for m in floor.replace(":", "|").split("|")] for floor in layers["layers"]]


def lint_imports(src: Path = SRC, config: Path = REPO / "pyproject.toml") -> subprocess.CompletedProcess:
    """import-linter over the package under ``src`` (a fresh graph: no cache)."""
    env = {"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(src), "LANG": "C.UTF-8"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)], cwd=config.parent,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    p = lint_imports()
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    summary = re.search(r"Contracts: (\d+) kept, (\d+) broken", p.stdout)
    assert summary and int(summary.group(1)) == len(_contracts()["contracts"]) and summary.group(2) == "0", p.stdout


def test_every_module_of_the_package_stands_on_a_floor():
    """A new top-level module or package must be given a floor (it would otherwise escape the layers rule)."""
    on_floors = {m for floor in _floors() for m in floor}
    children = {p.stem if p.is_file() else p.name for p in (SRC / PACKAGE).iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert children, "the package was not found"
    assert sorted(children - on_floors) == [], "give these modules a floor in pyproject.toml's layers contract"
    assert sorted(on_floors - children) == [], "the layers contract names modules that do not exist"


def _copy_sources(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    shutil.copytree(SRC / PACKAGE, src / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "pyproject.toml"
    shutil.copy(REPO / "pyproject.toml", config)
    return src, config


#: One broken rule of each kind, as an import inside a function (where a hand-written check often looks
#: away): (the module that gets the import, the import, a line the report must print).
BREAKS = {
    "a lower floor imports a higher one": (
        "core/trend.py", "from trainbench.train import train_job",
        "trainbench.core is not allowed to import trainbench.train"),
    "a cycle inside a package": (
        "tracking/spool.py", "from trainbench.tracking.sync import run",
        "No cycles are allowed in trainbench.tracking"),
    "the analysis loads torch": (
        "analysis/statistics/stats.py", "import torch",
        "trainbench.analysis is not allowed to import torch"),
    "the ground floor loads MLflow": (
        "core/secrets.py", "import mlflow",
        "trainbench.core is not allowed to import mlflow"),
    "the front door loads a model's code": (
        "models/registry.py", "from trainbench.models.base import count_params",
        "trainbench.models.registry is not allowed to import trainbench.models.base"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_the_contracts_fail_when_a_rule_is_broken(tmp_path, case):
    module, statement, expected = BREAKS[case]
    src, config = _copy_sources(tmp_path)
    path = src / PACKAGE / module
    assert path.is_file(), module
    path.write_text(path.read_text() + f"\n\ndef _breaks_the_rule():\n    {statement}\n")
    p = lint_imports(src, config)
    assert p.returncode != 0, p.stdout[-3000:]
    assert expected in p.stdout, p.stdout[-6000:]


def test_the_copy_without_a_break_passes(tmp_path):
    """The failures above come from the added import, not from the copy."""
    src, config = _copy_sources(tmp_path)
    p = lint_imports(src, config)
    assert p.returncode == 0, p.stdout[-6000:]


#: What analyze.py must never load at run time: it reads MLflow only.
FORBIDDEN = ("torch", "trainbench.models", "trainbench.measure", "trainbench.data", "trainbench.train")


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.slow
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
for m in pkgutil.walk_packages(trainbench.analysis.__path__, "trainbench.analysis."):
    importlib.import_module(m.name)
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
    assert "trainbench.analysis.pipeline" in out["imported"] and "trainbench.config.analyze" in out["after_main"]
    assert out["exit"] == 2, p.stderr  # main() ran: no store there is bad input
    for when in ("imported", "after_main"):
        bad = [m for m in out[when] if _forbidden(m)]
        assert not bad, f"{when}: analyze.py loaded {bad[:10]}"


#: What a training process never loads: statsmodels (with pandas' formula stack) and scipy.stats cost about
#: 0.8 CPU-s of every run's start on a 2-core CPU; the stop rule and the run's note need only numpy's FFT and
#: scipy.special's t quantile (core/timeseries.py).
RUN_FORBIDDEN = ("statsmodels", "scipy.stats", "patsy", "formulaic")


@pytest.mark.slow
def test_a_training_process_loads_no_statsmodels_and_no_scipy_stats():
    """A fresh interpreter imports the training job and calls what a run calls lazily at its end: the stop
    rule's precision and the run note's interval."""
    code = f"""
import json, sys
import numpy as np
import trainbench.train
from trainbench.measure.stoprule import precision
from trainbench.tracking.run_note import epoch_interval
from trainbench.core.vocab import Summary
precision(100 + np.random.default_rng(0).standard_normal(60))
epoch_interval({{Summary.EPOCH_TIME_MS_MEAN: 10.0, Summary.EPOCH_TIME_MS_STD: 1.0, Summary.EPOCHS_MEASURED: 5}})
forbidden = {RUN_FORBIDDEN!r}
print(json.dumps(sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden))))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=child_env())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


#: What the front door (composing, checking and explaining run.py's config) must never load.
FRONT_DOOR_FORBIDDEN = ("torch", "mlflow", "trainbench.models.base", "trainbench.models.dqn", "trainbench.train",
                        "trainbench.measure", "trainbench.data")


@pytest.mark.slow
def test_the_front_door_loads_no_torch_and_no_model(tmp_path):
    """Real commands in a fresh interpreter, one after the other: a typo (unknown model), a value out of range,
    ``--help``, ``--cfg job``, ``python -m trainbench.config``, compose_run and validate. Each gives its answer
    (exit 2 for bad input) with neither torch, MLflow nor a model's code loaded; ``--help`` builds Hydra's
    config repository a few times, not once per config group (about 130)."""
    code = f"""
import contextlib, io, json, runpy, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from trainbench.cli import run_command
forbidden = {FRONT_DOOR_FORBIDDEN!r}
builds = [0]
build = ConfigLoaderImpl._parse_overrides_and_create_caching_repo
def counted(self, *a, **k):
    builds[0] += 1
    return build(self, *a, **k)
ConfigLoaderImpl._parse_overrides_and_create_caching_repo = counted
out = {{}}
def loaded():
    return sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden))
for name, argv in (("typo", ["model=nope"]), ("range", ["trainer.epochs=-1"]), ("help", ["--help"]),
                   ("cfg", ["--cfg", "job", "model=tft"])):
    builds[0] = 0
    text, code = io.StringIO(), 0
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        try:
            run_command(argv)
        except SystemExit as e:
            code = e.code
    out[name] = {{"exit": code, "loaded": loaded(), "builds": builds[0], "text": text.getvalue()}}
with contextlib.redirect_stdout(io.StringIO()) as text:
    runpy.run_module("trainbench.config", run_name="__main__")
out["reference"] = {{"exit": 0, "loaded": loaded(), "text": text.getvalue()}}
from trainbench.compose import compose_run
from trainbench.config.run import validate
validate(compose_run(["model=tlob"], root={str(tmp_path)!r}))
out["compose"] = {{"exit": 0, "loaded": loaded(), "text": ""}}
print(json.dumps(out))
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.stdout.strip(), p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert [out[k]["exit"] for k in ("typo", "range", "help", "cfg")] == [2, 2, 0, 0], out
    assert "Could not find 'model/nope'" in out["typo"]["text"], out["typo"]["text"]
    assert "error: trainer.epochs=-1 is out of range" in out["range"]["text"], out["range"]["text"]
    assert "model: base_custom, base_dqn" in out["help"]["text"] and "hidden: 16" in out["cfg"]["text"]
    assert "model.attention_span" in out["reference"]["text"] and "book  TLOB dual-attention" in out["reference"]["text"]
    for name, step in out.items():
        assert not step["loaded"], f"{name} loaded {step['loaded'][:10]}"
    assert 1 <= out["help"]["builds"] <= 4, out["help"]["builds"]


def test_trainer_auto_reads_a_cpu_build_of_torch_without_importing_it(tmp_path, monkeypatch):
    """``trainer=auto`` asks whether CUDA is there: a CPU-only build of torch (its version.py names no CUDA and no
    HIP) is answered from that file, torch untouched; a GPU build asks torch."""
    import importlib.util
    from types import SimpleNamespace

    from trainbench import compose

    (tmp_path / "__init__.py").write_text("")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(origin=str(tmp_path / "__init__.py")) if name == "torch" else None)

    def untouched():
        raise AssertionError("torch was asked")

    for build, answer in (("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
                          ("cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n", True),
                          ("cuda = None\nhip = '6.2.4'\n", True)):
        (tmp_path / "version.py").write_text(build)
        monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=SimpleNamespace(
            is_available=(lambda: True) if answer else untouched)))
        assert compose.cuda_available() is answer, build


@pytest.mark.slow
def test_config_names_are_imported_from_where_they_are_defined():
    """trainbench.compose registers and composes; the schemas are imported from trainbench.config.run and
    trainbench.config.analyze (no name passes through compose.py on its way)."""
    compose = ast.parse((SRC / PACKAGE / "compose.py").read_text())
    own = {n.name for n in compose.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
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


# --------------------------------------------------------------------------------------------------
# one home per rule
# --------------------------------------------------------------------------------------------------

#: The commands' own files, beside the package.
COMMAND_FILES = [REPO / "run.py", REPO / "analyze.py", *sorted((REPO / "scripts").glob("*.py"))]
_EXITS = {"exit", "_exit", "SystemExit"}


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def bare_exit_codes(path: Path) -> list[str]:
    """``sys.exit(1)``, ``SystemExit(2)``, ``os._exit(3)`` and a command's ``return 0`` (in ``main`` or a
    ``_cmd_*`` handler): exit statuses spelled as numbers instead of :mod:`trainbench.core.errors`' names."""
    out = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in _EXITS and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
            out.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.FunctionDef) and (node.name == "main" or node.name.startswith("_cmd")):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Constant | ast.IfExp):
                    values = [sub.value] if isinstance(sub.value, ast.Constant) else [sub.value.body, sub.value.orelse]
                    if any(isinstance(v, ast.Constant) and type(v.value) is int for v in values):
                        out.append(f"{path.name}:{sub.lineno}")
    return out


def test_no_bare_exit_code_outside_the_errors_module(tmp_path):
    errors = SRC / PACKAGE / "core" / "errors.py"
    found = [h for p in [*sorted((SRC / PACKAGE).rglob("*.py")), *COMMAND_FILES] if p != errors
             for h in bare_exit_codes(p)]
    assert not found, f"name the exit status (trainbench.core.errors.EXIT_*): {found}"
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\ndef main():\n    if sys.argv:\n        return 2\n    sys.exit(1)\n")
    assert bare_exit_codes(bad) == ["bad.py:5", "bad.py:4"] or sorted(bare_exit_codes(bad)) == ["bad.py:4", "bad.py:5"]


def test_no_config_value_is_unwrapped_by_hand():
    """The config's value sets are enums whose members are their strings (trainbench.core.enums.ValueEnum):
    no ``getattr(x, "value", x)`` bridge, and no tuple spelling a set an enum already holds."""
    from trainbench.config.analyze import OutlierRule
    from trainbench.config.run import Device, OptimizerImpl
    from trainbench.core.contamination_policy import ContaminatedPolicy
    from trainbench.core.precision import Precision, ProjectionPrecision

    sets = {frozenset(map(str, e)) for e in (ContaminatedPolicy, OutlierRule, Device, OptimizerImpl, Precision,
                                             ProjectionPrecision)}
    bridges, tuples = [], []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _callee(node) == "getattr" and len(node.args) == 3 and \
                    isinstance(node.args[1], ast.Constant) and node.args[1].value == "value":
                bridges.append(f"{path.relative_to(SRC)}:{node.lineno}")
            if isinstance(node, ast.Tuple) and len(node.elts) > 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts) and \
                    frozenset(e.value for e in node.elts) in sets:
                tuples.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not bridges, f"normalise at the config (a ValueEnum member is its string): {bridges}"
    assert not tuples, f"use the config's enum, not a parallel tuple: {tuples}"


def test_no_module_finds_the_source_tree_from_its_own_file():
    """The package works installed: nothing under src/ walks up from ``__file__`` (``Path(__file__).parents[2]``)
    to find conf/, pyproject.toml or the checkout; the configs are package data (trainbench.CONF_DIR)."""
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                    node.value.attr == "parents" and "__file__" in ast.unparse(node.value):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, f"use trainbench.CONF_DIR (package data) or the working folder: {found}"
