"""A DBN file is opened within bounds (core/dbn_file.py), by the plan's reader (core/windows.read_layout) and
the run's reader (data/dbn.py) alike: a named pipe or a device is refused at once by its kind, a truncated
``.dbn.zst`` is called truncated, a small zstd file that expands to gigabytes is refused after its first chunk
(its header is checked first) or at the memory bound, never decompressed whole."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import zstandard

from helpers.data import FOUR
from trainbench.core.errors import DataError
from trainbench.core.windows import read_layout
from trainbench.data import dbn
from trainbench.data.synth import write_ohlcv

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ohlcv(tmp_path_factory.mktemp("f") / "four.dbn.zst", FOUR, n_bars=3000, start="2024-01-04", seed=1)


def _bomb(path: Path, gib: float, prefix: bytes = b"") -> Path:
    """A zstd file of repeated frames of zeros: ``gib`` GiB decompressed from some tens of KB."""
    frame = zstandard.ZstdCompressor(level=3).compress(b"\0" * (64 << 20))
    with open(path, "wb") as f:
        if prefix:
            f.write(zstandard.ZstdCompressor().compress(prefix))
        for _ in range(int(gib * 16)):
            f.write(frame)
    return path


def _call_with_deadline(fn, *args, seconds: float = 20.0):
    """``fn(*args)`` in a thread: (returned or raised, True) or (None, False) when it is still running."""
    out: list = []

    def target():
        try:
            out.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    return (out[0] if out else None), not t.is_alive()


@pytest.mark.parametrize("reader", [read_layout, dbn.read_bars], ids=["plan", "run"])
def test_a_named_pipe_is_refused_at_once_never_opened(tmp_path, reader):
    fifo = tmp_path / "bars.dbn"
    os.mkfifo(fifo)
    try:
        result, finished = _call_with_deadline(reader, fifo)
        assert finished, "the reader blocked on a named pipe"
        assert isinstance(result, DataError) and "is a named pipe, not a regular file" in str(result), result
        assert len(str(result).splitlines()) == 1
    finally:
        # a reader that did open it (today's code) is released by a writer that comes and goes
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if not finished else None
        if fd is not None:
            os.close(fd)


@pytest.mark.parametrize("reader,key", [(read_layout, "decision.plan_data"), (dbn.read_bars, "data.path")],
                         ids=["plan", "run"])
def test_devices_folders_and_sockets_are_refused_by_their_kind(tmp_path, reader, key):
    result, finished = _call_with_deadline(reader, Path("/dev/zero"), seconds=20)
    assert finished and isinstance(result, DataError), result
    assert "/dev/zero is a character device, not a regular file" in str(result) and key in str(result)
    with pytest.raises(DataError, match="is a folder, not a regular file"):
        reader(tmp_path)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.dbn"))
        with pytest.raises(DataError, match="is a socket"):
            reader(tmp_path / "s.dbn")
    finally:
        sock.close()


@pytest.mark.parametrize("keep", [0.3, 0.999])
def test_a_truncated_dbn_zst_is_called_truncated_by_both_readers(tmp_path, good, keep):
    cut = tmp_path / "cut.dbn.zst"
    data = good.read_bytes()
    cut.write_bytes(data[: int(len(data) * keep)])
    for reader in (read_layout, dbn.read_bars):
        with pytest.raises(DataError, match=r"cut\.dbn\.zst: the file is truncated: it ends inside a zstd frame"):
            reader(cut)


def test_a_truncated_plain_dbn_is_called_truncated(tmp_path, good):
    raw = zstandard.ZstdDecompressor().stream_reader(good.read_bytes()).read()
    cut = tmp_path / "cut.dbn"
    cut.write_bytes(raw[:-7])
    with pytest.raises(DataError, match=r"cut\.dbn: the file is truncated: it ends inside a record"):
        read_layout(cut)
    with pytest.raises(DataError, match=r"cut\.dbn: the file is truncated"):
        dbn.read_bars(cut)
    # a metadata length of 4 GB in the header: skipped as a stream, then called truncated; nothing is held
    forged = tmp_path / "meta.dbn"
    forged.write_bytes(raw[:4] + (2**32 - 1).to_bytes(4, "little") + raw[8:])
    with pytest.raises(DataError, match="truncated: it ends inside its metadata"):
        read_layout(forged)


# The peak is the process image's own high-water mark (VmHWM, reset by exec): ru_maxrss is not, on Linux it
# keeps the forking parent's size (a pytest process of gigabytes in a full suite run).
_PEAK = """
import re, sys
from trainbench.core.errors import DataError
from trainbench.core.windows import read_layout
from trainbench.data.dbn import read_bars
reader = read_layout if sys.argv[2] == "plan" else read_bars
try:
    reader(sys.argv[1])
    print("read")
