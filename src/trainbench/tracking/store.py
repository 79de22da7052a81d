"""Guards around the local disk a run writes to: the embedded SQLite store, the spool, free space.

* :func:`sqlite_lock` serialises creating and upgrading an embedded SQLite store across processes (MLflow
  creates and migrates a new store in whichever process opens it first; several runs started together on a
  new store otherwise race and can leave a half-applied migration). The lock is ``<store>.lock`` beside it.
* :func:`wait_for_creation` lets a reader (the analysis, a test watching a sweep) wait out a store that
  another process is creating or upgrading under that lock: MLflow would otherwise start creating the
  half-made store's tables a second time, and the health check would call a migration in progress cut short.
* :func:`check_sqlite_health` refuses a store left half-migrated (``_alembic_tmp_*`` tables of a schema
  upgrade that was cut short, still there once the file has been quiet for :data:`MIGRATION_QUIET_S`: a
  program that migrates without the lock is waited for), saying how to recover, and one that is not a database (damaged); a store
  that another process keeps locked past :data:`SQLITE_BUSY_WAIT_S` is *locked*, never called damaged
  (:func:`locked_message` names the processes that hold it open, where ``/proc`` tells).
* :func:`check_writable` makes an unwritable store folder fail in milliseconds, not after minutes of retries.
* :func:`check_free_space` refuses to start a run when a folder it writes to has less than
  ``tracking.min_free_mb`` free; :class:`DiskReserve` keeps a little space aside while the run is going so
  that a run whose disk fills up can still end properly (:class:`~trainbench.core.errors.DiskFull`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from trainbench.core.errors import StoreNotFound, StoreProblem

log = logging.getLogger(__name__)

#: Space kept aside per file system while a run is going, released when the disk fills up, so that the
#: last buffered epochs, the outcome and the final status can still be written.
RESERVE_BYTES = 2 * 2**20
#: How long a run waits for another process that is creating or upgrading the same SQLite store.
LOCK_TIMEOUT_S = 300.0
#: How long the store check waits for another process's write lock on the SQLite file before it says so,
#: when the caller does not say (the tracking config's ``timeout_s``).
SQLITE_BUSY_WAIT_S = 30.0
#: How long a store with a schema upgrade's temporary tables must stay unchanged before the upgrade is called
#: cut short (another program may be migrating it without the lock).
MIGRATION_QUIET_S = 3.0

_DISK_FULL_TEXT = ("database or disk is full", "no space left on device", "disk quota exceeded")


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC / EDQUOT, directly or as SQLite's "database or disk is full" through SQLAlchemy and MLflow."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(s in str(cur).lower() for s in _DISK_FULL_TEXT):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def disk_full_reason(e: BaseException) -> str:
    """The words of a full disk inside ``e`` (not SQLAlchemy's autoflush note around them)."""
    cur: BaseException | None = e
    while cur is not None:
        if isinstance(cur, OSError) and cur.errno in (errno.ENOSPC, errno.EDQUOT):
            return cur.strerror or "no space left on device"
        cur = cur.__cause__ or cur.__context__
    low = str(e).lower()
    return next((s for s in _DISK_FULL_TEXT if s in low), "no space left on device")


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` URI (None for other stores and in-memory SQLite)."""
    if not uri.startswith("sqlite:///"):
        return None
    p = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if p in ("", ":memory:") else Path(p)


def check_exists(uri: str) -> None:
    """A reader's store must be there already (MLflow would create an empty one): :class:`StoreNotFound`.
    Read without MLflow, so that an analysis of a store that is not there says so at once."""
    path = sqlite_path(uri)
    if path is not None:
        missing = not path.is_file()
    elif uri.startswith("file:") or "://" not in uri:  # a file store (older MLflow)
        path = Path(uri.removeprefix("file:"))
        missing = not path.exists()
    else:
        return
    if missing:
        raise StoreNotFound(f"no MLflow store at {path} (tracking.uri={uri})")


def check_writable(folder: Path, what: str, fix: str) -> None:
    """Create ``folder`` if needed and prove that a file can be written in it (fails in milliseconds)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".trainbench-write-test-"):
            pass
    except OSError as e:
        if is_disk_full(e):
            raise StoreProblem(f"the disk holding {what} {folder} is full ({e.strerror}): free space there "
                               f"or {fix}.") from None
        raise StoreProblem(f"{what} {folder} is not writable ({e.strerror or e}): {fix}.") from None


def check_sqlite_writable(path: Path) -> None:
    fix = ("fix its permissions or point tracking.uri at a writable file "
           "(tracking.uri=sqlite:////some/writable/folder/mlflow.db)")
    check_writable(path.parent, "the folder of the MLflow store", fix)
    if path.exists():
        try:
            with open(path, "r+b"):
                pass
        except OSError as e:
            raise StoreProblem(f"the MLflow store {path} is not writable ({e.strerror or e}): {fix}.") from None


def wait_for_creation(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> None:
    """Wait (up to ``timeout_s``) while another process creates, upgrades or opens the store under
    ``<store>.lock`` (writers hold it for that only, never while they train); return at once for a missing
    store, or one whose folder cannot take the lock file (a read-only share: nobody creates a store there).
    A store still unfinished once the lock is free was cut short: :func:`check_sqlite_health` says how to
    recover."""
    if not path.exists():
        return
    try:
        with sqlite_lock(path, timeout_s):  # free once the writer is done
            pass
    except OSError as e:
        log.debug("cannot take %s.lock to wait for the store's creation (%s); reading it as it is", path, e)


def check_sqlite_health(path: Path, wait_s: float = SQLITE_BUSY_WAIT_S) -> None:
    """Refuse a store left half-migrated by an interrupted schema upgrade, with the commands that fix it, and
    one that is not a database; a store another process keeps locked for ``wait_s`` is called locked."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        tables = _tables(path, wait_s)
        if _leftovers(tables) and _settled(path, wait_s):  # another program (MLflow's UI, client) was migrating
            tables = _tables(path, wait_s)
    except sqlite3.OperationalError as e:
        if is_locked(e):
            raise StoreProblem(locked_message(path, wait_s)) from None
        raise StoreProblem(f"{path} is not a readable SQLite database ({e}): it is damaged or not an MLflow "
                           f"store. Move it aside and point tracking.uri at a new file (the runs it held are "
                           f"lost unless you have a backup).") from None
    except sqlite3.DatabaseError as e:
        raise StoreProblem(f"{path} is not a readable SQLite database ({e}): it is damaged or not an MLflow "
                           f"store. Move it aside and point tracking.uri at a new file (the runs it held are "
                           f"lost unless you have a backup).") from None
    leftovers = _leftovers(tables)
    if not leftovers:
        _check_schema_revision(path, tables)
        return
    stmts = []
    for t in leftovers:
        orig = t[len("_alembic_tmp_"):]
        stmts.append(f"DROP TABLE {t}" if orig in tables else f"ALTER TABLE {t} RENAME TO {orig}")
    raise StoreProblem(
        f"the MLflow store {path} was left half-migrated: table(s) {', '.join(leftovers)} remain from a schema "
        f"upgrade that was cut short (the file was left unchanged for {MIGRATION_QUIET_S:.0f} s; for example two "
        f"programs created the store at once). Recover: back it up "
        f"(cp {path} {path}.bak), then run `sqlite3 {path} \"{'; '.join(stmts)};\"` and "
        f"`mlflow db upgrade sqlite:///{path}`. A store that holds no runs yet can simply be deleted.")


