"""The single list of models. Every sweep, config file and report is checked against it.

It holds every ``trainbench.models`` entry point (:mod:`trainbench.core.entrypoints`): trainbench's own models,
declared in its ``pyproject.toml``, and those of installed plugin packages, plus a model loaded from a
module path (``model=custom model.spec=<package.module>:<SPEC>``). Each entry carries its origin.

Entries are imported lazily and a broken one never breaks the others: an import error, a SPEC that is
not a valid :class:`ModelSpec` or a name claimed twice is recorded, shown by :func:`describe_models`,
and raised as one :class:`PluginError` naming the plugin and the fix only when that model is asked for.
A plugin that takes a built-in model's name is refused (the built-in one stays); two plugins of the same
name are both refused. Asking for a name that is not here raises with the known names: a benchmark must
never silently skip a model.

Composing and explaining the configuration (:func:`register_model_configs`, :func:`describe_models`) reads
:meth:`Registry.schemas`: a built-in model's schema is its torch-free
:class:`~trainbench.config.models.spec.ModelSchema` (:data:`trainbench.config.models.SCHEMAS`), so this
module, a typo and ``--help`` import neither torch nor a model module; a plugin is imported then (its entry
point is the only place its schema is declared).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainbench.config.models import SCHEMAS
from trainbench.config.models.spec import ModelSchema, ModelSpec
from trainbench.core import entrypoints as plugins
from trainbench.core.entrypoints import BUILTIN, CUSTOM, Source
from trainbench.core.errors import PluginError, UnknownModelError

__all__ = ["REGISTRY", "Entry", "PluginError", "Registry", "UnknownModelError", "describe_models",
           "register_model_configs"]

log = logging.getLogger("trainbench")

DATA_KINDS = ("bars", "book")


@dataclass
class Entry:
    """One model of the registry: where it comes from and, once loaded, its spec or why it is unusable."""

    name: str
    origin: str
    value: str
    dist: str | None = None
    spec: ModelSpec | None = None
    error: str | None = None
    loaded: bool = False
    #: Every declaration of this name (more than one: a duplicate, refused).
    claims: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How error messages name it: ``model 'x' (plugin dist 1.0, entry point x = pkg.mod:SPEC)``."""
        if self.origin == BUILTIN:
            return f"model {self.name!r} (built in, {self.value})"
        if self.dist is None and self.origin == self.value:
            return f"model {self.name!r} (model.spec={self.value})"
        return f"model {self.name!r} (plugin {self.origin}, entry point {self.name} = {self.value})"

    @property
    def fix(self) -> str:
        if self.origin == BUILTIN:
            return "Reinstall trainbench (make install)."
        if self.dist:
            return (f"Fix the plugin, or uninstall it (pip uninstall {self.dist}); other models are "
                    "unaffected.")
        return "Fix the module or the path."


def check_spec(obj: Any, name: str | None = None) -> str | None:
    """What is wrong with ``obj`` as a model's SPEC (registered as ``name``), or None."""
    from trainbench.config.run import ModelConfig

    if not isinstance(obj, ModelSpec):
        return (f"it is a {type(obj).__name__}, not a trainbench ModelSpec: export "
                "SPEC = trainbench.api.ModelSpec(name=..., config_cls=..., build=...)")
    why = plugins.check_name(str(obj.name))
    if why:
        return f"SPEC.name: {why}"
    if name is not None and obj.name != name:
        return (f"its entry point is named {name!r} but SPEC.name is {obj.name!r}: give both the same name "
                "(the name is what model=<name> selects)")
    cls = obj.config_cls
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and issubclass(cls, ModelConfig)):
        return (f"SPEC.config_cls={cls!r} is not a dataclass subclass of trainbench.api.ModelConfig: declare "
                "@dataclass class MyConfig(ModelConfig) with fields made by param(...)")
    if not callable(obj.build):
        return "SPEC.build is not callable: give build(cfg, data, ctx) -> Trainable"
    if obj.data_kind not in DATA_KINDS:
        return f"SPEC.data_kind={obj.data_kind!r} is invalid: use one of {', '.join(DATA_KINDS)}"
    return None


