"""Hydra registration of every schema, the models' included, and composing run.py's config in code.

The schemas (types, ranges, docs) are in :mod:`trainbench.config.run` (run.py) and
:mod:`trainbench.config.analyze` (analyze.py); the built-in models' config classes are in
:mod:`trainbench.config.models`, a plugin's in its own module. This module registers them in Hydra's
ConfigStore under ``base_*`` names, the models' from the registry (which declares plugins), so it stands
above the models; it imports neither torch nor a model module (a plugin's excepted: its entry point is where
its schema is). The key reference (``python -m trainbench.config``) is :mod:`trainbench.config.reference`.
"""

from __future__ import annotations

import re
import sys

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from trainbench.config.analyze import register_analysis_configs
from trainbench.config.run import DataConfig, RunConfig, TrainerConfig
from trainbench.config.shared import HardwareConfig, TrackingConfig


def register_configs(include_models: bool = True) -> None:
    """Register the schemas under `base_*` names (YAML files extend them via their defaults list).

    ``include_models`` adds the models' (the registry's schemas: no built-in model is imported, a plugin is);
    analyze.py passes False.
    """
    cs = ConfigStore.instance()
    cs.store(name="base_run", node=RunConfig)
    cs.store(group="data", name="base_data", node=DataConfig)
    cs.store(group="trainer", name="base_trainer", node=TrainerConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
    cs.store(group="tracking", name="base_tracking", node=TrackingConfig)
    register_analysis_configs()
    if include_models:
        from trainbench.models.registry import register_model_configs

        register_model_configs(cs)  # the models' schemas (torch-free), plugins' nodes, and model=custom


def size_alias(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``model.size=X`` on the command line means the ``size`` group choice ``size=X``.

    The size is a config group (it swaps the model's size-dependent keys); overriding only the key would
    leave the dimensions of the other size under its name. Other overrides pass through unchanged.
    """
    return ["size=" + o[len("model.size="):] if o.startswith("model.size=") else o for o in overrides]


#: ``cuda = ...`` and ``hip = ...`` in ``torch/version.py``: the GPU toolkit a torch build was built for (None: none).
_TORCH_BUILD = re.compile(r"^(cuda|hip)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, answered without importing torch (a second and more) where the answer is
    no whatever the machine: torch is not installed, or it is a CPU-only build (its ``torch/version.py`` names
    neither a CUDA nor a HIP toolkit). A GPU build asks torch."""
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("torch")
    if found is None:
        return False
    if found.origin:
        try:
            build = dict(_TORCH_BUILD.findall((Path(found.origin).parent / "version.py").read_text()))
        except OSError:
            build = {}
        if build.get("cuda") == "None" and build.get("hip") == "None":
            return False
    import torch

    return bool(torch.cuda.is_available())


def trainer_auto(overrides: list[str] | tuple[str, ...], announce: bool = False) -> list[str]:
    """``trainer=auto`` (the default) resolved for this machine (:func:`trainbench.config.run.resolve_trainer`):
    the GPU profile when CUDA is available to torch, else the CPU profile; an explicit ``trainer=`` wins.
    ``announce`` prints the choice and its reason (run.py)."""
    from trainbench.config.run import TRAINER_AUTO, resolve_trainer

    overrides = list(overrides)
    cuda = False
    if any(o == f"trainer={TRAINER_AUTO}" for o in overrides) or not any(
            o.lstrip("+~").split("=", 1)[0].split("@", 1)[0] == "trainer" for o in overrides):
        cuda = cuda_available()
    # Hydra's command line takes its overrides as one group of positional arguments: keep them together
    # (flags such as -m or --cfg job may stand before or after them)
    is_override = [("=" in o and not o.startswith("-")) for o in overrides]
    first = is_override.index(True) if any(is_override) else len(overrides)
    flags = [o for o, ov in zip(overrides, is_override, strict=True) if not ov]
    resolved, profile, reason = resolve_trainer([o for o, ov in zip(overrides, is_override, strict=True) if ov],
                                                cuda)
    before = [o for i, o in enumerate(overrides) if i < first and not is_override[i]]
    out = [*before, *resolved, *flags[len(before):]]
    if announce and reason.startswith(f"trainer={TRAINER_AUTO}"):
        other = "trainer=cpu" if profile == "default" else "trainer=default (the GPU profile)"
        quiet = {"--cfg", "-c", "--info", "-i"} & set(overrides)  # their output is the config: keep it clean
        print(f"{reason} -> trainer={profile}; give {other} to choose another profile.", flush=True,
              file=sys.stderr if quiet else sys.stdout)
    return out


def compose_run(overrides: list[str] | tuple[str, ...] = (), root: str | None = None,
                config_name: str = "config") -> DictConfig:
    """Compose run.py's config outside a Hydra app (benchmarks, the GPU check, tests), from the shipped
    configs (:data:`trainbench.CONF_DIR`).

    ``root`` is the project folder the relative paths resolve against (data/, mlruns/, reports/; default:
    the working folder, as in a run); ``paths.root`` is set to it, since ``${hydra:runtime.cwd}`` only
    resolves inside a Hydra run. Its ``conf/`` (the team's own configs) is searched before the shipped ones
    (:mod:`trainbench.config.team`; a file there that is not valid YAML raises ConfigError naming it).
    """
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainbench import CONF_DIR
    from trainbench.config.team import check_team_conf, set_root

    root_path = Path(root) if root else Path.cwd()
    set_root(root_path)
    check_team_conf()
    register_configs(include_models=config_name == "config")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        overrides = size_alias(overrides)
        if config_name == "config":
            overrides = trainer_auto(overrides)
        return compose(config_name, overrides=[f"paths.root={root_path}", *overrides])
