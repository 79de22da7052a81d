"""docs/report-schema.md, generated from the report's types: ``trainbench docs`` writes it, ``trainbench docs
--check`` fails (exit 1) when the file differs from what the types say (``make docs-check``).

The hand-written prose lives in schema_template.md beside this module; every ``{{fields:<Type>}}`` there
becomes the table of that type's fields (key, type, meaning: the field's doc), so a field and its doc have one
home, the type.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

from trainbench.analysis import report_types as model
from trainbench.analysis.statistics import stats, timing

TEMPLATE = Path(__file__).with_name("schema_template.md")
#: The generated document, relative to the repository root.
DOC = Path("docs/report-schema.md")
TYPES = {name: obj for mod in (timing, model) for name, obj in vars(mod).items()
         if dataclasses.is_dataclass(obj) and obj.__module__ == mod.__name__}


def type_name(tp: Any) -> str:
    """A field's type as the document writes it: int, float, str, bool, [x], {str: x}, object, ``| null``."""
    if tp is type(None):
        return "null"
    if tp is Any or dataclasses.is_dataclass(tp):
        return "object"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in typing.get_args(tp))
    if origin is list:
        (arg,) = typing.get_args(tp)
        return f"[{type_name(arg)}]"
    if origin is dict:
        k, v = typing.get_args(tp)
        return "object" if v is Any else f"{{{type_name(k)}: {type_name(v)}}}"
    return getattr(tp, "__name__", str(tp))


def fields_table(cls: type) -> str:
    """The Markdown table of ``cls``'s fields: key, type, meaning (the field's doc, *(extra)* where marked)."""
    hints = typing.get_type_hints(cls)
    rows = ["| key | type | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        meaning = f.metadata.get("doc", "")
        if not meaning:
            raise ValueError(f"{cls.__name__}.{f.name} has no doc: declare it with analysis.fields.doc(...)")
        extra = " *(extra)*" if f.metadata.get("extra") else ""
        cell = meaning.replace("|", "\\|")
        rows.append(f"| `{f.name}` | {type_name(hints[f.name])} | {cell}{extra} |")
    return "\n".join(rows)


def render(template: str | None = None) -> str:
    """The document: the template with every placeholder filled from the types."""
    text = TEMPLATE.read_text() if template is None else template

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key == "schema_version":
            return str(model.SCHEMA_VERSION)
        if key == "unresolved_ratio":
            return f"{stats.UNRESOLVED_RATIO:g}"
        if key.startswith("fields:"):
            return fields_table(TYPES[key.split(":", 1)[1]])
        raise KeyError(f"unknown placeholder {{{{{key}}}}} in {TEMPLATE.name}")

    return re.sub(r"\{\{([\w:]+)\}\}", fill, text)


def _doc_path(root: Path | None) -> Path:
    """docs/report-schema.md under ``root`` (default: the working directory); :class:`ConfigError` where
    ``root`` holds no ``docs/`` folder (the command was run outside the repository)."""
    base = root or Path.cwd()
    if not (base / DOC.parent).is_dir():
        from trainbench.core.errors import ConfigError

        raise ConfigError(f"{base} holds no {DOC.parent}/ folder: run `trainbench docs` in the repository's root "
                          f"(the folder with {DOC.parent}/ and pyproject.toml).")
    return base / DOC


def check(root: Path | None = None) -> str | None:
    """Why docs/report-schema.md under ``root`` (default: the working directory) is not what the report's types
    generate, or None when it is; :class:`ConfigError` where there is no ``docs/`` folder."""
    path = _doc_path(root)
    if path.is_file() and path.read_text() == render():
        return None
    return (f"{DOC} differs from the report's types: run `trainbench docs` (edit the types' docs or "
            "schema_template.md, never the generated file)")


def write(root: Path | None = None) -> Path:
    """Write docs/report-schema.md under ``root`` (default: the working directory); returns its path.
    :class:`ConfigError` where there is no ``docs/`` folder or the file cannot be written."""
    path = _doc_path(root)
    try:
        path.write_text(render())
    except OSError as e:
        from trainbench.core.errors import ConfigError

        raise ConfigError(f"cannot write {path} ({type(e).__name__}: {e.strerror or e}): run `trainbench docs` "
                          "where that file is writable (your checkout's root).") from None
    return path
