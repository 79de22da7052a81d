"""One managed data file per configuration: configurations that alternate or run at once never regenerate or
overwrite each other's data; concurrent generation of one file is safe; the cache is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.data import data_config
from helpers.procs import REPO, child_env
from trainbench.core.errors import DataError
from trainbench.data.dbn import read_sidecar
from trainbench.data.loader import cache_key, ensure_file, keyed_path, load_market_data

# A child process: load data=t with n_bars=<argv[2]> from the managed folder <argv[1]>, after waiting for the
# start file <argv[3]> (so that concurrent children really start together); prints what it got.
CHILD = """
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from helpers.data import data_config
from trainbench.data.loader import ensure_file, load_market_data
root, n, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
cfg = data_config(path=str(root / "data" / "t.dbn.zst"), n_bars=n)
path, generated = ensure_file(cfg, root, root / "data", user_path=False, explicit_synthetic=False)
md = load_market_data(cfg, root, root / "data")
print(json.dumps({{"path": str(path), "generated": generated, "bars": len(md.bars), "ino": os.stat(path).st_ino,
                  "sha": md.sha256}}))
""".format(tests=str(REPO / "tests"))


def _children(tmp_path: Path, sizes: list[int]) -> list[dict]:
    go = tmp_path / f"go-{len(list(tmp_path.glob('go-*')))}"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(n), str(go)], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in sizes]
    go.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        assert p.returncode == 0, se[-2000:]
        out.append(json.loads(so.strip().splitlines()[-1]))
    return out


@pytest.mark.slow
def test_alternating_configurations_each_keep_their_own_file(tmp_path):
    a, b, a2, b2 = (_children(tmp_path, [n])[0] for n in (600, 700, 600, 700))
    assert a["generated"] and b["generated"] and not a2["generated"] and not b2["generated"]
    assert a["path"] != b["path"] and (a2["path"], a2["ino"], a2["sha"]) == (a["path"], a["ino"], a["sha"])
    assert (b2["path"], b2["ino"]) == (b["path"], b["ino"])  # never regenerated, never overwritten
    assert (a["bars"], b["bars"]) == (600, 700)
    assert not (tmp_path / "data" / "t.dbn.zst").exists()  # the named path is not a shared scratch file
    assert Path(a["path"]).name == f"t.{cache_key(data_config(n_bars=600))}.dbn.zst"


@pytest.mark.slow
def test_concurrent_runs_generate_each_file_once_and_never_clobber_another(tmp_path):
    got = _children(tmp_path, [600, 700, 600, 700, 600])
    for n in (600, 700):
        mine = [g for g in got if g["bars"] == n]
        assert sum(g["generated"] for g in mine) == 1, mine  # the others waited on the lock, then reused it
        assert len({(g["path"], g["ino"], g["sha"]) for g in mine}) == 1
        assert read_sidecar(mine[0]["path"])["n_bars"] == n
    assert not list((tmp_path / "data").glob(".*.tmp"))  # no half-written file left behind


def test_the_cache_keeps_the_most_recently_used_files(tmp_path):
    data = tmp_path / "data"
    named = str(data / "t.dbn.zst")
    paths = {}
    for n in (600, 700, 600, 800):  # 600 used again after 700: 700 is the least recently used
        paths[n], _ = ensure_file(data_config(path=named, n_bars=n, cache_files=2), tmp_path, data,
                                  user_path=False, explicit_synthetic=False)
    assert paths[600].exists() and paths[800].exists() and not paths[700].exists()
    assert not Path(str(paths[700]) + ".json").exists()


def test_a_real_or_matching_file_at_the_named_path_is_used_and_never_replaced(tmp_path):
    data = tmp_path / "data"
    named = data / "t.dbn.zst"
    path, generated = ensure_file(data_config(path=str(named)), tmp_path, data, user_path=True,
                                  explicit_synthetic=True)  # written at the named path on request
    assert path == named and generated
    before = named.read_bytes()
    # from the config (managed): the named file matches, so it is used as it is
    assert ensure_file(data_config(path=str(named)), tmp_path, data, user_path=False,
                       explicit_synthetic=False) == (named, False)
    # other parameters from the config: their own file; the named one stays as it was
    other, _ = ensure_file(data_config(path=str(named), n_bars=700), tmp_path, data, user_path=False,
                           explicit_synthetic=False)
    assert other == keyed_path(named, cache_key(data_config(n_bars=700))) and named.read_bytes() == before
    # the same path given by the user: refused, never replaced by generated data
    with pytest.raises(DataError, match="never overwritten"):
        ensure_file(data_config(path=str(named), n_bars=700), tmp_path, data, user_path=True,
                    explicit_synthetic=True)
    assert named.read_bytes() == before
    assert len(load_market_data(data_config(path=str(named)), tmp_path, data).bars) == 600
