"""A team's own configs: the ``conf/`` folder of the project folder (``paths.root``: the working folder unless
``paths.root=`` says otherwise), searched before the packaged configs (:data:`trainbench.CONF_DIR`).

A team adds ``conf/hardware/<card>.yaml``, ``conf/data/<dataset>.yaml``, ``conf/decision/<plan>.yaml`` (any group)
or overrides a packaged file by giving its own of the same name, without touching the installed package:
Hydra finds them through a search-path entry placed before the package's
(:class:`hydra_plugins.trainbench_searchpath.TeamConfSearchPath`), ``--help`` lists them, and what reads the
configs outside Hydra (the GPU catalogue of the analysis and of MFU, the plan's and the data command's data
configs) reads :func:`conf_dirs`, the team's folder first. A file there that is not valid YAML is refused by
:func:`check_team_conf` with one line naming it, before Hydra composes.

The project folder of the command that runs in this process is set by the command line
(:func:`use_root_of`) and by :func:`trainbench.compose.compose_run` (``root``); Hydra's search-path plugins
take no arguments, so it is kept here.
"""

from __future__ import annotations

from pathlib import Path

from trainbench import CONF_DIR
from trainbench.core.errors import ConfigError

#: The folder of a team's own configs, in the project folder.
TEAM_CONF = "conf"

_ROOT: list[Path | None] = [None]  # the project folder of this process's command (None: the working folder)


def set_root(root: str | Path | None) -> None:
    """The project folder whose ``conf/`` is searched from now on (None: the working folder)."""
    _ROOT[0] = None if root is None else Path(root).expanduser().absolute()


def use_root_of(argv: list[str]) -> None:
    """The project folder a command line names: its last ``paths.root=<folder>`` override, else the working
    folder."""
    roots = [a.split("=", 1)[1].strip().strip("'\"") for a in argv
             if a.lstrip("+").split("=", 1)[0] == "paths.root" and "=" in a]
    set_root(roots[-1] if roots and roots[-1] and "${" not in roots[-1] else None)


def project_root() -> Path:
    return _ROOT[0] or Path.cwd()


def team_conf_dir(root: str | Path | None = None) -> Path | None:
    """``<project folder>/conf`` when it is a folder (and not the packaged configs themselves), else None."""
    folder = (Path(root) if root is not None else project_root()) / TEAM_CONF
    try:
        if folder.is_dir() and folder.resolve() != CONF_DIR.resolve():
            return folder.absolute()
    except OSError:
        pass
    return None


def conf_dirs(group: str, root: str | Path | None = None) -> list[Path]:
    """The folders of config group ``group`` (``hardware``, ``data``, ...), the team's first, then the package's
    (a name in both is the team's)."""
    team = team_conf_dir(root)
    return [d / group for d in ([team] if team else []) + [CONF_DIR] if (d / group).is_dir()]


def find_config(group: str, name: str, root: str | Path | None = None) -> Path | None:
    """``<group>/<name>.yaml``, the team's if it has one, else the package's; None when neither has it."""
    return next((d / f"{name}.yaml" for d in conf_dirs(group, root) if (d / f"{name}.yaml").is_file()), None)


def group_names(group: str, root: str | Path | None = None) -> list[str]:
    """The options of config group ``group``, the team's and the package's, sorted."""
    return sorted({p.stem for d in conf_dirs(group, root) for p in d.glob("*.yaml")})


def check_team_conf(root: str | Path | None = None) -> None:
    """Every YAML file of the team's ``conf/`` must parse as a mapping: :class:`ConfigError` naming the first
    one that does not, and where (Hydra would stop on it with a traceback, or later, when it is used)."""
    team = team_conf_dir(root)
    if team is None:
        return
    import yaml

    for path in sorted(team.rglob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            what = getattr(e, "problem", None) or getattr(e, "strerror", None) or str(e).splitlines()[0]
            raise ConfigError(f"{path}: not valid YAML{where}: {what}. Fix the file or move it out of {team} "
                              "(the team's configs, searched before the packaged ones).") from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{path}: a config file holds a mapping of keys (key: value), not a "
                              f"{type(data).__name__}. Fix the file or move it out of {team}.")
