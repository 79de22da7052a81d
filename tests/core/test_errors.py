"""One errors module: what each error means for a job (classify), the same for a single run and a sweep;
only the command line prints an error line or exits; every user-facing exception is defined there."""

from __future__ import annotations

import ast
import builtins
import logging
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from trainbench.core import errors
from trainbench.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    USER_ERRORS,
    ConfigError,
    DataError,
    DeviceError,
    DiskFull,
    JobFailed,
    ModelDataError,
    PluginError,
    RerunError,
    TrackingUnavailable,
    UnknownModelError,
    classify,
)
from trainbench.core.vocab import Outcome

PACKAGE = Path(errors.__file__).resolve().parents[1]  # src/trainbench

USER = [ConfigError("model.batch_size=0 is invalid: use a positive integer."),
        DataError("data/x.dbn.zst: the file is corrupt; download it again."),
        ModelDataError("model tft trains on bars data but data=book holds book."),
        UnknownModelError("unknown model 'nope'; known: dqn, ppo"),
        PluginError("model 'broken' (plugin bad-plugin 2.0) cannot be imported"),
        DeviceError("trainer.device=cuda but no CUDA device is visible to torch."),
        TrackingUnavailable("tracking server http://nowhere:5000 did not answer."),
        RerunError("rerun=abc: no such run in the store.")]
DISK = DiskFull("the disk is full: a write to /tmp/mlflow.db failed (ENOSPC)", "/tmp/mlflow.db")
RECORDED = JobFailed(Outcome.DIVERGED, "a non-finite loss at epoch 3", "run-123")


def test_the_exit_codes():
    assert (EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED) == (0, 1, 2, 130)


@pytest.mark.parametrize("e", USER, ids=lambda e: type(e).__name__)
def test_bad_input_is_failed_exit_2_with_its_own_message(e):
    assert isinstance(e, USER_ERRORS)
    f = classify(e)
    assert (f.outcome, f.exit_code, f.message, f.run_id) == (Outcome.FAILED, 2, str(e), None)
    assert not f.recorded and not f.unexpected
    assert "'" not in f.message[:1]  # KeyError's quoting is gone (UnknownModelError, PluginError)


def test_a_recorded_failure_keeps_its_outcome_and_run_and_exits_1():
    f = classify(RECORDED)
    assert (f.outcome, f.exit_code, f.run_id, f.recorded) == (Outcome.DIVERGED, 1, "run-123", True)
    assert f.message == "run run-123 ended as diverged: a non-finite loss at epoch 3"


def test_a_full_disk_before_the_run_is_disk_full_exit_1_with_the_fix():
    f = classify(DISK)
    assert (f.outcome, f.exit_code) == (Outcome.DISK_FULL, 1)
    assert f.message == ("the disk is full: a write to /tmp/mlflow.db failed (ENOSPC). "
                         "Free some space and run it again.")


def test_an_interrupt_is_interrupted_exit_130():
    f = classify(KeyboardInterrupt("signal 15"))
    assert (f.outcome, f.exit_code) == (Outcome.INTERRUPTED, 130)
    assert f.message == "interrupted by the user or a signal before its run opened"


def test_anything_else_is_failed_exit_1_named_by_its_type():
    f = classify(ZeroDivisionError("division by zero"))
    assert (f.outcome, f.exit_code, f.message) == (Outcome.FAILED, 1, "ZeroDivisionError: division by zero")
    assert f.unexpected and not f.recorded


# --------------------------------------------------------------------------------------------------
# a single run and a sweep say the same
# --------------------------------------------------------------------------------------------------


def _raises(e: BaseException):
    def body(cfg):
        raise e

    return body


@pytest.fixture
def quiet_process(monkeypatch):
    """run_job installs a hook and marks the task started; keep both to this test."""
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(errors, "_TASK_STARTED", errors._TASK_STARTED)


def _single_run(monkeypatch, capsys, caplog, e: BaseException) -> tuple[int, str]:
    """(exit status, what the user reads) of ``python run.py`` whose job raised ``e``."""
    from trainbench import cli

    monkeypatch.setattr(cli, "_multirun", lambda: False)
    monkeypatch.setattr(cli, "_job", _raises(e))
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="trainbench"), pytest.raises(SystemExit) as info:
        cli.run_job(OmegaConf.create({}))
    err = capsys.readouterr().err
    logged = [r.getMessage() for r in caplog.records if r.name == "trainbench"]
    assert bool(err) != bool(logged), (err, logged)  # one line: printed, or logged when the run recorded it
    return info.value.code, err.removeprefix("error: ").rstrip("\n") if err else logged[0]