class Registry:
    def __init__(self, sources: Iterable[Source] = ()) -> None:
        self._entries: dict[str, Entry] = {}
        #: Entries refused because a built-in model has their name (shown by describe_models).
        self.refused: list[Entry] = []
        for src in sources:
            self.add(src)

    # -- filling ---------------------------------------------------------------------------------

    def add(self, src: Source) -> None:
        """Declare a model without importing it (a refused or duplicate name is recorded: see the module doc)."""
        entry = Entry(src.name, src.origin, src.value, src.dist, claims=[f"{src.origin} ({src.value})"])
        first = self._entries.get(src.name)
        why = plugins.check_name(src.name)
        if why is None and first is not None and first.origin == BUILTIN:
            why = f"the name {src.name!r} is taken by a built-in model; rename the entry point"
        if why:
            entry.loaded, entry.error = True, f"{entry.label} is refused: {why}. {entry.fix}"
            self.refused.append(entry)
        elif first is None:
            self._entries[src.name] = entry
        else:
            first.claims.append(f"{src.origin} ({src.value})")
            first.loaded, first.spec = True, None
            first.error = (f"model {src.name!r} is declared by more than one plugin, {' and '.join(first.claims)}: "
                           "all of them are refused. Uninstall all but one (pip uninstall <distribution>) or "
                           "rename their entry points.")

    def register(self, spec: ModelSpec, origin: str = BUILTIN, value: str = "") -> ModelSpec:
        """Register a loaded spec now; a name already here raises."""
        if spec.name in self._entries:
            raise ValueError(f"model {spec.name!r} is already registered ({self._entries[spec.name].origin})")
        why = check_spec(spec)
        if why:
            raise PluginError(f"model {spec.name!r} cannot be registered: {why}")
        self._entries[spec.name] = Entry(spec.name, origin, value or origin, spec=spec, loaded=True)
        return spec

    def load_path(self, value: str) -> ModelSpec:
        """``model=custom model.spec=<value>``: the SPEC at that module path, registered under its own name
        with the path as its origin. Raises :class:`PluginError` with the fix."""
        where = f"model.spec={value}"
        try:
            obj = plugins.load_object(value)
        except PluginError as e:
            raise PluginError(f"{where}: {e}. Give model.spec=<package.module>:<SPEC> of an importable "
                              "module (run from the folder that holds the package, or pip install it).") from None
        why = check_spec(obj)
        if why:
            raise PluginError(f"{where} is not a valid model: {why}.")
        first = self._entries.get(obj.name)
        if first is not None:
            self._load(first)
            if first.spec is obj:
                return obj  # the same model, also installed: keep its origin
            raise PluginError(f"{where} names its model {obj.name!r}, which is already registered "
                              f"({first.origin}): give its SPEC another name.")
        self._entries[obj.name] = Entry(obj.name, value, value, spec=obj, loaded=True)
        return obj

    # -- lookup ----------------------------------------------------------------------------------

    def _load(self, entry: Entry) -> None:
        if entry.loaded:
            return
        entry.loaded = True
        try:
            obj = plugins.load_object(entry.value)
        except PluginError as e:
            entry.error = f"{entry.label} cannot be loaded: {e}. {entry.fix}"
            return
        why = check_spec(obj, entry.name)
        if why:
            entry.error = f"{entry.label} is not a valid model: {why}. {entry.fix}"
            return
        entry.spec = obj

    def entry(self, name: str) -> Entry:
        """The entry of ``name``, loaded (its ``error`` says why it cannot be used, if so)."""
        try:
            entry = self._entries[name]
        except KeyError:
            hint = (" model=custom needs model.spec=<package.module>:<SPEC> (docs/own-models.md)."
                    if name == CUSTOM else "")
            raise UnknownModelError(
                f"unknown model {name!r}: known models are {', '.join(self.names())}. "
                f"Pick one with model=<name>.{hint}") from None
        self._load(entry)
        return entry

    def get(self, name: str) -> ModelSpec:
        entry = self.entry(name)
        if entry.spec is None:
            raise PluginError(entry.error or f"model {name!r} cannot be used")
        return entry.spec

    def resolve(self, model_cfg: Any) -> ModelSpec:
        """The spec a run's ``model`` config asks for: ``model.spec`` (model=custom) or ``model.name``."""
        path = getattr(model_cfg, "spec", None)
        if path:
            return self.load_path(str(path))
        return self.get(str(model_cfg.name))

    def origin(self, name: str) -> str:
        return self._entries[name].origin

    def declared(self) -> list[Entry]:
        """Every entry, by name, as it stands (none is loaded here)."""
        return [self._entries[n] for n in sorted(self._entries)]

    def entries(self) -> list[Entry]:
        """Every entry, loaded, usable or not, by name."""
        for e in self._entries.values():
            self._load(e)
        return [self._entries[n] for n in sorted(self._entries)]

    def names(self) -> list[str]:
        """Names of the usable models, sorted."""
        return [e.name for e in self.entries() if e.spec is not None]

    def specs(self) -> list[ModelSpec]:
        return [e.spec for e in self.entries() if e.spec is not None]

    def schema(self, name: str) -> ModelSchema | ModelSpec | None:
        """What the configuration needs of ``name`` (its name, config class, data kind, description, sizes), or
        None when it cannot be used (:meth:`entry` says why): a built-in model's torch-free schema without
        importing it; another's spec, loaded."""
        entry = self._entries[name]
        if entry.origin == BUILTIN and name in SCHEMAS and (not entry.loaded or entry.spec is not None):
            return SCHEMAS[name]
        self._load(entry)
        return entry.spec

    def schemas(self) -> list[ModelSchema | ModelSpec]:
        """:meth:`schema` of every usable model, by name (plugins are loaded; built-in models are not)."""
        found = (self.schema(n) for n in sorted(self._entries))
        return [s for s in found if s is not None]

    def builtin_names(self) -> list[str]:
        """Names of trainbench's own models, sorted: what the project's tests cover model by model (a
        plugin's author checks theirs with ``python -m trainbench.check``)."""
        return [e.name for e in self.entries() if e.spec is not None and e.origin == BUILTIN]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries and self.entry(name).spec is not None

    def __len__(self) -> int:
        return len(self.names())


