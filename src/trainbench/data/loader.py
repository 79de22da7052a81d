"""Config in, :class:`MarketData` out: resolve the file, generate it if allowed, validate, featurise.

**One managed file per configuration.** Synthetic data a data config names itself inside the managed data
folder (``paths.data_dir``) is kept as one file per set of generator parameters: ``<stem>.<digest>.dbn.zst``
beside the path the config names, where ``<digest>`` is the first 12 hex digits of the SHA-256 of the
parameters (:func:`cache_key`). The config's own path is used as it is when it holds a real file or a
generated one with the same parameters, and is never overwritten. So configurations that alternate
(``data.n_bars=2000``, then the default, then 2000 again) or run at the same time each read their own file
and none regenerates another's. The cache is bounded: after a generation, the least recently used generated
files of that folder beyond ``data.cache_files`` are deleted (never one being read or written).

**Concurrency.** Each managed file has a lock file beside it (``.<name>.lock``; ``fcntl.flock``): generation
holds it exclusively (a second job asking for the same file waits, then finds it written and reuses it),
reading holds it shared (eviction skips a file being read), and the file itself is written atomically (a
temporary file in the same folder, then ``os.replace``), so no reader ever sees half a file.

A ``data.path`` the user gave is never created (unless ``data.synthetic=true`` is given with it) or
overwritten: a missing or stale one is an error naming it (see :func:`ensure_file`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from trainbench.config.run import DataConfig
from trainbench.core.errors import DataError
from trainbench.core.progress import phase
from trainbench.data.dbn import BOOK_SCHEMAS, OHLCV_SCHEMAS, read_bars, read_book, read_sidecar, sidecar_path
from trainbench.data.features import compute_features
from trainbench.data.market import MarketData
from trainbench.data.synth import instrument_params, write_mbp10, write_ohlcv

log = logging.getLogger(__name__)

#: A data config: the run's :class:`~trainbench.config.run.DataConfig`, or a mapping with its keys (a script, a
#: test; the keys it leaves out take their defaults here).
DataCfg = DataConfig | Mapping[str, Any]
#: A DBN file's sidecar (:func:`~trainbench.data.dbn.read_sidecar`): None where the file has none.
Sidecar = dict[str, Any] | None


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def resolve_path(data_cfg: DataCfg, root: str | Path, data_dir: str | Path) -> Path:
    """``data.path`` made absolute against ``root``; without a path, ``<data_dir>/<name>.dbn.zst``."""
    raw = _get(data_cfg, "path")
    if not raw:
        return Path(data_dir) / f"{_get(data_cfg, 'name')}.dbn.zst"
    p = Path(str(raw)).expanduser()
    return p if p.is_absolute() else Path(root) / p


def _wanted_params(data_cfg: DataCfg) -> dict[str, Any]:
    """The generator parameters the sidecar of a file generated from this config would hold."""
    schema = _get(data_cfg, "schema", "ohlcv-1m")
    dataset = _get(data_cfg, "dataset", "GLBX.MDP3")
    if schema == "mbp-10":
        inst = (_get(data_cfg, "instruments") or [None])[0]
        return {"schema": schema, "n_events": int(_get(data_cfg, "n_bars")), "seed": int(_get(data_cfg, "seed")),
                "symbol": _get(inst, "symbol"), "instrument_id": int(_get(inst, "instrument_id")),
                "tick_size": float(_get(inst, "tick_size")), "price": float(_get(inst, "price")),
                "start": str(_get(data_cfg, "start")), "dataset": dataset,
                "mean_size": 20.0}
    return {"schema": schema, "n_bars": int(_get(data_cfg, "n_bars")), "start": str(_get(data_cfg, "start")),
            "seed": int(_get(data_cfg, "seed")), "dataset": dataset,
            "instruments": instrument_params(_get(data_cfg, "instruments"))}


def cache_key(data_cfg: DataCfg) -> str:
    """12 hex digits naming the generator parameters of ``data_cfg`` (the same parameters, the same key)."""
    blob = json.dumps(json.loads(json.dumps(_wanted_params(data_cfg), sort_keys=True)), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


_SUFFIXES = (".dbn.zst", ".dbn")
_KEYED = re.compile(r"^.+\.[0-9a-f]{12}\.dbn(\.zst)?$")


def keyed_path(path: Path, key: str) -> Path:
    """``<stem>.<key>.dbn.zst`` beside ``path`` (``<stem>.dbn.zst``): the managed file of one configuration."""
    name = path.name
    suffix = next((x for x in _SUFFIXES if name.endswith(x)), path.suffix)
    stem = name[:len(name) - len(suffix)] if suffix else name
    return path.with_name(f"{stem}.{key}{suffix}")


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """Hold the lock of a managed file (``.<name>.lock`` beside it): exclusive to write it, shared to read it.
    Yields False when ``blocking`` is false and another process holds it. Without ``fcntl`` (Windows) it
    yields True at once: the atomic rename still keeps readers from half a file."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def evict(folder: Path, keep: int, current: Path | None = None) -> list[Path]:
    """Delete the least recently used generated files (``<stem>.<digest>.dbn[.zst]`` with a synthetic sidecar)
    of ``folder`` beyond ``keep``, never ``current`` nor a file another process holds; returns what went."""
    entries = []
    for p in folder.glob("*.dbn*"):
        if _KEYED.match(p.name) and p != current and (read_sidecar(p) or {}).get("synthetic"):
            with contextlib.suppress(OSError):
                entries.append((p.stat().st_mtime, p))
    n_current = 1 if current is not None and current.exists() else 0
    excess = len(entries) + n_current - keep
    gone: list[Path] = []
    for _, p in sorted(entries):
        if excess <= 0:
            break
        with file_lock(p, blocking=False) as mine:
            if not mine:
                continue
            for f in (p, sidecar_path(p)):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
            with contextlib.suppress(FileNotFoundError):
                _lock_path(p).unlink()
        gone.append(p)
        excess -= 1
    if gone:
        log.info("data cache %s: deleted %d least recently used generated file(s) beyond data.cache_files=%d: %s",
                 folder, len(gone), keep, ", ".join(p.name for p in gone))
    return gone


