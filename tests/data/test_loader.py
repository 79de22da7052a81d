"""load_market_data: generate on first use, reuse after, check the schema, hash the file; the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.data import data_config
from trainbench.config.run import InstrumentConfig
from trainbench.core.errors import DataError
from trainbench.data.__main__ import compose_data, main
from trainbench.data.dbn import sidecar_path
from trainbench.data.loader import cache_key, load_market_data, sha256_file

SAMPLES = Path(__file__).resolve().parent / "databento"
REPO = Path(__file__).resolve().parents[2]


def test_generates_on_first_use_then_reuses_the_file(tmp_path) -> None:
    md = load_market_data(data_config(), root=tmp_path, data_dir=tmp_path / "data")
    p = tmp_path / "data" / f"t.{cache_key(data_config())}.dbn.zst"  # the configuration's own managed file
    assert md.path == p and p.exists() and md.synthetic and md.kind == "bars"
    assert len(md.bars) == 600 and len(md.features) == 600 and md.bars.symbols == ["6EH4"]
    assert md.sha256 == sha256_file(p) and len(md.sha256) == 64
    inode = p.stat().st_ino  # a regenerated file is a new file (written, then renamed over)
    md2 = load_market_data(data_config(), root=tmp_path, data_dir=tmp_path / "data")
    assert p.stat().st_ino == inode, "an existing file was regenerated"
    assert md2.synthetic and md2.sha256 == md.sha256  # synthetic-ness survives, through the sidecar
    info = md2.info()
    assert info["n_bars"] == 600 and info["synthetic"] is True and info["instruments"] == "6EH4"
    assert sorted(q.name for q in p.parent.iterdir()) == sorted([f".{p.name}.lock", p.name, f"{p.name}.json"])


def test_a_load_reads_the_files_sidecar_once(tmp_path, monkeypatch) -> None:
    import trainbench.data.loader as loader

    load_market_data(data_config(), root=tmp_path, data_dir=tmp_path / "data")  # generated: nothing to read back
    read, real = [], loader.read_sidecar

    def counted(path):
        read.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(loader, "read_sidecar", counted)
    md = load_market_data(data_config(), root=tmp_path, data_dir=tmp_path / "data")
    assert md.synthetic and read.count(md.path.name) == 1  # the file's sidecar, once (before: once more to load it)


def test_stale_generated_file_is_regenerated(tmp_path) -> None:
    load_market_data(data_config(), root=tmp_path, data_dir=tmp_path)
    md = load_market_data(data_config(n_bars=700), root=tmp_path, data_dir=tmp_path)
    assert len(md.bars) == 700
    assert json.loads(sidecar_path(md.path).read_text())["n_bars"] == 700


def test_a_real_file_is_used_as_is_and_not_synthetic(tmp_path) -> None:
    shutil.copy(SAMPLES / "GLBX.MDP3.ohlcv-1m.dbn.zst", tmp_path / "es.dbn.zst")
    md = load_market_data(data_config(path=str(tmp_path / "es.dbn.zst"), synthetic=True), root="/",
                          data_dir=tmp_path)
    assert not md.synthetic and len(md.bars) == 4 and md.bars.symbols == ["ESH1"]
    assert md.bars.tick_size[0] == 0.25  # ESH1 is not among data.instruments: inferred


def test_missing_file_without_synthetic_tells_what_to_do(tmp_path) -> None:
    with pytest.raises(DataError) as e:
        load_market_data(data_config(synthetic=False, name="futures_90d"), root=tmp_path, data_dir=tmp_path)
    msg = str(e.value)
    assert "t.dbn.zst" in msg and "data.path" in msg and "data.synthetic=true" in msg
    assert "python -m trainbench.data download data=futures_90d" in msg


def test_wrong_schema_refused(tmp_path) -> None:
    shutil.copy(SAMPLES / "GLBX.MDP3.ohlcv-1h.dbn.zst", tmp_path / "h.dbn.zst")
    with pytest.raises(DataError, match=r"h\.dbn\.zst: the file's schema is 'ohlcv-1h' but data=t expects 'ohlcv-1m'"):
        load_market_data(data_config(path="h.dbn.zst"), root=tmp_path, data_dir=tmp_path)
    shutil.copy(SAMPLES / "GLBX.MDP3.trades.dbn.zst", tmp_path / "tr.dbn.zst")
    with pytest.raises(DataError, match=r"schema is 'trades'"):
        load_market_data(data_config(path="tr.dbn.zst"), root=tmp_path, data_dir=tmp_path)
    shutil.copy(SAMPLES / "GLBX.MDP3.ohlcv-1m.dbn.zst", tmp_path / "m.dbn.zst")
    with pytest.raises(DataError, match=r"'ohlcv-1m'.*mbp-10"):
        load_market_data(data_config(path="m.dbn.zst", schema="mbp-10"), root=tmp_path, data_dir=tmp_path)


def test_mbp10_config_generates_a_book(tmp_path) -> None:
    cfg = data_config(schema="mbp-10", path="b.dbn.zst", n_bars=500,
               instruments=[InstrumentConfig(symbol="6EH4", tick_size=0.00005, price=1.08)])
    md = load_market_data(cfg, root=tmp_path, data_dir=tmp_path)
    assert md.kind == "book" and len(md.book) == 500 and md.synthetic and md.features is None
    assert md.book.tick_size == 0.00005 and md.info()["n_events"] == 500


def test_loader_accepts_a_composed_omegaconf_config(tmp_path) -> None:
    cfg = compose_data(["data=futures_90d", "data.n_bars=300", f"paths.data_dir={tmp_path}"], REPO)
    assert cfg.path == f"{tmp_path}/futures_90d.dbn.zst"
    md = load_market_data(OmegaConf.structured(cfg), root=REPO, data_dir=tmp_path)
    assert md.bars.symbols == ["ES.c.0", "NQ.c.0", "ZN.c.0", "6E.c.0"] and len(md.bars) == 1200
    assert md.bars.tick_size.tolist() == [0.25, 0.25, 0.015625, 0.00005]
    assert md.features.n_instruments == 4


def test_shipped_data_configs_compose() -> None:
    for name, schema, n in (("6e_ohlcv_1m", "ohlcv-1m", 10_000), ("mbp10", "mbp-10", 10_000),
                            ("futures_90d", "ohlcv-1m", 45_000)):
        cfg = compose_data([f"data={name}"], REPO)
        assert cfg.name == name and cfg.schema == schema and cfg.n_bars == n and cfg.synthetic
        assert cfg.path.endswith(".dbn.zst") and cfg.path.startswith(str(REPO / "data"))
    six_e = compose_data([], REPO)
    assert [(i.symbol, i.tick_size, i.price) for i in six_e.instruments] == [("6EH4", 0.00005, 1.08)]


def test_cli_generate_and_inspect(tmp_path, capsys) -> None:
    out = tmp_path / "g.dbn.zst"
    assert main(["--root", str(REPO), "generate", "data.n_bars=50", "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["records"] == 50 and info["schema"] == "ohlcv-1m" and info["synthetic"]
    assert main(["inspect", str(SAMPLES / "XNAS.ITCH.mbp-10.dbn.zst"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["symbols"] == ["NVDA"]
    assert main(["--root", str(REPO), "generate", "data.n_bars=0", "--out", str(out)]) == 2
    assert "data.n_bars=0 is out of range" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "none.dbn")]) == 2
    assert "file not found" in capsys.readouterr().err
