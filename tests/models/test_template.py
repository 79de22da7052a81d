"""Every model file has one layout, as CleanRL's files share one: the module docstring (the math and shapes),
the config schema (a built-in model imports its own from trainbench.config.models, where it is kept apart from
the torch code), the modules (nn.Module classes, shapes in their forward's docstring), the update (the
trainable class: ``__init__``, its own methods, then the harness's hooks in ``HOOK_ORDER``) with ``build``,
and ``SPEC = ModelSpec(...)`` (or ``ModelSpec.of(SCHEMA, ...)``) last. Checked on the source of every built-in
model and of the example plugin."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

from helpers.models import build_model
from trainbench.core.trainable import OPTIONAL_HOOKS, Trainable
from trainbench.models.base import HOOK_ORDER
from trainbench.models.registry import REGISTRY

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lstm_forecaster" / "src" / "lstm_forecaster" / "model.py"
#: Names the optimiser step once had in one model or another; every model calls it ``optimizer_step`` now.
OTHER_STEP_NAMES = ("step", "update", "_update", "train_step", "learn")
#: What a model file never imports: plotting belongs to an artifact writer of its own (models/tft_artifacts.py).
PLOTTING = ("matplotlib", "seaborn", "plotly")


def model_files() -> dict[str, Path]:
    files = {name: Path(inspect.getsourcefile(sys.modules[REGISTRY.get(name).build.__module__]))
             for name in REGISTRY.builtin_names()}
    files["lstm_forecaster (example)"] = EXAMPLE
    return files


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in cls.bases}


def _methods(cls: ast.ClassDef) -> list[str]:
    return [n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _is_spec(node: ast.stmt) -> bool:
    """``SPEC = ModelSpec(...)`` or ``SPEC = ModelSpec.of(SCHEMA, ...)``."""
    func = node.value.func if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) else None
    return ([getattr(t, "id", "") for t in getattr(node, "targets", [])] == ["SPEC"] and func is not None and
            (getattr(func, "id", "") == "ModelSpec" or (isinstance(func, ast.Attribute) and func.attr == "of"
                                                          and getattr(func.value, "id", "") == "ModelSpec")))


def _imported_configs(body: list[ast.stmt]) -> dict[str, int]:
    """{config class: index of its import} for a built-in model's schema imported from trainbench.config.models."""
    return {a.asname or a.name: i for i, n in enumerate(body)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("trainbench.config.models.")
            for a in n.names if a.name.endswith("Config")}


def layout_errors(tree: ast.Module) -> list[str]:
    """What is out of place in a model file (empty when it follows the template)."""
    errors = []
    body = tree.body
    if ast.get_docstring(tree) is None:
        errors.append("the module has no docstring (the task, the math, the shapes)")
    classes = {n.name: (i, n) for i, n in enumerate(body) if isinstance(n, ast.ClassDef)}
    imported = _imported_configs(body)
    configs = [name for name, (_, n) in classes.items() if "ModelConfig" in _base_names(n)] + list(imported)
    trainables = [name for name, (_, n) in classes.items() if "train_epoch" in _methods(n)]
    modules: list[str] = []
    for name, (_, n) in classes.items():  # in file order, so a subclass of a module class above counts
        if _base_names(n) & {"Module", *modules}:
            modules.append(name)
    if len(configs) != 1 or len(trainables) != 1:
        return [*errors, f"expected one config class and one trainable class, found {configs} and {trainables}"]
    (config,), (trainable,) = configs, trainables
    at = {**imported, **{name: i for name, (i, _) in classes.items()}}
    if not modules:
        errors.append("no nn.Module class: the modules section is missing")
    for m in modules:
        if not at[config] < at[m] < at[trainable]:
            errors.append(f"module {m} is not between the config class {config} and the trainable {trainable}")
        forward = next((f for f in classes[m][1].body if isinstance(f, ast.FunctionDef) and f.name == "forward"),
                       None)
        if forward is not None and "->" not in (ast.get_docstring(forward) or ""):
            errors.append(f"{m}.forward's docstring does not give its shapes (`x: (B, T, F) -> (B,)`)")
    builds = [i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name == "build"]
    if builds and builds[0] < at[trainable]:
        errors.append(f"build comes before the trainable class {trainable}")
    if not body or not _is_spec(body[-1]):
        errors.append("the file does not end with SPEC = ModelSpec(...)")
    methods = _methods(classes[trainable][1])
    if methods[:1] != ["__init__"]:
        errors.append(f"{trainable}'s first method is {methods[:1]}, not __init__")
    hooks = [m for m in methods if m in HOOK_ORDER]
    if hooks != sorted(hooks, key=HOOK_ORDER.index):
        errors.append(f"{trainable}'s hooks are in the order {hooks}, not {sorted(hooks, key=HOOK_ORDER.index)} "
                      "(HOOK_ORDER)")
    if hooks and methods[len(methods) - len(hooks):] != hooks:
        errors.append(f"{trainable}'s own methods must come before its hooks: {methods}")
    if "optimizer_step" not in methods:
        errors.append(f"{trainable} has no optimizer_step: name the model's one optimiser step so")
    other = [m for m in methods if m in OTHER_STEP_NAMES]
    if other:
        errors.append(f"{trainable} names a step {other}: call it optimizer_step, as every model does")
    return errors


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):  # inside functions too
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("name,path", model_files().items(), ids=list(model_files()))
def test_every_model_file_follows_the_template(name, path):
    tree = ast.parse(path.read_text(), str(path))
    assert layout_errors(tree) == [], f"{path.relative_to(REPO)}: see docs/own-models.md#one-layout"
    assert not {m for m in _imports(tree) if m.split(".")[0] in PLOTTING}


