"""The team's own ``conf/`` (trainbench.config.team): Hydra finds search-path plugins only in ``hydra_plugins``."""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin


class TeamConfSearchPath(SearchPathPlugin):
    """``<project folder>/conf`` just before trainbench's packaged configs, for trainbench's apps only (the
    search path of another Hydra app in the same environment does not hold the packaged configs)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from trainbench import CONF_DIR
        from trainbench.config.team import team_conf_dir

        packaged = CONF_DIR.resolve()
        for element in search_path.get_path():
            path = element.path or ""
            if "://" in path and not path.startswith("file://"):
                continue  # pkg://, structured://: not a folder
            if Path(path.removeprefix("file://")).resolve() == packaged:
                team = team_conf_dir()
                if team is not None:
                    search_path.prepend(provider="trainbench-team", path=f"file://{team}",
                                        anchor=SearchPathQuery(provider=element.provider, path=element.path))
                return
