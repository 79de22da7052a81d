"""The config of a rerun: the original's resolved config on this version's schemas, then the current
location (``tracking.*``, ``paths.*``) and the overrides given with ``rerun=``; and what that changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainbench.config.run import RunConfig
from trainbench.core.errors import PluginError, RerunError, UnknownModelError
from trainbench.rerun.names import ALLOW_SPEC_KEY, TAG_GIT_COMMIT, TAG_SWEEP_ID

#: Sections of the config that say where things are, not what is measured: always the current ones.
LOCATION_SECTIONS = ("tracking", "paths")
#: Keys of the rerun's own invocation, never the original's: not reported as config differences.
_OWN_KEYS = ("rerun", ALLOW_SPEC_KEY)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    out[prefix[:-1]] = d
    return out


def _plain(cfg: DictConfig) -> dict[str, Any]:
    return json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)))


def schema_mismatch(e: Exception, run_id: str | None = None) -> RerunError:
    """One line for a logged config that this version's schemas refuse (OmegaConf's error, whose message
    runs over several lines with its internals, cut to its first): a key the schema does not have was
    renamed or removed since; a value of the wrong type or outside its choices is said to be that."""
    from omegaconf.errors import ConfigKeyError

    from trainbench.core.safe_text import term

    key = term(getattr(e, "full_key", None) or "")
    lines = str(getattr(e, "msg", None) or e).strip().splitlines()
    what = term(lines[0] if lines else type(e).__name__)[:200]
    who = f"rerun={run_id}: the" if run_id else "The"
    if isinstance(e, ConfigKeyError):
        return RerunError(f"{who} logged config has a key this version of trainbench does not know, {key!r} ({what}): "
                          "it was renamed or removed since, or the run was not written by run.py. Check out the "
                          f"original's commit (tag {TAG_GIT_COMMIT}) to rerun it exactly.")
    where = f"{key!r}" if key else "a section"
    return RerunError(f"{who} logged config's value at {where} does not have the type this version of trainbench "
                      f"expects ({what}): the run's config was edited or not written by run.py, or the key's type "
                      f"changed since. Rerun with the value given ({key or '<key>'}=<value>) if you trust the rest "
                      f"of the run, or check out the original's commit (tag {TAG_GIT_COMMIT}) to rerun it exactly.")


def typed_config(original: dict[str, Any]) -> DictConfig:
    """The original's resolved config on this version's schemas (a missing key takes its default)."""
    from types import SimpleNamespace

    from omegaconf.errors import OmegaConfBaseException

    from trainbench.models.registry import REGISTRY

    model = original.get("model") or {}
    name = model.get("name")
    try:  # an installed model by its name; a model=custom run by its model.spec path, as it was trained
        spec = REGISTRY.resolve(SimpleNamespace(name=name, spec=model.get("spec")))
    except (UnknownModelError, PluginError) as e:
        raise RerunError(f"the original trained model {name!r}, which this version does not have: {e}") from None
    schema = OmegaConf.structured(RunConfig)
    schema.model = OmegaConf.structured(spec.config_cls)
    if model.get("spec"):  # model=custom: the path stays part of the model's config, as when it trained
        OmegaConf.set_struct(schema.model, False)
        schema.model.spec = str(model["spec"])
        OmegaConf.set_struct(schema.model, True)
    try:
        merged = OmegaConf.merge(schema, original)
    except OmegaConfBaseException as e:
        raise schema_mismatch(e) from None
    assert isinstance(merged, DictConfig)
    return merged


def _override_keys(overrides: list[str]) -> list[str]:
    keys = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key:
            keys.append(key)
    return keys


def _rebase(path: str | None, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """A data path of the original's checkout moved to this one when it does not exist here."""
    if not path or Path(path).exists():
        return path
    for key in ("data_dir", "root"):
        a, b = old.get(key), new.get(key)
        if a and b and a != b and (path == a or path.startswith(a.rstrip("/") + "/")):
            return b.rstrip("/") + path[len(a.rstrip("/")):]
    return path


def rerun_config(current: DictConfig, original: dict[str, Any], invocation: list[str],
                 run_id: str) -> tuple[DictConfig, dict[str, Any], list[str]]:
    """(config to train with, config diff, notes): the original's values, then location and the user's overrides."""
    cfg = typed_config(original)
    notes: list[str] = []
    now = _plain(current)
    cfg.merge_with({section: now[section] for section in LOCATION_SECTIONS})
    cfg.sweep_id = None  # a rerun is not one of the original sweep's jobs (unless sweep_id= is given)
    for key in _override_keys(invocation):
        if key == "rerun" or key.split(".")[0] in LOCATION_SECTIONS:
            continue
        if "/" in key or "@" in key or OmegaConf.select(current, key, default="__missing__") == "__missing__":
            notes.append(f"override {key!r} is not a config key of the run (e.g. a global group such as debug=); "
                         "it was ignored: give single keys (trainer.epochs=3) with rerun=")
            continue
        value = OmegaConf.select(current, key)
        if isinstance(value, DictConfig):
            value = OmegaConf.to_container(value, resolve=True)
            orig_name = (original.get(key) or {}).get("name") if isinstance(original.get(key), dict) else None
            if value.get("name") is not None and value.get("name") == orig_name:
                # model=ppo on a ppo run only lets ppo's own keys be overridden; it must not reset the section
                continue
            if key == "model":
                raise RerunError(f"model={value.get('name')} cannot rerun a {orig_name} run: a rerun keeps the "
                                 f"original's model. Train {value.get('name')} as a new run instead.")
        if isinstance(value, dict):
            cfg.merge_with({key: value})  # a group (trainer=quick): its whole section
        else:
            OmegaConf.update(cfg, key, value)
    old_paths = (original.get("paths") or {})
    data_path = cfg.data.path
    moved = _rebase(data_path, old_paths, now["paths"])
    if moved != data_path:
        cfg.data.path = moved
        notes.append(f"data.path {data_path} does not exist here; using {moved} (same place in this checkout)")
    cfg.rerun = run_id
    OmegaConf.update(cfg, ALLOW_SPEC_KEY, current.get(ALLOW_SPEC_KEY), force_add=True)  # the user's, never the log's
    before, after = _flat(json.loads(json.dumps(original))), _flat(_plain(cfg))
    changed = {k: [before[k], after[k]] for k in sorted(before.keys() & after.keys())
               if before[k] != after[k] and k.split(".")[0] not in LOCATION_SECTIONS and k not in _OWN_KEYS
               and not (k == TAG_SWEEP_ID and after[k] is None)}  # cleared by design (above): not a difference
    added = {k: after[k] for k in sorted(after.keys() - before.keys()) if k not in _OWN_KEYS}
    location = {k: [before[k], after[k]] for k in sorted(before.keys() & after.keys())
                if before[k] != after[k] and k.split(".")[0] in LOCATION_SECTIONS}
    return cfg, {"changed": changed, "added_since": added, "location": location}, notes