def _trainable(tree: ast.Module) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and "train_epoch" in _methods(n))


def _index(body: list[ast.stmt], name: str) -> int:
    return next(i for i, n in enumerate(body) if getattr(n, "name", None) == name)


def test_the_check_fails_on_two_swapped_hooks_and_on_a_section_out_of_place():
    tree = ast.parse(model_files()["tft"].read_text())
    assert layout_errors(tree) == []
    body = _trainable(tree).body
    i, j = _index(body, "train_epoch"), _index(body, "eval_epoch")
    body[i], body[j] = body[j], body[i]
    assert layout_errors(tree) == ["TFTTrainable's hooks are in the order ['eval_epoch', 'train_epoch', "
                                   "'memory_step', 'inference', 'info', 'write_artifacts'], not ['train_epoch', "
                                   "'eval_epoch', 'memory_step', 'inference', 'info', 'write_artifacts'] (HOOK_ORDER)"]
    body[i], body[j] = body[j], body[i]
    body.append(body.pop(_index(body, "importances")))  # a helper after the hooks
    assert layout_errors(tree) == [f"TFTTrainable's own methods must come before its hooks: {_methods(_trainable(tree))}"]

    tree = ast.parse(model_files()["tft"].read_text())
    net = tree.body.pop(_index(tree.body, "TemporalFusionTransformer"))
    tree.body.insert(_imported_configs(tree.body)["TFTConfig"], net)  # a module above the config's import
    assert layout_errors(tree) == ["module TemporalFusionTransformer is not between the config class TFTConfig "
                                   "and the trainable TFTTrainable"]
    tree.body.insert(0, tree.body.pop())  # and SPEC first
    assert "the file does not end with SPEC = ModelSpec(...)" in layout_errors(tree)

    example = ast.parse(EXAMPLE.read_text())  # a plugin's config class, in its file
    config = example.body.pop(next(i for i, n in enumerate(example.body) if isinstance(n, ast.ClassDef)
                                   and "ModelConfig" in _base_names(n)))
    assert layout_errors(example) == ["expected one config class and one trainable class, found [] and "
                                      "['LSTMForecasterTrainable']"]
    example.body.append(config)
    assert layout_errors(example)[0] == ("module LSTMForecaster is not between the config class LSTMForecasterConfig "
                                         "and the trainable LSTMForecasterTrainable")


@pytest.mark.parametrize("name", REGISTRY.builtin_names())
def test_every_model_satisfies_the_declared_contract(name):
    """A built model is a Trainable; each optional hook it defines is its protocol's, and each it lacks is
    absent, so the harness's isinstance checks call exactly the hooks the model has."""
    tr = build_model(name)
    assert isinstance(tr, Trainable)
    for hook, protocol in OPTIONAL_HOOKS.items():
        assert isinstance(tr, protocol) == callable(getattr(tr, hook, None)), (name, hook)
    assert callable(getattr(tr, "optimizer_step", None))


def test_the_contract_names_every_hook_of_the_template():
    assert set(HOOK_ORDER) == {"train_epoch", "inference", *OPTIONAL_HOOKS}
    assert {m for m in dir(Trainable) if not m.startswith("_")} >= {"train_epoch", "inference"}
