"""The README and docs/ point only at what exists: links inside the repository, modules, functions, files.

A reader follows a link, types a dotted name into Python or opens a path; each must lead somewhere. Checked
here without a network and without running anything: relative markdown links resolve to files inside the
repository (their ``#section`` too), backticked ``trainbench.x.y`` names import and have the attribute,
``Class.attr`` and ``name()`` mentions of trainbench's own classes and functions exist, backticked paths
of the repository exist, the README's layout names existing modules, its ``make help`` list is the
Makefile's, and no page cites an issue number or a note outside the repository instead of the rule itself.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from trainbench import CONF_DIR

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOC_IDS = [str(p.relative_to(REPO)) for p in DOCS]

# top-level folders whose backticked paths (``src/trainbench/models/tft.py``) must exist
REPO_DIRS = ("src/", "tests/", "benchmarks/", "scripts/", "conf/", "docs/", "examples/")
#: `conf/...` names the Hydra config tree, which ships inside the package (trainbench.CONF_DIR); the README says so
CONF_PREFIX = "conf/"
TEMPLATE = re.compile(r"[<>*{}\[\]$]|\.\.\.")  # `conf/model/<name>.yaml`, `bench_*.py`: patterns, not paths

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"(?<!!)\[(?:[^\]\n]|\][^(\n])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]\n]*\]\(([^)\s]+)\)")
DOTTED = re.compile(r"(?<![\w.])trainbench(?:\.[A-Za-z_]\w*)+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text without fenced code blocks (links inside code are not links)."""
    return FENCE.sub("", text)


