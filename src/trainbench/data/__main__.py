"""Data command line: ``python -m trainbench.data {generate,inspect,download} ...``.

    python -m trainbench.data generate                          the default dataset (data=6e_ohlcv_1m)
    python -m trainbench.data generate data=futures_90d data.n_bars=2000 --out /tmp/f.dbn.zst
    python -m trainbench.data inspect data/6e_ohlcv_1m.dbn.zst  what a DBN file holds
    python -m trainbench.data download data=futures_90d         buy the real file (DATABENTO_API_KEY)

Data configs are the shipped ``conf/data/<name>.yaml`` (:data:`trainbench.CONF_DIR`), checked against
``DataConfig``; ``data.<key>=<value>`` arguments override them as on run.py's command line. Relative paths
(``data/``) resolve against ``--root`` (default: the working folder), as a run resolves them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from trainbench.config.run import DataConfig
from trainbench.config.shared import check_ranges
from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_OK, ConfigError, DataError


def project_root(root: str | Path | None) -> Path:
    """The project folder relative data paths resolve against: ``--root``, else the working folder."""
    return Path(root).resolve() if root is not None else Path.cwd()


def compose_data(overrides: list[str], root: Path) -> DataConfig:
    """``data=<name>`` plus ``data.<key>=<value>`` overrides -> a validated, resolved DataConfig."""
    name = "6e_ohlcv_1m"
    dotlist = []
    for ov in overrides:
        key, sep, value = ov.partition("=")
        if not sep:
            raise DataError(f"argument {ov!r} is not an override: use data=<name> or data.<key>=<value>.")
        if key == "data":
            name = value
        elif key.startswith(("data.", "paths.")):
            dotlist.append(ov)
        else:
            raise DataError(f"override {ov!r}: only data=..., data.<key>=... and paths.<key>=... apply here.")
    from trainbench.config.team import find_config, group_names

    path = find_config("data", name, root)  # the team's conf/data first, then the package's
    if path is None:
        known = group_names("data", root)
        raise DataError(f"data={name}: no such data config (conf/data/{name}.yaml, in {root} or the package); "
                        f"known: {', '.join(known) or 'none'}.")
    node = OmegaConf.load(path)
    node.pop("defaults", None)
    top = OmegaConf.create({"paths": {"root": str(root), "data_dir": "${paths.root}/data"},
                            "data": OmegaConf.merge(OmegaConf.structured(DataConfig), node)})
    try:
        top = OmegaConf.merge(top, OmegaConf.from_dotlist(dotlist))
        OmegaConf.resolve(top)
        data = OmegaConf.to_object(top.data)
    except Exception as e:  # omegaconf's errors name the key
        raise DataError(f"data={name}: {e}") from e
    check_ranges(data, "data.")
    return data  # type: ignore[return-value]


# Each command imports the modules it uses: ``--help`` and a bad override load neither databento (dbn.py)
# nor torch (loader.py, download.py), and ``inspect`` does not load torch.


def _cmd_generate(args: argparse.Namespace) -> int:
    from trainbench.data.dbn import inspect
    from trainbench.data.loader import generate, resolve_path

    root = project_root(args.root)
    cfg = compose_data(args.overrides, root)
    out = Path(args.out) if args.out else resolve_path(cfg, root, root / "data")
    if out.exists() and not args.force:
        print(f"{out} exists; keeping it (use --force to write it again).")
    else:
        generate(cfg, out)
        print(f"wrote {out}")
    _print(inspect(out), args.json)
    return EXIT_OK


def _cmd_inspect(args: argparse.Namespace) -> int:
    from trainbench.data.dbn import inspect

    for p in args.paths:
        _print(inspect(p), args.json)
    return EXIT_OK


def _cmd_download(args: argparse.Namespace) -> int:
    from trainbench.data.download import download

    root = project_root(args.root)
    cfg = compose_data(args.overrides, root)
    download(cfg, root=root, out=args.out, yes=args.yes, force=args.force)
    return EXIT_OK


def _print(info: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(info))
        return
    for k, v in info.items():
        print(f"  {k:15s} {', '.join(map(str, v)) if isinstance(v, list) else v}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m trainbench.data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="project folder data/ resolves against (default: the working folder)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the synthetic DBN file of a data config")
    g.add_argument("overrides", nargs="*", help="data=<name> (default 6e_ohlcv_1m), data.<key>=<value>")
    g.add_argument("--out", default=None, help="output file (default: the config's data.path)")
    g.add_argument("--force", action="store_true", help="write even if the file exists")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    i = sub.add_parser("inspect", help="print what DBN files hold (schema, symbols, records, dates)")
    i.add_argument("paths", nargs="+", help=".dbn or .dbn.zst files")
    i.add_argument("--json", action="store_true", help="one JSON object per file")
    d = sub.add_parser("download", help="download a data config's file from Databento (cost shown first)")
    d.add_argument("overrides", nargs="*", help="data=<name> (e.g. futures_90d), data.<key>=<value>")
    d.add_argument("--yes", action="store_true", help="do not ask before spending above the cost limit")
    d.add_argument("--out", default=None, help="output file (default: the config's data.path)")
    d.add_argument("--force", action="store_true", help="download even if a valid file is already there")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"generate": _cmd_generate, "inspect": _cmd_inspect, "download": _cmd_download}[args.cmd]
    try:
        return handler(args)
    except (DataError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