def _leftovers(tables: set[str]) -> list[str]:
    return sorted(t for t in tables if t.startswith("_alembic_tmp_"))


def _tables(path: Path, wait_s: float) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=wait_s)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def _settled(path: Path, limit_s: float, quiet_s: float = MIGRATION_QUIET_S, poll_s: float = 0.1) -> bool:
    """Wait until the SQLite file (with its journal or WAL) has not changed for ``quiet_s``, at most
    ``limit_s``; True if it changed meanwhile. ``_alembic_tmp_*`` tables are also there, briefly, while a
    program that does not take ``<store>.lock`` (MLflow's UI or client opening a new store) migrates it:
    only leftovers that stay once the file is quiet were cut short."""
    def signature() -> tuple:
        out = []
        for p in (path, Path(f"{path}-journal"), Path(f"{path}-wal")):
            try:
                st = p.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    start = last_change = time.monotonic()
    sig, changed = signature(), False
    while time.monotonic() - last_change < quiet_s and time.monotonic() - start < limit_s:
        time.sleep(poll_s)
        if (now := signature()) != sig:
            sig, changed, last_change = now, True, time.monotonic()
    return changed


def is_locked(e: BaseException) -> bool:
    """SQLite's "database is locked" / "busy" (another connection holds the lock), as sqlite3 or MLflow says it."""
    low = str(e).lower()
    return any(t in low for t in ("database is locked", "database table is locked", "database is busy",
                                  "sqlite_busy"))


