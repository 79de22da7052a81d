"""The run contract lives in one module (``trainbench.core.vocab``): the documentation describes exactly it, and
no other source module spells its names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainbench.core import vocab as contract
from trainbench.core.vocab import (
    STATUS,
    Artifact,
    Kind,
    Outcome,
    Series,
    Status,
    Summary,
    Tag,
    all_names,
    at_batch,
    tag_filter,
    workload_metric,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "trainbench"
DOC = ROOT / "docs" / "run-contract.md"


# --------------------------------------------------------------------------------------------------
# the values themselves (the one place the literal spellings are asserted)
# --------------------------------------------------------------------------------------------------


def test_contract_values() -> None:
    assert contract.CONTRACT_VERSION >= 1
    assert STATUS == {"completed": "FINISHED", "oom": "FAILED", "diverged": "FAILED", "failed": "FAILED",
                      "interrupted": "KILLED", "disk_full": "FAILED", "profiled": "FINISHED"}
    assert contract.STATUS_OUTCOME == {"FINISHED": "completed", "FAILED": "failed", "KILLED": "interrupted"}
    assert contract.names(Kind) == ("train", "sweep", "size_profile", "analysis", "compare")
    assert (Tag.KIND, Tag.SWEEP_ID, Tag.OUTCOME, Tag.MODEL_SIZE) == ("kind", "sweep_id", "outcome", "model_size")
    assert (Artifact.EPOCHS, Artifact.CONFIG, Artifact.ERROR) == ("epochs.json", "config/config.yaml", "error.txt")
    assert Summary.EPOCH_TIME_MS_MEAN == "epoch_time_ms_mean" and Summary.PEAK_VRAM_MB_MAX == "peak_vram_mb_max"
    assert at_batch(Summary.INFER_LATENCY_MS_P50, 1) == "infer_latency_ms_p50"
    assert at_batch(Summary.INFER_LATENCY_MS_P50, 64) == "infer_latency_ms_p50_b64"
    assert workload_metric("conv", "bf16", "flops") == "workload.conv.bf16.flops"
    assert contract.DATA_TAGS[0] == "data_path"
    assert tag_filter({Tag.KIND: Kind.TRAIN, Tag.SWEEP_ID: "s1"}) == "tags.kind = 'train' and tags.sweep_id = 's1'"
    assert Series.EPOCH_TIME_MS == "epoch_time_ms" and contract.WARMUP_EPOCHS_KEY == "warmup_epochs"
    assert contract.FAST_PATH_KEYS == ("trainer.precision", "trainer.compile", "trainer.optimizer_impl")
    # every final outcome has a status; the open statuses are MLflow's
    assert set(contract.FINAL_OUTCOMES) == set(STATUS)
    assert set(contract.OPEN_STATUSES) == {Status.RUNNING, Status.SCHEDULED}


def test_contract_imports_nothing_from_the_project() -> None:
    tree = ast.parse((SRC / "core" / "vocab.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("trainbench"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert all(not a.name.startswith("trainbench") for a in node.names)


# --------------------------------------------------------------------------------------------------
# the documentation
# --------------------------------------------------------------------------------------------------


def _doc_names(text: str) -> set[str]:
    """Every name in backticks in the documentation."""
    return set(re.findall(r"`([^`\s]+)`", text))


def test_every_contract_name_is_documented() -> None:
    text = DOC.read_text()
    documented = _doc_names(text)
    missing = {f"{group}: {name}" for group, values in all_names().items() for name in values
               if name not in documented}
    assert not missing, f"{DOC.name} does not describe: {sorted(missing)}"


def _table_names(text: str, heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading``."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    out: set[str] = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            out |= set(re.findall(r"`([^`\s]+)`", line.split("|")[1]))
    return out


def test_the_documented_tags_and_outcomes_exist() -> None:
    text = DOC.read_text()
    tags = _table_names(text, "## Tags")
    assert tags, "the Tags table is empty or missing"
    known_tags = set(all_names()["tag"])
    assert tags - known_tags == set(), f"tags documented but not in trainbench.core.vocab: {tags - known_tags}"
    outcomes = _table_names(text, "## Outcomes")
    assert outcomes == set(contract.names(Outcome)), outcomes ^ set(contract.names(Outcome))


# --------------------------------------------------------------------------------------------------
# no other module spells a contract name
# --------------------------------------------------------------------------------------------------

#: Names that are also ordinary words or config keys: looked for only where they are used as a tag, metric
#: or param key (a lookup in ``*tags``/``*metrics``/``*params``, or a key of a dict written as such).
_WORDS = {"unknown", "flat", "budget", "config", "measured", "predicted", "host", "vram", "model", "data",
          "kind", "job", "device", "outcome", "precision", "hardware", "error", "loss", "runs", "train",
          "sweep", "analysis", "compare", "converged", "healthy", "exploding", "vanishing", "nonfinite",
          "converging", "diverging", "contaminated", "recommendation", "confidence", "partial"}
_CONTAINERS = re.compile(r"(tags|metrics|params|summary)$", re.IGNORECASE)
_WRITERS = {"set_tags", "log_params", "log_summary", "log_epoch", "create_run"}
#: A line marked with this comment spells a config key that has the name of a tag (``sweep_id``), not the tag.
CONFIG_KEY = "# config key"
_FILTER = re.compile(r"\b(?:tags|metrics|params)\.`?([A-Za-z0-9_.]+)")


def _contract_strings() -> tuple[set[str], set[str]]:
    """(names flagged wherever a string constant equals them, names flagged only in key positions)."""
    everywhere, keyed = set(), set()
    for values in all_names().values():
        for v in values:
            (keyed if v in _WORDS else everywhere).add(v)
    return everywhere, keyed


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    return ""


def _key_constants(tree: ast.AST) -> set[ast.Constant]:
    """String constants used as tag/metric/param keys."""
    out: set[ast.Constant] = set()

    def dict_keys(d: ast.AST) -> None:
        if isinstance(d, ast.Dict):
            out.update(k for k in d.keys if isinstance(k, ast.Constant))

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _CONTAINERS.search(_last_name(node.value)):
            if isinstance(node.slice, ast.Constant):
                out.add(node.slice)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and _CONTAINERS.search(_last_name(f.value)) \
                    and node.args and isinstance(node.args[0], ast.Constant):
                out.add(node.args[0])
            if _last_name(f) in _WRITERS:
                for a in node.args:
                    dict_keys(a)
            for kw in node.keywords:
                if kw.arg and _CONTAINERS.search(kw.arg):
                    dict_keys(kw.value)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_CONTAINERS.search(_last_name(t)) for t in targets):
                dict_keys(node.value)
    return out


def spelled_outside(path: Path) -> list[str]:
    """``line: name`` of every contract name spelled in ``path``."""
    everywhere, keyed = _contract_strings()
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    keys = _key_constants(tree)
    docstrings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node in docstrings \
                or CONFIG_KEY in lines[node.lineno - 1]:
            continue
        v = node.value
        if v in everywhere or (v in keyed and node in keys):
            hits.append(f"{node.lineno}: {v!r}")
        for name in _FILTER.findall(v):
            if name in everywhere or name in keyed:
                hits.append(f"{node.lineno}: {name!r} in a filter")
    return hits


@pytest.mark.slow
def test_no_module_spells_a_contract_name() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "core/vocab.py":
            continue
        hits = spelled_outside(path)
        if hits:
            found[rel] = hits
    assert not found, "contract names spelled outside trainbench/core/vocab.py (import them from there):\n" + \
        "\n".join(f"  {f}: {', '.join(h)}" for f, h in found.items())


def test_no_test_spells_a_contract_name() -> None:
    """The tests take the names from the contract too (this file asserts their values once). MLflow search
    filters (``tags.kind = 'train'``) stay as a user writes them: they test the stored names end to end."""
    found = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == "test_vocab.py":
            continue
        hits = [h for h in spelled_outside(path) if not h.endswith(" in a filter")]
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    assert not found, "contract names spelled in tests (import them from trainbench.core.vocab):\n" + \
        "\n".join(f"  {f}: {', '.join(h)}" for f, h in found.items())


@pytest.mark.parametrize("source, expected", [
    ('tags = {"kind": "train"}', ["1: 'kind'"]),
    ('x = run.data.tags.get("model")', ["1: 'model'"]),
    ('x = {"model": 1}', []),  # an ordinary word outside a key position
    ('x = m["epoch_time_ms_mean"]', ["1: 'epoch_time_ms_mean'"]),
    ('q = f"tags.sweep_id = {s}"', ["1: 'sweep_id' in a filter"]),
    ('a = "epochs.json"', ["1: 'epochs.json'"]),
    ('o = "disk_full"', ["1: 'disk_full'"]),
    ('"""A docstring naming epochs.json and tags.sweep_id."""', []),
    ('k = cfg.get("sweep_id")  # config key', []),
])
def test_the_scan_finds_spellings(tmp_path: Path, source: str, expected: list[str]) -> None:
    p = tmp_path / "m.py"
    p.write_text(source + "\n")
    assert spelled_outside(p) == expected
