"""Documented fields of the typed report, and its JSON form: ``doc`` (a dataclass field with its doc, as the
config schemas' ``param``), :func:`to_json` and :func:`from_json`.

The report's types (analysis/statistics/timing.py: what the statistics give; analysis/report_types.py: the
rest of report.json) declare every field with :func:`doc`; docs/report-schema.md is generated from those docs.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import field
from typing import Any

from trainbench.core.errors import UnknownReportKey

_NO_DEFAULT: Any = dataclasses.MISSING


def doc(text: str, default: Any = _NO_DEFAULT, *, factory: Any = None, omit_none: bool = False,
        extra: bool = False, flatten: str | None = None) -> Any:
    """A report field with its doc. ``extra``: beyond the minimum report (readers may ignore it);
    ``omit_none``: not written while None; ``flatten``: a dict written as keys of its object, each key starting
    with this prefix (``within: {"within_24h": true}`` is the row's ``within_24h``)."""
    meta = {"doc": text, "omit_none": omit_none, "extra": extra, "flatten": flatten}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


Interval = list[float]  # [low, high]


# --------------------------------------------------------------------------------------------------
# serialisation
# --------------------------------------------------------------------------------------------------


def to_json(obj: Any) -> Any:
    """The JSON form of a report object: dataclasses as objects in field order (``omit_none`` fields left out
    while None), tuples as lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            if f.metadata.get("flatten"):
                out.update(to_json(v))
                continue
            out[f.name] = to_json(v)
        return out
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    return obj


def from_json(cls: Any, data: Any, where: str = "report") -> Any:
    """A report object of type ``cls`` from its JSON form; a key without a field raises
    :class:`UnknownReportKey` naming it, a missing key takes the field's default."""
    if data is None:
        return None
    if dataclasses.is_dataclass(data):
        return data
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    flat = {f.name: f.metadata["flatten"] for f in dataclasses.fields(cls) if f.metadata.get("flatten")}
    if flat:  # the keys a flattened dict was written as go back into it
        data = dict(data)
        for name, prefix in flat.items():
            written = {k: data.pop(k) for k in [k for k in data if k.startswith(prefix) and k not in names]}
            data[name] = {**(data.get(name) or {}), **written}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UnknownReportKey(f"{where}: {', '.join(unknown)} has no field in {cls.__name__} "
                               "(analysis/report_types.py): add it there, with its doc")
    kw = {k: _convert(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    return cls(**kw)


def _convert(tp: Any, v: Any, where: str) -> Any:
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg) and isinstance(v, dict):
                return from_json(arg, v, where)
        return v
    if dataclasses.is_dataclass(tp):
        return from_json(tp, v, where)
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_convert(arg, x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict:
        args = typing.get_args(tp)
        arg = args[1] if len(args) == 2 else Any
        return {k: _convert(arg, x, f"{where}.{k}") for k, x in v.items()}
    return v


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]