REGISTRY = Registry(plugins.sources())


# --------------------------------------------------------------------------------------------------
# listing and Hydra config nodes
# --------------------------------------------------------------------------------------------------


def describe_models(registry: Registry = REGISTRY) -> str:
    """The model list with origins (``run.py --help``, ``python -m trainbench.config``); broken ones say why."""
    rows = [(e, registry.schema(e.name)) for e in registry.declared()] + [(e, None) for e in registry.refused]
    entries = [e for e, _ in rows]
    width = max([len(e.name) for e in entries] + [4])
    owidth = max([len(e.origin) for e in entries] + [6])
    lines = ["Models (model=<name>; model=custom model.spec=<package.module>:<SPEC> for one not installed; "
             "docs/own-models.md):"]
    for e, schema in rows:
        if schema is not None:
            what = f"{schema.data_kind:5s} {schema.description}"
        else:
            what = f"BROKEN: {e.error}"
        lines.append(f"  {e.name:{width}s}  {e.origin:{owidth}s}  {what}".rstrip())
    return "\n".join(lines)


def _sizes() -> list[str]:
    from trainbench.config.team import group_names

    return group_names("size") or ["reference", "small", "tiny"]


def _store_model_nodes(cs: Any, option: str, spec: ModelSchema | ModelSpec,
                       extra: dict[str, Any] | None = None) -> None:
    """``model/<option>`` for a model without a conf/model file: its schema, its name and its sizes."""
    from omegaconf import OmegaConf

    base = f"base_{option}"
    node = OmegaConf.structured(spec.config_cls)
    node.name = spec.name
    if extra:
        OmegaConf.set_struct(node, False)
        for k, v in extra.items():
            node[k] = v
        OmegaConf.set_struct(node, True)
    cs.store(group="model", name=base, node=node)
    if option != CUSTOM:  # conf/model/custom.yaml is a file
        cs.store(group="model", name=option, node={"defaults": [base, "_self_", {f"{option}@_here_": "${size}"}]})
    for size in sorted(set(_sizes()) | set(spec.sizes)):
        cs.store(group=f"model/{option}", name=size, node={"size": size, **dict(spec.sizes.get(size, {}))})


def register_model_configs(cs: Any, registry: Registry = REGISTRY) -> None:
    """Config nodes of every model, from :meth:`Registry.schemas` (no built-in model is imported):

    - a built-in model: ``model/base_<name>``, its config class, which ``conf/model/<name>.yaml`` extends;
    - a plugin (no ``conf/model`` file): ``model/<name>`` (its config class with its name), and
      ``model/<name>/<size>`` from ``SPEC.sizes`` (a size it does not declare takes the class's defaults), so that ``model=<name>``,
      ``size=...`` and the default sweep treat it as a built-in model;
    - a broken plugin: ``model/<name>`` with the base schema, so that asking for it (or the default sweep)
      reaches the run, which fails with the plugin's error; other models are unaffected;
    - ``model=custom`` (conf/model/custom.yaml): unless :func:`register_custom_from_argv` stored the spec of
      ``model.spec``, a placeholder whose run says that model.spec is needed.
    """
    from omegaconf import OmegaConf

    from trainbench.config.run import ModelConfig

    for e in registry.declared():
        schema = registry.schema(e.name)
        if e.origin == BUILTIN and schema is not None:
            cs.store(group="model", name=f"base_{e.name}", node=schema.config_cls)
        elif e.origin == BUILTIN:
            continue  # broken: its run says why (model=<name> finds conf/model/<name>.yaml without its base)
        elif schema is not None:
            _store_model_nodes(cs, e.name, schema)
        else:
            cs.store(group="model", name=e.name, node=OmegaConf.structured(ModelConfig(name=e.name)))
    for e in registry.refused:
        log.warning("%s", e.error)
    OmegaConf.register_new_resolver("trainbench_models", lambda: describe_models(registry), replace=True)
    loaded = cs.repo.get("model", {}).get(f"base_{CUSTOM}.yaml")
    if loaded is None or loaded.node.get("spec") is None:  # keep a spec register_custom_from_argv loaded
        placeholder = ModelSchema(name=CUSTOM, config_cls=ModelConfig)
        _store_model_nodes(cs, CUSTOM, placeholder, {"spec": None})


def register_custom_from_argv(argv: list[str], registry: Registry = REGISTRY) -> None:
    """``model.spec=<path>`` on run.py's command line: load it now (before Hydra composes ``model=custom``)
    and store its config under ``base_custom``. Raises :class:`PluginError` for a bad path (run.py prints
    it as one line, :func:`trainbench.cli.load_custom_model`)."""
    from hydra.core.config_store import ConfigStore

    values = [a.split("=", 1)[1] for a in argv if a.split("=", 1)[0].lstrip("+") == "model.spec" and "=" in a]
    if not values:
        return
    spec = registry.load_path(values[-1])
    cs = ConfigStore.instance()
    _store_model_nodes(cs, CUSTOM, spec, {"spec": values[-1]})