def _code_spans(text: str) -> list[str]:
    """Inline code spans of the prose, and every line of the fenced blocks."""
    spans = INLINE.findall(_prose(text))
    for block in FENCE.findall(text):
        spans += block.splitlines()[1:-1]
    return spans


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[`*_~]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(_prose(_text(path))):
        s = slug(title)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


# --------------------------------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------------------------------


def link_problems(doc: Path, root: Path = REPO) -> list[str]:
    problems = []
    for m in LINK.finditer(_prose(_text(doc))):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        if ".." in Path(path_part).parts:  # a page links files at or below its folder; others by backticked path
            problems.append(f"{target}: climbs out of its folder (name the file as a backticked path instead)")
            continue
        dest = (doc.parent / path_part).resolve() if path_part else doc.resolve()
        if dest != root and root not in dest.parents:
            problems.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no section #{fragment} in {dest.relative_to(root)}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_links_stay_inside_the_repository_and_resolve(doc: Path) -> None:
    assert link_problems(doc) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "memory.md").write_text("# Memory\n\n## The budget\n")
    (tmp_path / "notes.md").write_text("outside\n")
    probe = root / "docs" / "probe.md"
    (root / "src").mkdir()
    (root / "src" / "x.py").write_text("")
    probe.write_text("[notes](../../notes.md) [src](../src/x.py) [abs](/etc/hostname) [gone](nothing.md) [ok](memory.md#the-budget) "
                     "[web](https://example.com) [here](#no-such-part) [there](memory.md#no-such-part)\n"
                     "```\n[in code](missing.md)\n```\n")
    assert link_problems(probe, root.resolve()) == [
        "../../notes.md: climbs out of its folder (name the file as a backticked path instead)",
        "../src/x.py: climbs out of its folder (name the file as a backticked path instead)",
        "/etc/hostname: outside the repository", "nothing.md: no such file",
        "#no-such-part: no section #no-such-part in docs/probe.md",
        "memory.md#no-such-part: no section #no-such-part in docs/memory.md"]


def test_slug_follows_github() -> None:
    assert slug("Workload: sizes, recipe, validation pass, stop rule *(extra)*") == \
        "workload-sizes-recipe-validation-pass-stop-rule-extra"
    assert slug("The `make help` list") == "the-make-help-list"


# references a reader of the repository cannot follow: the tracker's issue numbers, notes outside it
UNFOLLOWABLE = re.compile(r"\bissues? #?\d+|DESIGN\.md|\.\./shared/|\boriginal plan\b|\bmemory branch\b", re.I)


def unfollowable(text: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in UNFOLLOWABLE.finditer(text)]


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_docs_state_rules_instead_of_citing_issues_or_notes_outside_the_repository(doc: Path) -> None:
    assert unfollowable(_text(doc)) == []


def test_the_citation_check_can_fail() -> None:
    assert unfollowable("ok\nas issue 23 measured (DESIGN.md rule 2; see ../shared/x), the original plan") == [
        "line 2: 'issue 23'", "line 2: 'DESIGN.md'", "line 2: '../shared/'", "line 2: 'original plan'"]


# --------------------------------------------------------------------------------------------------
# names: trainbench.x.y, Class.attr, name()
# --------------------------------------------------------------------------------------------------


def resolve_dotted(name: str) -> str | None:
    """None when ``name`` (``trainbench.pkg.module.attr...``) imports and has each attribute; else why not."""
    parts = name.split(".")
    module = None
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:i]).startswith(e.name):
                return f"{name}: importing {'.'.join(parts[:i])} fails ({e})"
            continue
        break
    if module is None:
        return f"{name}: no such module"
    obj = module
    for attr in parts[i:]:
        if not hasattr(obj, attr):
            return f"{name}: {'.'.join(parts[:i])} has no {attr!r}" if obj is module else \
                f"{name}: {obj.__name__} has no {attr!r}"
        obj = getattr(obj, attr)
    return None


@cache
def project_index() -> dict[str, set[str]]:
    """Every class and function of trainbench, benchmarks and scripts: name -> its attributes.

    A class's attributes are its methods, class-level assignments, annotated fields and ``self.x`` set in
    ``__init__`` (and those of its project base classes); a function (or method) has none. Read with
    ``ast``, so nothing is imported.
    """
    classes: dict[str, tuple[set[str], list[str]]] = {}
    functions: set[str] = set()
    files = [*SRC.rglob("*.py"), *(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").rglob("*.py")]
    for f in files:
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                attrs: set[str] = set()
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        attrs.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        attrs.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        attrs |= {t.id for t in item.targets if isinstance(t, ast.Name)}
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        attrs |= {t.attr for t in ast.walk(item) if isinstance(t, ast.Attribute)
                                  and isinstance(t.value, ast.Name) and t.value.id == "self"
                                  and isinstance(t.ctx, ast.Store)}
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                old = classes.setdefault(node.name, (set(), []))
                old[0].update(attrs)
                old[1].extend(bases)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.add(node.name)
        # methods too: `memory_step(batch_size)` names a method of every model
        functions |= {n.name for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
                      if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    index: dict[str, set[str]] = {name: set() for name in functions}

    def members(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        attrs, bases = classes[name]
        out = set(attrs)
        for b in bases:
            if b in classes and b not in seen:
                out |= members(b, seen | {name})
        return out

    for name in classes:
        index[name] = members(name)
    return index


CLASS_ATTR = re.compile(r"([A-Z]\w*)\.([A-Za-z_]\w*)(?:\(.*\))?")
CALL = re.compile(r"([A-Za-z_]\w*)\(.*\)")


def name_problems(doc: Path) -> list[str]:
    problems = []
    index = project_index()
    for span in _code_spans(_text(doc)):
        for name in DOTTED.findall(span):
            why = resolve_dotted(name)
            if why:
                problems.append(why)
        span = span.strip()
        m = CLASS_ATTR.fullmatch(span)
        if m and m.group(1) in index and m.group(2) not in index[m.group(1)]:
            problems.append(f"{span}: {m.group(1)} has no {m.group(2)!r}")
        m = CALL.fullmatch(span)
        if m and m.group(1) not in index and not hasattr(builtins, m.group(1)) and \
                not m.group(1)[0].isupper():  # a call of a name trainbench does not define
            problems.append(f"{span}: no function {m.group(1)!r} in src/, benchmarks/ or scripts/")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_named_modules_functions_and_classes_exist(doc: Path) -> None:
    assert name_problems(doc) == []


def test_the_name_check_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.md"
    probe.write_text("`trainbench.models.tft.TFTConfig` `trainbench.models.tft.NoSuchThing` "
                     "`python -m trainbench.no_such_module` `BuildContext.autocast` `BuildContext.no_such` "
                     "`run_analysis()` `no_such_function()` `float()` `torch.cuda._sleep`\n"
                     "```bash\npython -m trainbench.nor_this one\n```\n")
    assert name_problems(probe) == [
        "trainbench.models.tft.NoSuchThing: trainbench.models.tft has no 'NoSuchThing'",
        "trainbench.no_such_module: trainbench has no 'no_such_module'",
        "BuildContext.no_such: BuildContext has no 'no_such'",
        "no_such_function(): no function 'no_such_function' in src/, benchmarks/ or scripts/",
        "trainbench.nor_this: trainbench has no 'nor_this'",
    ]


# --------------------------------------------------------------------------------------------------
# paths
# --------------------------------------------------------------------------------------------------


def path_problems(doc: Path) -> list[str]:
    problems = []
    for span in INLINE.findall(_prose(_text(doc))):
        for token in span.split():
            token = token.strip(".,;:()'\"").split("#")[0]
            if not token.startswith(REPO_DIRS) or TEMPLATE.search(token):
                continue
            where = CONF_DIR / token[len(CONF_PREFIX):] if token.startswith(CONF_PREFIX) else REPO / token
            if not where.exists() and not (REPO / token).exists():  # conf/...: the package's, or the checkout's own
                problems.append(f"{token}: no such file or folder")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_named_paths_exist(doc: Path) -> None:
    assert path_problems(doc) == []


def test_the_path_check_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.md"
    probe.write_text("`src/trainbench/models/tft.py` `src/trainbench/models/gone.py` `conf/model/<name>.yaml` "
                     "`benchmarks/bench_*.py` `python scripts/gpu_check.py --out-dir OUT` `scripts/nope.sh`\n")
    assert path_problems(probe) == ["src/trainbench/models/gone.py: no such file or folder",
                                    "scripts/nope.sh: no such file or folder"]


# --------------------------------------------------------------------------------------------------
# the README's layout and its `make help` list
# --------------------------------------------------------------------------------------------------


def _readme_block(title: str) -> str:
    text = _text(REPO / "README.md")
    part = text.split(f"\n## {title}\n", 1)[1]
    return FENCE.search(part).group(0)


def layout_modules() -> list[Path]:
    """Every ``name.py`` of the README's layout block, as a path: folder lines set where the names live (a
    folder indented under another is inside it), and a module line at a folder's indent is back in the folder
    that holds it."""
    out: list[Path] = []
    stack: list[tuple[int, Path]] = [(-1, REPO)]  # (indent, folder) of the folders open above this line
    folder = REPO
    for line in _readme_block("Layout").splitlines()[1:-1]:
        head = line.split()[0] if line.strip() else ""
        indent = len(line) - len(line.lstrip())
        is_folder = head.endswith("/") and not line[:indent].strip() and indent < 20
        is_module = re.match(r"[\w]+\.py\b", head) and indent and indent < 20  # a module of the package itself
        if is_folder or is_module:
            while stack[-1][0] >= indent:
                stack.pop()
            folder = stack[-1][1]
        if is_folder:
            folder = folder / head
            stack.append((indent, folder))
        for token in re.findall(r"[\w/]+\.py\b", line):
            out.append(REPO / token if "/" in token else folder / token)
    return out


def test_readme_layout_names_existing_modules() -> None:
    modules = layout_modules()
    assert REPO / "src/trainbench/models/tft.py" in modules  # the parser finds folder and file
    assert [str(p.relative_to(REPO)) for p in modules if not p.exists()] == []


def _make_help_targets() -> list[str]:
    """The targets ``make help`` prints: the Makefile's help recipe greps ``target: ... ## text`` lines."""
    recipe = re.search(r"^help:.*\n\t@grep -hE '([^']+)'", _text(REPO / "Makefile"), re.M)
    assert recipe, "the Makefile's help target no longer greps '## ' comments"
    pattern = re.compile(recipe.group(1))
    return [line.split(":")[0] for line in _text(REPO / "Makefile").splitlines() if pattern.search(line)]


def test_readme_make_help_list_is_the_makefiles() -> None:
    targets = _make_help_targets()
    assert "test-fast" in targets and "help" in targets
    listed = re.search(r"`make help` lists every target \(`([^`]+)`\)", _text(REPO / "README.md"))
    assert listed, "the README no longer lists the targets of `make help`"
    assert listed.group(1).split() == targets
    phony = re.search(r"^\.PHONY:(.*)$", _text(REPO / "Makefile"), re.M).group(1).split()
    assert phony == targets


@pytest.mark.slow
def test_report_schema_is_generated_from_the_report_types(tmp_path) -> None:
    """docs/report-schema.md is what `trainbench docs` writes from the report's types (`make docs-check`, which
    `make test` runs); a hand edit of it fails the check, as the command (exit 1, one line) and as the function."""
    import subprocess
    import sys

    from trainbench.analysis.report import schema

    assert (REPO / schema.DOC).read_text() == schema.render(), (
        "docs/report-schema.md differs from the report's types: run `trainbench docs`")
    assert schema.check(REPO) is None
    (tmp_path / "docs").mkdir()
    (tmp_path / schema.DOC).write_text(schema.render().replace("| `sweep_id` | str |", "| `sweep_id` | int |"))
    assert "differs from the report's types" in schema.check(tmp_path)
    cmd = [sys.executable, "-c", "import sys; from trainbench.cli import main; sys.exit(main())", "docs", "--check"]
    bad = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "trainbench docs: docs/report-schema.md differs" in bad.stderr
    assert subprocess.run(cmd[:-1], cwd=tmp_path, capture_output=True, timeout=120).returncode == 0  # rewrites it
    assert schema.check(tmp_path) is None
    make = _text(REPO / "Makefile")
    assert re.search(r"^test: .*\bdocs-check\b", make, re.M)
    assert "trainbench docs --check" in make


def test_every_report_field_has_a_doc_and_appears_in_the_schema() -> None:
    import dataclasses

    from trainbench.analysis.report import schema

    doc = (REPO / schema.DOC).read_text()
    for cls in schema.TYPES.values():
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"{cls.__name__}.{f.name} has no doc"
            assert f"| `{f.name}` |" in doc, f"{cls.__name__}.{f.name} is missing from docs/report-schema.md"


def test_trainbench_docs_outside_the_repository_or_in_a_read_only_one_is_one_error_line(tmp_path, capsys) -> None:
    import os

    from trainbench.cli import main
    from trainbench.core.errors import EXIT_BAD_INPUT

    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)  # no docs/ here
        for argv in (["docs"], ["docs", "--check"]):
            assert main(argv) == EXIT_BAD_INPUT
            err = capsys.readouterr().err
            assert err.startswith("error: ") and "holds no docs/ folder" in err and err.count("\n") == 1, err
        (tmp_path / "docs" / "report-schema.md").mkdir(parents=True)  # a path that cannot be written as a file
        assert main(["docs"]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.startswith("error: cannot write") and err.count("\n") == 1, err
    finally:
        os.chdir(cwd)