def _matches(side: Sidecar, data_cfg: DataCfg) -> bool:
    """Whether a file's sidecar ``side`` says it was generated from ``data_cfg``'s very parameters."""
    if not (side and side.get("synthetic") and "schema" in side):
        return False
    wanted = _wanted_params(data_cfg)
    return _same({k: side.get(k) for k in wanted}, wanted)


def _managed(data_cfg: DataCfg, named: Path) -> tuple[Path, bool, Sidecar]:
    """The managed file of this configuration: generated (under its lock) when missing or not matching; with
    its sidecar as read (None when generated now)."""
    path = keyed_path(named, cache_key(data_cfg))
    generated = False
    with file_lock(path):  # a second job asking for the same file waits here, then reuses it
        side = read_sidecar(path) if path.exists() else None
        if not (path.exists() and _matches(side, data_cfg)):
            with phase("data generation", f"{_get(data_cfg, 'schema')} into {path}"):
                generate(data_cfg, path)
            generated, side = True, None
    with contextlib.suppress(OSError):
        now = time.time_ns()  # explicit: the kernel's own file times may be a clock tick coarse
        os.utime(path, ns=(now, now))  # least recently used = oldest modification time
    if generated:
        evict(path.parent, int(_get(data_cfg, "cache_files", 8) or 8), current=path)
    return path, generated, side


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Generator parameters equal (JSON round trip so that tuples/lists and int/float compare alike)."""
    return json.loads(json.dumps(a, sort_keys=True)) == json.loads(json.dumps(b, sort_keys=True))


def generate(data_cfg: DataCfg, path: str | Path) -> Path:
    """Write the synthetic file a data config describes (bars or an mbp-10 book) to ``path``."""
    schema = _get(data_cfg, "schema", "ohlcv-1m")
    p = Path(path)
    if schema == "mbp-10":
        w = _wanted_params(data_cfg)
        return write_mbp10(p, n_events=w["n_events"], seed=w["seed"], symbol=w["symbol"],
                           instrument_id=w["instrument_id"], tick_size=w["tick_size"], price=w["price"],
                           start=w["start"], dataset=w["dataset"], mean_size=w["mean_size"])
    if schema != "ohlcv-1m":
        raise DataError(f"{p}: the generator writes ohlcv-1m bars or mbp-10 books, not {schema!r}. "
                        "Set data.schema=ohlcv-1m, or point data.path at a real file.")
    return write_ohlcv(p, list(_get(data_cfg, "instruments")), n_bars=int(_get(data_cfg, "n_bars")),
                       start=str(_get(data_cfg, "start")), seed=int(_get(data_cfg, "seed")),
                       dataset=_get(data_cfg, "dataset", "GLBX.MDP3"), schema=schema)


def _command_line_keys() -> set[str]:
    """Keys set on this Hydra job's command line (``data.path``, ...); empty outside a Hydra job."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError, AttributeError):
        return set()
    return {str(o).split("=", 1)[0].lstrip("+~") for o in overrides}


