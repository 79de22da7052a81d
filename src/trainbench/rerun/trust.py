"""A logged config is data, never code: the checks a rerun makes on what it read from the store before it
imports, resolves, creates or regenerates anything.

Anyone who can write a run to a shared tracking store writes the config a ``rerun=<id>`` trains with. So,
in this order, before the model is looked up or the data file touched:

1. :func:`refuse_interpolations`: a value holding ``${...}`` (``${oc.env:DB_URL}``, a custom resolver) is
   refused: OmegaConf would resolve it on this machine, from this machine's environment. A config
   run.py logs is resolved, so a genuine one never holds one.
2. :func:`check_logged_values`: the logged config on this version's schemas with the ranges and rules the
   command line has (:func:`trainbench.config.run.validate`), the model's own fields excepted (they need
   its config class, which comes from the model): a logged ``trainer.warmup_epochs=-2`` fails here.
3. :func:`check_spec`: a logged ``model.spec`` (``model=custom``) is a module path: importing it runs its
   code. Only an installed model's entry point, or the very path the user confirms with
   ``rerun_allow_spec=<package.module>:<SPEC>``, is imported.
4. :func:`confine_data_path`: a logged ``data.path`` must lie in this checkout's data folder
   (``paths.data_dir``) or in the folder of the data file the user's own composition names; anything
   else is refused, never created. A path the user gives on the command line is the user's own.

The rerun then validates the whole typed config (model included) before the data file is looked at, and
never regenerates or replaces a data file (``ensure_file(user_path=True)``).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from trainbench.core.errors import ConfigError, RerunError
from trainbench.core.safe_text import term
from trainbench.rerun.names import ALLOW_SPEC_KEY


def _walk(node: Any, prefix: str = "") -> Any:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{prefix[:-1]}[{i}].")
    else:
        yield prefix[:-1], node


def refuse_interpolations(original: dict[str, Any], run_id: str, what: str = "config") -> None:
    """RerunError naming the first logged value that holds an OmegaConf interpolation (``${...}``)."""
    for key, value in _walk(original):
        if isinstance(value, str) and "${" in value:
            raise RerunError(
                f"rerun={run_id}: the logged {what} holds an interpolation at {term(key)!r} "
                f"({term(value)[:80]!r}). A logged config is data: it is never resolved on this machine (it could "
                "read this machine's environment and write it to the store). A config run.py logs is resolved; "
                f"this run was not made by run.py or was edited. Rerun with the value given explicitly "
                f"({term(key)}=<value>) only if you trust the run.")


def _schema_fields(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def check_logged_values(original: dict[str, Any], current: Any, run_id: str) -> None:
    """The logged config against this version's schemas and the command line's ranges, without the model's
    own config class (nothing is imported): RerunError naming the key and the bad value."""
    from omegaconf.errors import OmegaConfBaseException

    from trainbench.config.run import ModelConfig, RunConfig, validate
    from trainbench.rerun.configs import LOCATION_SECTIONS, _plain, schema_mismatch

    pre = copy.deepcopy(original)
    model = pre.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str):
        raise RerunError(f"rerun={run_id}: the logged config has no model.name: it is not a training run's "
                         "config.")
    pre["model"] = {k: v for k, v in model.items() if k in _schema_fields(ModelConfig)}
    now = _plain(current)
    for section in LOCATION_SECTIONS:  # where things are: this checkout's, as the rerun will use
        pre[section] = now[section]
    for key in ("rerun", ALLOW_SPEC_KEY):
        pre.pop(key, None)
    schema = OmegaConf.structured(RunConfig)
    schema.model = OmegaConf.structured(ModelConfig)
    try:
        validate(OmegaConf.merge(schema, pre))
    except ConfigError as e:
        raise RerunError(f"rerun={run_id}: the logged config is invalid: {term(e)} Logged values are checked as "
                         "the command line's are; override the key with rerun= to rerun with a valid value.") from None
    except OmegaConfBaseException as e:
        raise schema_mismatch(e, run_id) from None


def installed_spec_values() -> set[str]:
    """The ``<package.module>:<SPEC>`` values of every installed model entry point (trainbench's own too)."""
    from trainbench.core.entrypoints import sources

    return {s.value for s in sources()}


def check_spec(original: dict[str, Any], current: Any, run_id: str) -> None:
    """A logged ``model.spec`` that no installed entry point declares is imported only when the user names
    it on the command line (``rerun_allow_spec=<the same path>``); RerunError otherwise."""
    spec = (original.get("model") or {}).get("spec")
    if not spec:
        return
    spec = str(spec)
    if spec in installed_spec_values():
        return
    allowed = current.get(ALLOW_SPEC_KEY) if hasattr(current, "get") else None
    if allowed is not None and str(allowed) == spec:
        return
    raise RerunError(
        f"rerun={run_id}: the logged config names model.spec={term(spec)!r}, a module path that no installed "
        "model declares: importing it would run its code on this machine, and a tracking store is not a source "
        f"of code. If you trust that module, confirm it: rerun={run_id} '{ALLOW_SPEC_KEY}={term(spec)}'; or "
        "install it as a model entry point (docs/own-models.md).")


def _resolved(path: str | Path, root: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(root) / p
    return p.resolve()  # follows symlinks of the parts that exist


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def confine_data_path(cfg: Any, current: Any, user_keys: set[str], run_id: str) -> None:
    """A data path from the logged config lies in ``paths.data_dir`` or the folder of the data file of the
    user's own composition; RerunError otherwise (nothing is created)."""
    if "data.path" in user_keys:
        return  # the user's own
    path = cfg.data.path
    if not path:
        return
    root = str(cfg.paths.root)
    target = _resolved(str(path), root)
    roots = [_resolved(str(cfg.paths.data_dir), root)]
    own = OmegaConf.select(current, "data.path", default=None)
    if own:
        roots.append(_resolved(str(own), root).parent)
    if any(_within(target, r) for r in roots):
        return
    raise RerunError(
        f"rerun={run_id}: the logged data.path {term(path)!r} is outside this checkout's data folder "
        f"({roots[0]}) and the folders your own config names: a rerun reads or creates data only there. "
        f"Copy the file into {roots[0]} and give data.path=<that file> with rerun=, or give the path yourself "
        "(data.path=...) if you trust it.")