def _sweep(monkeypatch, e: BaseException) -> tuple[str, str | None, str | None]:
    """The ledger record (outcome, error, run id) of a sweep's job that raised ``e``."""
    from trainbench.sweep import jobs

    records = []
    monkeypatch.setattr(jobs, "record_job", lambda *a: records.append(a))
    monkeypatch.setattr(jobs.STATE, "stop_signal", None)
    outcome = jobs.sweep_job(OmegaConf.create({}), _raises(e))
    (record,) = records
    assert record[0] == outcome
    return record


@pytest.mark.parametrize("e", [*USER, DISK, RECORDED], ids=lambda e: type(e).__name__)
def test_a_single_run_and_a_sweep_give_the_same_message(e, monkeypatch, capsys, caplog, quiet_process):
    f = classify(e)
    code, said = _single_run(monkeypatch, capsys, caplog, e)
    outcome, error, run_id = _sweep(monkeypatch, e)
    assert said == error == f.message
    assert (code, outcome, run_id) == (f.exit_code, f.outcome, f.run_id)


@pytest.mark.parametrize("e", [KeyboardInterrupt("signal 2"), ZeroDivisionError("division by zero")],
                         ids=["interrupt", "bug"])
def test_a_single_run_keeps_the_traceback_a_sweep_records_and_goes_on(e, monkeypatch, capsys, caplog,
                                                                     quiet_process):
    from trainbench import cli

    monkeypatch.setattr(cli, "_multirun", lambda: False)
    monkeypatch.setattr(cli, "_job", _raises(e))
    if isinstance(e, KeyboardInterrupt):
        with pytest.raises(type(e)):
            cli.run_job(OmegaConf.create({}))
    else:  # a bug: its traceback, printed by run.py itself (redacted; Hydra's would not be), and exit 1
        with pytest.raises(SystemExit) as info:
            cli.run_job(OmegaConf.create({}))
        err = capsys.readouterr().err
        assert info.value.code == EXIT_FAILED and "Traceback" in err and "ZeroDivisionError: division by zero" in err
    assert _sweep(monkeypatch, e) == (classify(e).outcome, classify(e).message, None)


# --------------------------------------------------------------------------------------------------
# only the command line prints an error line or exits
# --------------------------------------------------------------------------------------------------

#: Where the package may exit, print to stderr or raise SystemExit: {module: functions ("*": the whole module,
#: "<module>": its top level)}. Every other module raises (trainbench.core.errors) and leaves it to these.
MAY_EXIT = {
    "cli.py": {"*"},  # the command line: run.py, analyze.py and `trainbench`
    "check.py": {"<module>"},  # python -m trainbench.check
    "conformance.py": {"main", "<module>"},  # python -m trainbench.conformance
    "data/__main__.py": {"*"},  # python -m trainbench.data
    "tracking/sync.py": {"*"},  # `trainbench sync` / python -m trainbench.tracking.sync: per-run lines, exit code
    # Hydra callbacks and the launcher: Hydra turns an exception there into a warning and exits 0
    "sweep/callbacks.py": {"*"},
    "sweep/slurm.py": {"_fail"},
    "sweep/local_gpus.py": {"refuse"},
    "sweep/jobs.py": {"_on_signal"},  # a signal handler's notice, as the signal arrives
}


