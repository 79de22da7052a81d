"""No silent data substitution: a data.path the user gave is never created or overwritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.data import data_config
from helpers.procs import child_env
from trainbench.core.errors import DataError
from trainbench.data.loader import ensure_file, load_market_data

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_mistyped_data_path_is_an_error_and_nothing_is_written(tmp_path):
    typo = tmp_path / "typo" / "6e_ohlcv_1n.dbn.zst"
    env = child_env()
    p = subprocess.run([sys.executable, "run.py", "model=dqn", "trainer=quick", f"data.path={typo}",
                        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"paths.mlruns={tmp_path}/mlruns",
                        f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"error: data.path {typo} does not exist;" in p.stderr
    assert not typo.exists() and not typo.parent.exists() and not (tmp_path / "data").exists()


def test_a_user_path_is_created_only_when_synthetic_data_is_asked_for_with_it(tmp_path):
    cfg = data_config(path=str(tmp_path / "mine.dbn.zst"))
    with pytest.raises(DataError, match="does not exist"):
        ensure_file(cfg, tmp_path, tmp_path / "data", user_path=True, explicit_synthetic=False)
    assert not (tmp_path / "mine.dbn.zst").exists()
    path, generated = ensure_file(cfg, tmp_path, tmp_path / "data", user_path=True, explicit_synthetic=True)
    assert generated and path == tmp_path / "mine.dbn.zst" and path.exists()


def test_a_stale_generated_file_the_user_named_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "mine.dbn.zst"
    ensure_file(data_config(path=str(path)), tmp_path, tmp_path / "data", user_path=True,
                explicit_synthetic=True)
    before = path.read_bytes()
    with pytest.raises(DataError, match=r"never overwritten.*") as e:
        ensure_file(data_config(path=str(path), n_bars=700), tmp_path, tmp_path / "data", user_path=True,
                    explicit_synthetic=True)
    assert "n_bars 600 (the config: 700)" in str(e.value)
    assert path.read_bytes() == before
    # outside the managed folder, also when the path came from a config file
    with pytest.raises(DataError, match="never overwritten"):
        ensure_file(data_config(path=str(path), n_bars=700), tmp_path, tmp_path / "data", user_path=False,
                    explicit_synthetic=False)


def test_the_managed_folder_still_generates_and_refreshes_the_default_file(tmp_path):
    """`make run`: the embedded default data is generated on first use into data/, and regenerated when stale."""
    data = tmp_path / "data"
    md = load_market_data(data_config(path=str(data / "t.dbn.zst")), root=tmp_path, data_dir=data)
    assert md.synthetic and len(md.bars) == 600
    md = load_market_data(data_config(path=str(data / "t.dbn.zst"), n_bars=700), root=tmp_path, data_dir=data)
    assert len(md.bars) == 700