def _within(path: Path, folder: str | Path) -> bool:
    try:
        path.resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False


def ensure_file(data_cfg: DataCfg, root: str | Path, data_dir: str | Path, *, user_path: bool | None = None,
                explicit_synthetic: bool | None = None) -> tuple[Path, bool]:
    """The data file, generated first when allowed and needed. Returns (path, generated_now).

    Nothing is silently substituted: a ``data.path`` the user gave (``user_path``; default: it is on the
    Hydra command line) is never created, unless ``data.synthetic=true`` is given with it
    (``explicit_synthetic``), and never overwritten; a missing one is an error naming it. A synthetic file a
    data config names itself inside the managed data folder (``data_dir``) is that configuration's own file
    (:func:`keyed_path`), generated when missing; the named file is used only when it is real data or matches.
    """
    path, generated, _ = _ensure(data_cfg, root, data_dir, user_path, explicit_synthetic)
    return path, generated


def _ensure(data_cfg: DataCfg, root: str | Path, data_dir: str | Path, user_path: bool | None,
            explicit_synthetic: bool | None) -> tuple[Path, bool, Sidecar]:
    """:func:`ensure_file`, with the file's sidecar as read there (read once; None when generated now)."""
    path = resolve_path(data_cfg, root, data_dir)
    side = read_sidecar(path) if path.exists() else None
    name = _get(data_cfg, "name")
    synthetic = bool(_get(data_cfg, "synthetic", False))
    keys = _command_line_keys() if user_path is None or explicit_synthetic is None else set()
    user_path = ("data.path" in keys) if user_path is None else user_path
    explicit_synthetic = ("data.synthetic" in keys and synthetic) if explicit_synthetic is None else explicit_synthetic
    if synthetic and not user_path and _within(path, data_dir):
        # the managed folder: the named file when it is real data or generated from these very parameters,
        # else this configuration's own generated file (module docstring); the named file is never replaced
        real = path.exists() and not (side or {}).get("synthetic")
        if not real and not (path.exists() and _matches(side, data_cfg)):
            return _managed(data_cfg, path)
    if path.exists():
        if synthetic and side is not None and side.get("synthetic") and "schema" in side:
            wanted = _wanted_params(data_cfg)
            have = {k: side.get(k) for k in wanted}
            if not _same(have, wanted):  # a file named by the user, or outside the managed folder
                diff = ", ".join(f"{k} {have[k]!r} (the config: {wanted[k]!r})" for k in wanted
                                 if not _same({k: have[k]}, {k: wanted[k]}))
                raise DataError(
                    f"data.path {path} holds synthetic data generated with other parameters than data={name} "
                    f"asks for: {diff}. A file you named is never overwritten: set the config to match it, "
                    f"point data.path at another file, or delete it and regenerate it explicitly with "
                    f"`python -m trainbench.data generate data={name} data.path={path}`.")
        return path, False, side
    if not synthetic:
        raise DataError(
            f"{path}: data file not found for data={name}. Either set data.path=<a .dbn or .dbn.zst file>, "
            f"download it with `python -m trainbench.data download data={name}` (needs DATABENTO_API_KEY), "
            "or generate a synthetic stand-in with data.synthetic=true.")
    if user_path and not explicit_synthetic:
        raise DataError(
            f"data.path {path} does not exist; check the path (relative paths resolve against {root}). To "
            f"train on generated data, drop data.path (data={name} is generated into {data_dir}), or ask for a "
            "synthetic file at this path explicitly with data.synthetic=true.")
    with file_lock(path):
        side = read_sidecar(path) if path.exists() else None  # another job may have written it meanwhile
        if path.exists() and _matches(side, data_cfg):
            return path, False, side
        with phase("data generation", f"{_get(data_cfg, 'schema')} into {path}"):
            return generate(data_cfg, path), True, None