def _is_stderr(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "stderr" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def _exits(tree: ast.Module) -> list[tuple[str, int, str]]:
    """(function qualname or "<module>", line, what) for each exit, stderr print and SystemExit raised."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, child.name if where == "<module>" else f"{where}.{child.name}")
                continue
            what = None
            if isinstance(child, ast.Call):
                fn = child.func
                name = fn.id if isinstance(fn, ast.Name) else (
                    f"{fn.value.id}.{fn.attr}" if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                    else None)
                if name in ("sys.exit", "os._exit", "exit", "quit"):
                    what = name
                elif name == "print" and any(k.arg == "file" and _is_stderr(k.value) for k in child.keywords):
                    what = "print(file=sys.stderr)"
                elif isinstance(fn, ast.Attribute) and fn.attr == "write" and _is_stderr(fn.value):
                    what = "sys.stderr.write"
            elif isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                    what = "raise SystemExit"
            if what:
                found.append((where, child.lineno, what))
            visit(child, where)

    visit(tree, "<module>")
    return found


def _modules() -> dict[str, ast.Module]:
    files = sorted(PACKAGE.rglob("*.py"))
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(), str(p)) for p in files}


def _allowed(module: str, where: str) -> bool:
    allowed = MAY_EXIT.get(module, {"*"} if module.endswith("__main__.py") else set())
    return "*" in allowed or where in allowed or where.split(".")[0] in allowed


@pytest.mark.slow
def test_only_the_command_line_prints_errors_or_exits():
    wrong = [f"{m}:{line} {where}: {what}" for m, tree in _modules().items() for where, line, what in _exits(tree)
             if not _allowed(m, where)]
    assert not wrong, "raise an error of trainbench.core.errors instead (the command line reports it):\n" + \
        "\n".join(wrong)


@pytest.mark.slow
def test_every_place_allowed_to_exit_does_so():
    """The allowance stays as small as what is true: each entry names a place that exits or prints."""
    modules = _modules()
    seen = {(m, where) for m, tree in modules.items() for where, _, _ in _exits(tree)}
    stale = [(m, w) for m, allowed in MAY_EXIT.items() for w in allowed
             if not any(sm == m and (w == "*" or sw == w) for sm, sw in seen)]
    assert not stale, stale


def test_the_exit_scan_sees_each_form():
    tree = ast.parse("import sys\ndef f():\n    print('x', file=sys.stderr)\n    sys.exit(2)\n"
                     "class C:\n    def g(self):\n        raise SystemExit(2) from None\n")
    assert [(w, what) for w, _, what in _exits(tree)] == [
        ("f", "print(file=sys.stderr)"), ("f", "sys.exit"), ("C.g", "raise SystemExit")]


# --------------------------------------------------------------------------------------------------
# every user-facing exception is defined in trainbench.core.errors
# --------------------------------------------------------------------------------------------------

#: Exceptions defined elsewhere, each a comment at its definition says why: {module: class names}.
OWN_EXCEPTIONS = {
    "measure/fit.py": {"DoesNotFit"},  # control flow inside the batch search; resolve() raises ConfigError
    "measure/host_sync.py": {"HostSyncError"},  # the fast-path tests' assertion; the conformance check records it
    "reference_profile.py": {"_OverBudget"},  # control flow: the profile's budget; its run ends failed saying so
}

_BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


def _base_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _exception_classes(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """The exception classes each module defines (at any depth): derived, directly or through another
    class of the package, from a built-in exception or a class named *Error / *Exception."""
    classes = [(m, n) for m, tree in modules.items() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    known = set(_BUILTIN_EXCEPTIONS)
    while True:
        more = {n.name for _, n in classes if n.name not in known and any(
            (b := _base_name(base)) and (b in known or b.endswith(("Error", "Exception"))) for base in n.bases)}
        if not more:
            break
        known |= more
    out: dict[str, set[str]] = {}
    for m, n in classes:
        if n.name in known - _BUILTIN_EXCEPTIONS:
            out.setdefault(m, set()).add(n.name)
    return out


@pytest.mark.slow
def test_every_exception_class_is_defined_in_the_errors_module():
    defined = _exception_classes(_modules())
    elsewhere = {m: names for m, names in defined.items() if m != "core/errors.py"}
    assert elsewhere == OWN_EXCEPTIONS, "define user-facing exceptions in trainbench.core.errors"
    assert {"ConfigError", "DiskFull", "JobFailed", "PluginError", "RerunError"} <= defined["core/errors.py"]


def test_the_exception_scan_follows_bases_through_the_package():
    tree = ast.parse("class A(ValueError): pass\nclass B(A): pass\nclass C(x.SomeError): pass\n"
                     "def f():\n    class D(B): pass\nclass E: pass\n")
    assert _exception_classes({"m.py": tree}) == {"m.py": {"A", "B", "C", "D"}}


def test_the_errors_module_is_the_ground_floor():
    """Any floor imports it: the standard library and the run vocabulary only (no torch, MLflow or Hydra)."""
    tree = ast.parse(Path(errors.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    outside = {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names} - {"trainbench.core.vocab"}
    assert not outside, outside
