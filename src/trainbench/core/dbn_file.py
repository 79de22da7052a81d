"""Opening a DBN file (``.dbn`` or ``.dbn.zst``) within bounds: the rules the run's reader
(:mod:`trainbench.data.dbn`) and the plan's reader (:func:`trainbench.core.windows.read_layout`) share.

- :func:`regular_file`: only a regular file is opened. A named pipe would block the reader for ever, a
  device (``/dev/zero``) would be read without end, a folder or a socket cannot be read: each is refused at
  once, by its kind, with the key that named it.
- :func:`open_stream`: the file's DBN bytes as a stream, decompressed as they are read when the file is
  zstd. Before any byte is decompressed, the zstd frames are walked (their block headers only, RFC 8878) so
  that a file cut off inside a frame is called *truncated* whatever the position of the cut; the
  decompressed stream then stops with :class:`DataError` as soon as it passes ``max_bytes``, so a small file
  that expands to gigabytes (a decompression bomb) is refused after at most ``max_bytes`` are produced, and
  a caller that checks the DBN header first refuses a non-DBN stream after its first chunk.

Every problem is a :class:`DataError` naming the file, the problem and the fix. The ground floor: numpy,
zstandard and the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from trainbench.core.errors import DataError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Skippable zstd frames: magic 0x184D2A50..0x184D2A5F, then a u32 size, then that many bytes.
_SKIPPABLE_MASK, _SKIPPABLE = 0xFFFFFFF0, 0x184D2A50
#: How much is read or decompressed at a time.
CHUNK = 4 << 20

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))


def truncated(path: Path | str, where: str, fix: str) -> DataError:
    """The one wording of a DBN file that ends too early (``where``: inside which part)."""
    return DataError(f"{path}: the file is truncated: it ends {where}; {fix}.")


def regular_file(path: Path | str, key: str, fix: str) -> int:
    """The size of ``path`` when it is a regular file (a symlink to one counts); :class:`DataError` otherwise:
    missing, or a named pipe, a device, a folder or a socket, named by its kind. Never opens the file (opening
    a named pipe blocks until a writer comes)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise DataError(f"{p}: file not found. {fix}") from None
    except OSError as e:
        raise DataError(f"{p}: cannot read the file ({e.strerror or e}). {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise DataError(f"{p} is {kind}, not a regular file: {key} must name a .dbn or .dbn.zst file (a pipe or "
                        f"a device would be read without end). {fix}")
    return int(st.st_size)


def check_zstd_frames(fh: BinaryIO, size: int, path: Path | str, fix: str) -> None:
    """Walk every zstd frame of ``fh`` (``size`` bytes) by its block headers, decompressing nothing:
    :func:`truncated` when the file ends inside a frame, :class:`DataError` (corrupt) when a header is
    invalid. zstandard's streaming reader stops silently at a cut-off frame, so this is how a truncated
    ``.dbn.zst`` is told from a short one."""
    import zstandard

    pos = 0
    while pos < size:
        fh.seek(pos)
        head = fh.read(18)  # the largest frame header: magic, descriptor, window, dictionary id, content size
        if len(head) < 4:
            raise truncated(path, "inside a zstd frame header", fix)
        magic = int.from_bytes(head[:4], "little")
        if magic & _SKIPPABLE_MASK == _SKIPPABLE:
            if len(head) < 8:
                raise truncated(path, "inside a zstd frame header", fix)
            pos += 8 + int.from_bytes(head[4:8], "little")
            if pos > size:
                raise truncated(path, "inside a skippable zstd frame", fix)
            continue
        if head[:4] != ZSTD_MAGIC:
            raise DataError(f"{path}: the file is corrupt: bytes at offset {pos} are not a zstd frame; {fix}.")
        try:
            header = zstandard.frame_header_size(head)
            checksum = zstandard.get_frame_parameters(head).has_checksum
        except zstandard.ZstdError:
            if len(head) < 18 and pos + len(head) >= size:
                raise truncated(path, "inside a zstd frame header", fix) from None
            raise DataError(f"{path}: the file is corrupt: an invalid zstd frame header at offset {pos}; "
                            f"{fix}.") from None
        pos += header
        while True:
            fh.seek(pos)
            b = fh.read(3)
            if len(b) < 3:
                raise truncated(path, "inside a zstd frame (its stream ends before the frame does)", fix)
            word = int.from_bytes(b, "little")
            last, kind, block = word & 1, (word >> 1) & 3, word >> 3
            if kind == 3:
                raise DataError(f"{path}: the file is corrupt: a reserved zstd block type at offset {pos}; {fix}.")
            pos += 3 + (1 if kind == 1 else block)
            if pos > size:
                raise truncated(path, "inside a zstd frame (its stream ends before the frame does)", fix)
            if last:
                break
        pos += 4 if checksum else 0
        if pos > size:
            raise truncated(path, "inside a zstd frame's checksum", fix)


class _Bounded:
    """A stream that raises :class:`DataError` once more than ``limit`` bytes were read from it."""

    def __init__(self, raw: BinaryIO, limit: int | None, path: Path, what: str, fix: str) -> None:
        self.raw, self.limit, self.path, self.what, self.fix = raw, limit, path, what, fix
        self.count = 0

    def read(self, n: int) -> bytes:
        import zstandard

        try:
            out = self.raw.read(n)
        except zstandard.ZstdError as e:
            raise DataError(f"{self.path}: the file is corrupt: zstd decompression failed ({e}); "
                            f"{self.fix}.") from None
        self.count += len(out)
        if self.limit is not None and self.count > self.limit:
            raise DataError(f"{self.path}: the file {self.what} more than {self.limit / 1e9:.3g} GB, more than "
                            "this machine's free memory allows reading; use a file of a shorter range (or fewer "
                            "instruments), or a machine with more memory.")
        return out

    def read_exact(self, n: int) -> bytes:
        """``n`` bytes, or fewer only at the end of the stream."""
        parts, got = [], 0
        while got < n:
            b = self.read(min(n - got, CHUNK))
            if not b:
                break
            parts.append(b)
            got += len(b)
        return b"".join(parts)


@contextlib.contextmanager
def open_stream(path: Path | str, key: str, where_fix: str, fix: str,
                max_bytes: int | None) -> Iterator[tuple[_Bounded, bool]]:
    """``(stream, compressed)``: the DBN bytes of ``path`` (decompressed as read when it is zstd), from a
    regular file (:func:`regular_file`, whose refusals end with ``where_fix``) whose zstd frames are whole
    (:func:`check_zstd_frames`; a damaged file's message ends with ``fix``); reading past ``max_bytes`` of
    DBN bytes (None: no bound) raises :class:`DataError`."""
    import zstandard

    p = Path(path)
    size = regular_file(p, key, where_fix)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise DataError(f"{p}: cannot read the file ({e.strerror or e}). {where_fix}") from None
    with fh:
        compressed = fh.read(4) == ZSTD_MAGIC
        fh.seek(0)
        if not compressed:
            yield _Bounded(fh, max_bytes, p, "holds", fix), False
            return
        check_zstd_frames(fh, size, p, fix)
        fh.seek(0)
        with zstandard.ZstdDecompressor().stream_reader(fh, read_size=1 << 17, read_across_frames=True,
                                                        closefd=False) as raw:
            yield _Bounded(raw, max_bytes, p, "expands to", fix), True