def load_market_data(data_cfg: DataCfg, root: str | Path, data_dir: str | Path,
                     device: torch.device | str = "cpu") -> MarketData:
    """Load the dataset of ``data_cfg`` (a DataConfig or a mapping with its keys) for a run on ``device``.

    Bars come with features (``compute_features``, with ``data.features`` and ``data.train_frac``) already
    on the device; an mbp-10 file gives a :class:`Book`. ``MarketData.synthetic`` is true when this call
    generated the file or its sidecar marks it synthetic. Raises DataError (missing file, wrong schema, the
    reader's validation).
    """
    path, generated, side = _ensure(data_cfg, root, data_dir, None, None)
    lock = file_lock(path, shared=True) if _KEYED.match(path.name) else contextlib.nullcontext(True)
    with lock:  # a managed file is not evicted while it is read
        return _load(data_cfg, path, generated, side, device)


def _load(data_cfg: DataCfg, path: Path, generated: bool, side: Sidecar, device: torch.device | str) -> MarketData:
    """Read the file ``path`` (its sidecar ``side`` as :func:`_ensure` read it) into :class:`MarketData`."""
    expected = str(_get(data_cfg, "schema", "ohlcv-1m"))
    name = str(_get(data_cfg, "name"))
    # models' messages (too few bars, ...) name the file data.path points at, not only the config's dataset
    shown = f"{name}, file {path}" if _get(data_cfg, "path") else name
    synthetic = generated or bool(side and side.get("synthetic"))
    instruments = list(_get(data_cfg, "instruments") or [])
    ticks = {str(_get(i, "symbol")): float(_get(i, "tick_size")) for i in instruments}
    if expected in OHLCV_SCHEMAS:
        bars = read_bars(path, tick_sizes=ticks or None, schema=expected, who=f"data={name}")
        feats = _get(data_cfg, "features")
        features = compute_features(
            bars, vol_window=int(_get(feats, "vol_window", 30)),
            volume_window=int(_get(feats, "volume_window", 60)),
            session_gap_minutes=float(_get(feats, "session_gap_minutes", 30.0)),
            train_frac=float(_get(data_cfg, "train_frac", 0.8)), device=device)
        return MarketData(name=shown, schema=expected, path=path, synthetic=synthetic, sha256=sha256_file(path),
                          bars=bars, features=features)
    if expected in BOOK_SCHEMAS:
        book = read_book(path, who=f"data={name}")
        if book.symbol in ticks:  # the configured tick of this instrument beats the inferred grid
            book.tick_size = ticks[book.symbol]
        return MarketData(name=shown, schema=expected, path=path, synthetic=synthetic, sha256=sha256_file(path),
                          book=book, extra={"train_frac": float(_get(data_cfg, "train_frac", 0.8))})
    raise DataError(f"data.schema={expected!r} (data={name}) is not supported: use one of "
                    f"{', '.join(OHLCV_SCHEMAS + BOOK_SCHEMAS)}.")