def lock_holders(path: Path, limit: int = 3) -> list[str]:
    """``pid N (name)`` of other processes that hold ``path`` (or its journal or WAL) open, from ``/proc``
    (Linux; empty elsewhere or where another user's processes cannot be read). Names only, never command
    lines (a command line can hold a password)."""
    try:
        real = os.path.realpath(path)
    except OSError:
        return []
    wanted = {real, real + "-journal", real + "-wal", real + "-shm"}
    found: list[str] = []
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit() and int(d) != os.getpid()]
    except OSError:
        return []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in fds):
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                found.append(f"pid {pid} ({name})")
        except OSError:
            continue
        if len(found) >= limit:
            break
    return found


def locked_message(path: Path, waited_s: float | None = None) -> str:
    """One line for a SQLite store that another process keeps locked: who, if ``/proc`` tells, and to wait."""
    holders = lock_holders(path)
    who = f" ({', '.join(holders)} holds it open)" if holders else ""
    waited = f" for {waited_s:.0f} s" if waited_s else ""
    return (f"the MLflow store {path} is locked by another process{who}, which kept it locked{waited} (a long "
            f"write, or a program paused in the middle of one). Nothing is damaged: wait for that process to "
            f"finish (or stop it), then run again.")


def _check_schema_revision(path: Path, tables: set[str]) -> None:
    """A schema revision this MLflow does not know (a newer MLflow wrote the store): say which way to go.
    An older revision is left to MLflow, whose message says to run `mlflow db upgrade`."""
    if "alembic_version" not in tables:
        return
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        revs = [r[0] for r in con.execute("SELECT version_num FROM alembic_version")]
    finally:
        con.close()
    if not revs:
        return
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
    known = {r.revision for r in script.walk_revisions()}
    unknown = [r for r in revs if r not in known]
    if unknown:
        import mlflow

        raise StoreProblem(f"the MLflow store {path} has schema revision {unknown[0]}, which MLflow "
                           f"{mlflow.__version__} does not know: a newer MLflow wrote it. Upgrade MLflow "
                           f"(pip install -U mlflow) or point tracking.uri at another store.")


@contextlib.contextmanager
def sqlite_lock(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``<store>.lock`` (an advisory file lock beside the SQLite file) while opening the store."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout:
        raise StoreProblem(f"another process has held {path}.lock for {timeout_s:.0f} s while creating or "
                           f"upgrading the store; if none is running, delete the lock file.") from None
    try:
        yield
    finally:
        lock.release()


def check_free_space(folders: list[Path], min_free_mb: float) -> None:
    """Refuse to start when a folder the run writes to has less than ``min_free_mb`` MB free."""
    if min_free_mb <= 0:
        return
    for folder in folders:
        probe = _existing(folder)
        free_mb = shutil.disk_usage(probe).free / 2**20
        if free_mb < min_free_mb:
            raise StoreProblem(f"only {free_mb:.1f} MB free on the disk holding {folder}, below "
                               f"tracking.min_free_mb={min_free_mb:g}: free some space there (or lower "
                               f"tracking.min_free_mb) before starting a run.")


def _existing(p: Path) -> Path:
    p = Path(p).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


class DiskReserve:
    """A few MB of zeros per file system the run writes to, deleted when the disk fills up (or at the end)."""

    def __init__(self, folders: list[Path], tag: str, size: int = RESERVE_BYTES) -> None:
        self.files: list[Path] = []
        self._made: list[Path] = []
        devs: set[int] = set()
        for folder in folders:
            f: Path | None = None
            try:
                dev = _existing(folder).stat().st_dev
                if dev in devs:  # one reserve per file system
                    continue
                if not folder.exists():
                    folder.mkdir(parents=True)
                    self._made.append(folder)
                f = folder / f".trainbench-reserve-{tag}"
                with open(f, "wb") as fh:
                    fh.write(b"\0" * size)
                    fh.flush()
                    os.fsync(fh.fileno())
                devs.add(dev)
                self.files.append(f)
            except OSError as e:  # no reserve is no reason not to train
                log.debug("no disk reserve in %s: %s", folder, e)
                if f is not None:
                    with contextlib.suppress(OSError):
                        f.unlink()

    def release(self) -> None:
        for f in self.files:
            with contextlib.suppress(OSError):
                f.unlink()
        for d in self._made:  # a folder made only for the reserve goes again (rmdir: only when empty)
            with contextlib.suppress(OSError):
                d.rmdir()
        self.files, self._made = [], []


def _not_disk_full(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return not (exc is not None and is_disk_full(exc))


def quiet_disk_full_logs() -> None:
    """MLflow's SQLAlchemy store logs a full disk with a traceback (and SQLAlchemy's autoflush note) before
    it raises; the run reports it in one line instead (DiskFull), so drop those records."""
    lg = logging.getLogger("mlflow.store.db.utils")
    if _not_disk_full not in lg.filters:
        lg.addFilter(_not_disk_full)
