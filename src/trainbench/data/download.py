"""Download a data config's file from Databento: cost first, confirmation, verified read-back, rename.

    export DATABENTO_API_KEY=db-...
    python -m trainbench.data download data=futures_90d [--yes]

Steps: ask ``metadata.get_cost`` and ``metadata.get_billable_size`` for the request, print both, and need a
``y`` (or ``--yes``) when the cost is above ``data.download.max_cost_usd``; then
``timeseries.get_range(..., path=<temp file in the target folder>)``, read the temporary file back with the
project's own validating reader (schema, prices, timestamps, the symbols asked for), and only then rename
it onto the target. An interrupted or bad download never replaces a good file; re-running the command
skips a target that verifies and fetches again one that does not (a truncated file, say). Databento's
``get_range`` has no byte-range resume, so "resuming" means fetching the request again.

The API key is read from the environment only, handed to the client, and never printed, logged or
written (error messages from the client are scrubbed of it). A ``<file>.json`` sidecar records the request
and ``"synthetic": false``, replacing the marker of a synthetic stand-in that lived at the same path.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import databento as db

from trainbench.core.errors import DataError
from trainbench.core.secrets import redact
from trainbench.data.dbn import read_bars, read_book, read_sidecar
from trainbench.data.dbn_write import write_sidecar
from trainbench.data.loader import _get, resolve_path, sha256_file

API_KEY_ENV = "DATABENTO_API_KEY"


@dataclass(frozen=True)
class Request:
    """One ``timeseries.get_range`` request (also the arguments of get_cost / get_billable_size)."""

    dataset: str
    symbols: list[str]
    schema: str
    start: str
    end: str
    stype_in: str

    def kwargs(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (f"{self.dataset} {self.schema} {','.join(self.symbols)} ({self.stype_in}) "
                f"from {self.start} to {self.end}")


def build_request(data_cfg: Any) -> Request:
    """The request a data config describes (``data.download`` plus dataset, schema and instruments)."""
    dl = _get(data_cfg, "download") or {}
    name = _get(data_cfg, "name")
    symbols = list(_get(dl, "symbols") or [str(_get(i, "symbol")) for i in _get(data_cfg, "instruments") or []])
    start, end = _get(dl, "start"), _get(dl, "end")
    if not symbols or not start or not end:
        raise DataError(f"data={name} does not say what to download: set data.download.start, "
                        "data.download.end (YYYY-MM-DD) and data.instruments or data.download.symbols.")
    return Request(dataset=str(_get(data_cfg, "dataset")), symbols=symbols, schema=str(_get(data_cfg, "schema")),
                   start=str(start), end=str(end), stype_in=str(_get(dl, "stype_in", "raw_symbol")))


def verify(path: Path, req: Request) -> str:
    """Read a downloaded file back with the validating reader; a one-line summary, or DataError."""
    if req.schema == "mbp-10":
        book = read_book(path)
        return f"{len(book)} book events of {book.symbol}"
    bars = read_bars(path, schema=req.schema, who="the download request")
    missing = [s for s in req.symbols if s not in bars.symbols]
    if missing and req.stype_in != "instrument_id":
        raise DataError(f"{path}: the download holds {', '.join(bars.symbols)} but not {', '.join(missing)}, "
                        "which were requested; check the symbols and dates in data.download.")
    first, last = (str(bars.ts.min().astype("datetime64[ns]")), str(bars.ts.max().astype("datetime64[ns]")))
    return f"{len(bars)} bars of {', '.join(bars.symbols)} from {first} to {last}"


def _scrub(text: str, key: str) -> str:
    return redact(text, [key]) if key else text


def _network_problem(e: BaseException) -> str | None:
    """What went wrong when the request never reached Databento (DNS, refused, timeout); None otherwise."""
    try:
        import requests
        net_types: tuple[type, ...] = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
    except ImportError:
        net_types = ()
    text = str(e)
    if "NameResolutionError" in text or "Failed to resolve" in text or isinstance(e, socket.gaierror):
        host = text.split("host=", 1)[1].split(",", 1)[0].strip("'\"") if "host=" in text else "the API host"
        return f"the name {host} could not be resolved (no DNS or no network)"
    if isinstance(e, net_types + (ConnectionError, TimeoutError, socket.timeout)):
        return f"the connection failed ({type(e).__name__})"
    return None


def _default_client(key: str) -> Any:
    return db.Historical(key=key)


def download(data_cfg: Any, root: str | Path, out: str | Path | None = None, yes: bool = False,
             force: bool = False, env: Mapping[str, str] | None = None,
             client_factory: Callable[[str], Any] = _default_client,
             confirm: Callable[[str], str] | None = None, echo: Callable[[str], None] = print) -> Path:
    """Download ``data_cfg``'s file to ``out`` (default: its ``data.path``). See the module docstring.

    ``env``, ``client_factory``, ``confirm`` and ``echo`` are the boundaries tests replace (no network).
    """
    env = os.environ if env is None else env
    root = Path(root)
    path = Path(out) if out else resolve_path(data_cfg, root, root / "data")
    req = build_request(data_cfg)
    if path.exists() and not force:
        side = read_sidecar(path)
        synthetic = bool(side and side.get("synthetic"))
        if not synthetic:
            try:
                echo(f"{path} is already there and verifies ({verify(path, req)}); nothing to do "
                     "(--force downloads it again).")
                return path
            except DataError as e:
                echo(f"{path} is there but fails verification, downloading it again: {e}")
    key = env.get(API_KEY_ENV, "")
    if not key:
        raise DataError(f"{API_KEY_ENV} is not set, so nothing can be downloaded. Create a key at "
                        f"https://databento.com/portal/keys, then `export {API_KEY_ENV}=db-...` and run this "
                        "again. To work offline instead, run with data.synthetic=true (a generated stand-in).")
    try:
        client = client_factory(key)
        cost = float(client.metadata.get_cost(**req.kwargs()))
        size = int(client.metadata.get_billable_size(**req.kwargs()))
    except DataError:
        raise
    except Exception as e:  # the client's errors (auth, bad symbol, network) without the key in them
        net = _network_problem(e)
        if net:
            raise DataError(f"cannot reach Databento for the cost query of {req.describe()}: {net}. Check the "
                            "network connection (DNS, proxy, firewall) and try again; nothing was bought.") from None
        raise DataError(f"Databento refused the cost query for {req.describe()}: "
                        f"{_scrub(str(e), key)}") from None
    limit = float(_get(_get(data_cfg, "download") or {}, "max_cost_usd", 5.0))
    echo(f"Databento quote for {req.describe()}: ${cost:.2f} for {size / 1e6:.1f} MB billable "
         f"(confirmation needed above ${limit:.2f}).")
    if cost > limit and not yes:
        if confirm is None:
            if not sys.stdin.isatty():
                raise DataError(f"the download costs ${cost:.2f}, above data.download.max_cost_usd=${limit:.2f}, "
                                "and there is no terminal to ask: re-run with --yes to accept the cost.")
            confirm = input
        if confirm(f"Spend ${cost:.2f} on this download? [y/N] ").strip().lower() not in ("y", "yes"):
            raise DataError("download cancelled: nothing was bought or written.")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.unlink(missing_ok=True)
    try:
        client.timeseries.get_range(**req.kwargs(), path=str(tmp))
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise DataError(f"the download of {req.describe()} failed: {_scrub(str(e), key)}; nothing was "
                        "replaced. Run the command again.") from None
    try:
        summary = verify(tmp, req)
    except DataError as e:
        tmp.unlink(missing_ok=True)
        raise DataError(f"the downloaded file does not verify, so it was discarded ({e}). Run the command "
                        "again; if it repeats, check data.download.") from None
    doc = {"synthetic": False, "source": "databento", "request": req.kwargs(), "quoted_cost_usd": cost,
           "billable_bytes": size, "sha256": sha256_file(tmp)}
    write_sidecar(path, doc)
    os.replace(tmp, path)
    echo(f"wrote {path}: {summary}")
    return path