except DataError as e:
    print(e)
with open("/proc/self/status") as f:
    print(int(re.search(r"VmHWM:\\s*(\\d+) kB", f.read()).group(1)) // 1024)
"""


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["plan", "run"])
def test_a_decompression_bomb_is_refused_after_its_first_chunk(tmp_path, reader):
    """64 KB that expand to 1 GiB of zeros: not DBN, which the first chunk shows; the process stays small (the
    whole file decompressed would hold at least 1 GiB)."""
    bomb = _bomb(tmp_path / "bomb.dbn.zst", 1)
    assert bomb.stat().st_size < 200_000
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run([sys.executable, "-c", _PEAK, str(bomb), reader], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    message, peak_mb = p.stdout.strip().splitlines()
    assert "not a DBN" in message, message
    assert int(peak_mb) < 600, f"peak resident memory {peak_mb} MB"


def test_a_large_stream_stops_at_the_memory_bound(tmp_path, good, monkeypatch):
    """A valid DBN header followed by more than the memory bound allows: refused when the bound is passed."""
    raw = zstandard.ZstdDecompressor().stream_reader(good.read_bytes()).read()
    with pytest.raises(DataError, match=r"holds more than 5,000 records"):
        read_layout(good, max_records=5_000)
    assert read_layout(good, max_records=12_000)[1].size == 12_000
    monkeypatch.setattr(dbn, "host_memory_available", lambda: 3 * (len(raw) // 2))
    with pytest.raises(DataError, match=r"four\.dbn\.zst: the file expands to more than .* GB, more than this "
                                        r"machine's free memory"):
        dbn.read_bars(good)
    # a header, then zeros: a 0-byte record, refused on the first chunk
    zeros = _bomb(tmp_path / "zeros.dbn.zst", 0.25, prefix=raw[: 8 + int.from_bytes(raw[4:8], "little")])
    with pytest.raises(DataError, match="a record of 0 bytes"):
        read_layout(zeros)


def test_a_whole_file_reads_the_same_through_the_bounded_stream(tmp_path, good):
    """Plain and compressed, in chunks: the records the validating reader reads."""
    schema, ts, iid = read_layout(good)
    plain = tmp_path / "four.dbn"
    plain.write_bytes(zstandard.ZstdDecompressor().stream_reader(good.read_bytes()).read())
    schema2, ts2, iid2 = read_layout(plain)
    assert schema == schema2 == "ohlcv-1m" and np.array_equal(ts, ts2) and np.array_equal(iid, iid2)
    assert len(dbn.read_bars(plain)) == len(dbn.read_bars(good)) == ts.size == 12_000
    # several frames (a file written in pieces) read across
    two = tmp_path / "two.dbn.zst"
    half = len(plain.read_bytes()) // 2
    c = zstandard.ZstdCompressor()
    two.write_bytes(c.compress(plain.read_bytes()[:half]) + c.compress(plain.read_bytes()[half:]))
    assert np.array_equal(read_layout(two)[1], ts)
