"""Where models come from, read without importing one (no torch): the ``trainbench.models`` entry points.

Every model is an entry point of the group :data:`GROUP`, ``<name> = "<package.module>:<SPEC>"``, whose
object is a :class:`trainbench.models.base.ModelSpec`. trainbench's own five are entry points of trainbench
itself (``[project.entry-points."trainbench.models"]`` in its ``pyproject.toml``); a team's model is an entry
point of its own installed package. :mod:`trainbench.models.registry` loads them; the analysis only needs
their names (:func:`model_names`, the default of ``decision.plan``), so this module imports neither torch
nor a model.

Origins, recorded as the run tag ``model_origin``: ``builtin`` (trainbench's own), ``<distribution>
<version>`` (an installed plugin), or the module path itself (``model=custom model.spec=pkg.module:SPEC``).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainbench.core.errors import PluginError

#: The entry-point group every model is declared in.
GROUP = "trainbench.models"
#: The origin of trainbench's own models.
BUILTIN = "builtin"
#: ``model=custom``: a model loaded from ``model.spec=<package.module>:<SPEC>``; no model may take the name.
CUSTOM = "custom"
_DIST = "trainbench"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Source:
    """One declared model, not loaded."""

    name: str
    #: ``<package.module>:<attribute>``: where its ModelSpec is.
    value: str
    #: ``builtin``, ``<distribution> <version>`` or the module path.
    origin: str
    #: The distribution that declares it (None: trainbench's own checkout, or a module path).
    dist: str | None = None


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a model name (a Hydra option ``model=<name>``), or None."""
    if not _NAME.match(name):
        return f"{name!r} is not a valid model name: use letters, digits and _, starting with a letter"
    if name == CUSTOM or name.startswith("base_"):
        return f"the model name {name!r} is reserved (model=custom and base_* are trainbench's own configs)"
    return None


def builtin_sources() -> list[Source]:
    """trainbench's own models, in the order of the installed metadata (by name).

    From the installed distribution's entry points (its metadata is written at install time: after editing
    the table in ``pyproject.toml``, reinstall, as ``make install`` does when ``pyproject.toml`` changes).
    Raises :class:`PluginError` when none is declared.
    """
    try:
        eps = md.distribution(_DIST).entry_points
    except md.PackageNotFoundError:
        eps = []  # type: ignore[assignment]
    found = [Source(ep.name, ep.value, BUILTIN) for ep in eps if ep.group == GROUP]
    if not found:
        raise PluginError(f"trainbench's own models are declared as {GROUP!r} entry points and none were found: "
                          "trainbench is not installed (or its install is broken). Run `make install` "
                          "(pip install -e .) in the checkout.")
    return found


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def installed_sources() -> list[Source]:
    """Models declared by other installed distributions (plugins), sorted by name then distribution."""
    out = []
    for ep in md.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else None
        if dist_name and _normalise(dist_name) == _DIST:
            continue  # trainbench's own: builtin_sources()
        origin = f"{dist_name} {dist.version}" if dist is not None and dist_name else f"entry point {ep.value}"
        out.append(Source(ep.name, ep.value, origin, dist_name))
    return sorted(out, key=lambda s: (s.name, s.origin))


def sources() -> list[Source]:
    """Every declared model: trainbench's own first, then plugins, each by name."""
    return builtin_sources() + installed_sources()


def model_names() -> list[str]:
    """The names of every declared model, each once, without importing any: the default training plan.

    A plugin that fails to load is still named here (the analysis reports it as not measured); one whose
    name is taken by a built-in model is not a separate model.
    """
    return list(dict.fromkeys(s.name for s in sources()))


def load_object(value: str) -> Any:
    """The object at ``<package.module>:<attribute>`` (the entry-point value syntax); raises PluginError.

    The current directory is importable, as for ``python -m`` (a module path on the command line names a
    package of the project the user runs from).
    """
    module_name, sep, attr = value.partition(":")
    if not sep or not module_name or not attr or "," in value:
        raise PluginError(f"{value!r} is not a model spec path: use <package.module>:<SPEC>, e.g. "
                          "model.spec=my_pkg.my_model:SPEC")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.append(str(Path.cwd()))
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure of user code is reported, never raised raw
        raise PluginError(f"cannot import {module_name!r} ({type(e).__name__}: {e})") from None
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise PluginError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj
