"""A run's writes that the tracking store did not take, kept on local disk until it does.

When the tracking server goes away mid-run, :class:`~trainbench.tracking.writer.RunWriter` keeps
training and appends each write it could not send (metric batches, params, tags, text and file
artifacts, the final status) to a spool folder, in order::

    <tracking.spool_dir>/<run_id>/
        meta.json      tracking URI, experiment and run id (what `trainbench sync` needs)
        ops.jsonl      one write per line, appended and fsync'd (a SIGKILL loses no spooled line)
        sent           how many lines the store has acknowledged (advanced after each one)
        files/         copies of the files of spooled log_artifact writes

Every write is idempotent in MLflow (a metric with the same key, step, timestamp and value is stored
once; params are logged with the same value; tags, artifacts and the status are overwritten), so a
replay that is cut short and started again sends some lines twice but never loses or duplicates data.
A spool that has been sent completely is deleted. One that is left (the server never came back) is
uploaded later with ``trainbench sync <spool_dir or a run's folder>``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainbench.core.errors import SpoolDamaged

log = logging.getLogger(__name__)

OPS = "ops.jsonl"
SENT = "sent"
META = "meta.json"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Spool:
    """The spool folder of one run."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def create(cls, root: str | Path, run_id: str, tracking_uri: str, experiment_id: str) -> Spool:
        folder = Path(root) / run_id
        (folder / "files").mkdir(parents=True, exist_ok=True)
        meta = folder / META
        if not meta.exists():  # written whole or not at all (a full disk must not leave an empty meta.json)
            tmp = folder / (META + ".tmp")
            try:
                with open(tmp, "w") as f:
                    f.write(json.dumps({"tracking_uri": tracking_uri, "experiment_id": experiment_id,
                                        "run_id": run_id, "created": time.time()}, indent=1))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, meta)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
            _fsync_dir(folder)
        return cls(folder)

    @property
    def meta(self) -> dict[str, Any]:
        """meta.json; raises :class:`SpoolDamaged` when it is empty, cut short or not a run's spool."""
        try:
            meta = json.loads((self.folder / META).read_bytes().decode("utf-8", errors="replace"))
            if not isinstance(meta, dict) or not {"tracking_uri", "run_id"} <= meta.keys():
                raise ValueError("tracking_uri or run_id missing")
        except (OSError, ValueError) as e:
            raise SpoolDamaged(f"spool {self.folder} cannot be read: {META} is damaged ({e}). If you know the "
                               f"run, write {{\"tracking_uri\": ..., \"run_id\": ...}} into it and sync again; "
                               f"otherwise move the folder aside.") from None
        return meta

    # -- writing -----------------------------------------------------------------------------------
    def append(self, op: dict[str, Any]) -> None:
        """Add one write at the end; on disk (fsync'd) when this returns."""
        if op["op"] == "log_artifact":  # the file may be a temporary one: keep a copy
            n = sum(1 for _ in (self.folder / "files").iterdir())
            dest = self.folder / "files" / str(n)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(op["path"], dest / Path(op["path"]).name)
            op = {**op, "path": str((dest / Path(op["path"]).name).relative_to(self.folder))}
        line = (json.dumps(op, allow_nan=True) + "\n").encode()
        with open(self.folder / OPS, "ab") as f:
            size = f.seek(0, os.SEEK_END)
            try:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            except OSError:  # a full disk: cut the partial line off, so the spool stays readable
                with contextlib.suppress(OSError):
                    f.truncate(size)
                raise

    # -- reading -----------------------------------------------------------------------------------
    def ops(self) -> list[dict[str, Any]]:
        path = self.folder / OPS
        if not path.exists():
            return []
        out = []
        for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
                if not isinstance(out[-1], dict) or "op" not in out[-1]:
                    out.pop()
                    raise json.JSONDecodeError("not a spooled write", line, 0)
            except json.JSONDecodeError:  # a line cut by a crash mid-write: nothing after it was acked
                log.warning("spool %s: skipping a truncated or damaged line", self.folder)
        return out

    def sent(self) -> int:
        try:
            return int((self.folder / SENT).read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _mark_sent(self, n: int) -> None:
        tmp = self.folder / (SENT + ".tmp")
        tmp.write_text(str(n))
        os.replace(tmp, self.folder / SENT)

    def pending(self) -> int:
        return max(0, len(self.ops()) - self.sent())

    def resolve(self, op: dict[str, Any]) -> dict[str, Any]:
        """``op`` with its file's path inside this spool; :class:`SpoolDamaged` for a write that names a
        file outside the spool's ``files/`` (an absolute path, ``..``, a symbolic link out) or an artifact
        destination outside the run's artifacts: a spool only uploads its own files."""
        for key in ("artifact_file", "artifact_path"):
            dest = op.get(key)
            if dest is not None and (not isinstance(dest, str) or dest.startswith(("/", "\\"))
                                     or ".." in Path(dest).parts or ":" in dest):
                raise SpoolDamaged(f"spool {self.folder}: a {op.get('op')!r} write names the artifact destination "
                                   f"{dest!r}, outside the run's artifacts: refused. Move the folder aside.")
        if op["op"] != "log_artifact":
            return op
        raw = op.get("path")
        files = (self.folder / "files").resolve()
        target = (self.folder / str(raw)).resolve() if isinstance(raw, str) else None
        if target is None or Path(raw).is_absolute() or files not in target.parents or not target.is_file():
            raise SpoolDamaged(f"spool {self.folder}: a log_artifact write names {raw!r}, which is not a file of "
                               f"the spool's own files/ folder: refused (a spool only uploads the copies it "
                               f"made). Move the folder aside.")
        return {**op, "path": str(target)}

    def check_identity(self) -> dict[str, Any]:
        """meta.json, when it is this folder's own: its ``run_id`` is the folder's name (as
        :meth:`create` makes it); raises :class:`SpoolDamaged` otherwise."""
        meta = self.meta
        if str(meta.get("run_id")) != self.folder.name:
            raise SpoolDamaged(f"spool {self.folder}: {META} names run {str(meta.get('run_id'))[:64]!r}, not the "
                               f"folder's own run {self.folder.name!r}: refused (a spool writes only to its own "
                               "run). Move the folder aside.")
        return meta

    def replay(self, send: Any) -> tuple[int, int]:
        """Send the pending writes in order with ``send(op)``; stops at the first failure (raised).

        Returns (sent now, still pending). Deletes the folder when everything has been sent.
        """
        ops = self.ops()
        done = self.sent()
        n0 = done
        for op in ops[done:]:
            send(self.resolve(op))
            done += 1
            self._mark_sent(done)
        left = len(ops) - done
        if left == 0:
            shutil.rmtree(self.folder, ignore_errors=True)
        return done - n0, left


def find_spools(path: str | Path) -> Iterator[Spool]:
    """A run's spool folder, or every run's spool folder under a spool root (a folder that is a symbolic
    link out of ``path`` is not one of them)."""
    p = Path(path)
    if (p / META).exists():
        yield Spool(p)
        return
    if p.is_dir():
        root = p.resolve()
        for child in sorted(p.iterdir()):
            if (child / META).exists() and child.resolve().parent == root:
                yield Spool(child)
