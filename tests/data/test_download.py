"""The Databento download, tested through the client's boundary with a fake client (no network)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainbench.core.errors import DataError
from trainbench.data import dbn_write, synth
from trainbench.data.__main__ import compose_data
from trainbench.data.dbn import sidecar_path
from trainbench.data.download import build_request, download
from trainbench.data.loader import load_market_data

REPO = Path(__file__).resolve().parents[2]
KEY = "db-SECRETKEY123"


class FakeClient:
    """Records every call; get_range writes a synthetic file with the requested symbols (or a broken one)."""

    def __init__(self, cost: float = 1.9, truncate: bool = False, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.truncate = truncate
        self.fail = fail
        self.metadata = SimpleNamespace(get_cost=self._rec("get_cost", cost),
                                        get_billable_size=self._rec("get_billable_size", 12_345_678))
        self.timeseries = SimpleNamespace(get_range=self._get_range)

    def _rec(self, name, value):
        def call(**kw):
            self.calls.append((name, kw))
            if self.fail is not None:
                raise self.fail
            return value
        return call

    def _get_range(self, **kw):
        self.calls.append(("get_range", kw))
        inst = [{"symbol": s, "instrument_id": i + 1, "tick_size": 0.25, "price": 100.0 + i, "daily_vol": 0.01,
                 "volume": 100} for i, s in enumerate(kw["symbols"])]
        p = dbn_write.write_records(kw["path"], dbn_write.bars_to_records(synth.generate_bars(inst, 300)), "ohlcv-1m",
                                {d["symbol"]: d["instrument_id"] for d in inst}, kw["dataset"])
        if self.truncate:
            p.write_bytes(p.read_bytes()[:-100])


@pytest.fixture
def cfg(tmp_path):
    return compose_data(["data=futures_90d", f"paths.data_dir={tmp_path}"], REPO)


def _run(cfg, tmp_path, client, **kw):
    made = []

    def factory(key):
        made.append(key)
        return client
    out: list[str] = []
    path = download(cfg, root=tmp_path, env={"DATABENTO_API_KEY": KEY}, client_factory=factory,
                    echo=out.append, **kw)
    return path, out, made


def test_request_is_built_from_the_config(cfg) -> None:
    req = build_request(cfg)
    assert req.kwargs() == {"dataset": "GLBX.MDP3", "symbols": ["ES.c.0", "NQ.c.0", "ZN.c.0", "6E.c.0"],
                            "schema": "ohlcv-1m", "start": "2024-01-02", "end": "2024-04-01",
                            "stype_in": "continuous"}


def test_refuses_without_a_key_saying_what_to_set(cfg, tmp_path) -> None:
    with pytest.raises(DataError, match=r"DATABENTO_API_KEY is not set.*export DATABENTO_API_KEY="):
        download(cfg, root=tmp_path, env={}, client_factory=lambda k: pytest.fail("no client without a key"))


def test_cost_first_then_download_verify_and_rename(cfg, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    client = FakeClient(cost=1.9)
    path, out, made = _run(cfg, tmp_path, client)
    assert made == [KEY]
    names = [c[0] for c in client.calls]
    assert names == ["get_cost", "get_billable_size", "get_range"]
    want = build_request(cfg).kwargs()
    assert client.calls[0][1] == want and client.calls[1][1] == want
    got = client.calls[2][1]
    assert Path(got.pop("path")).parent == tmp_path and got == want  # a temp file in the target folder
    assert path == tmp_path / "futures_90d.dbn.zst" and path.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
    assert "$1.90" in out[0] and "12.3 MB" in out[0]
    assert out[-1].startswith(f"wrote {path}: 1200 bars of ES.c.0, NQ.c.0, ZN.c.0, 6E.c.0")
    side = json.loads(sidecar_path(path).read_text())
    assert side["synthetic"] is False and side["request"] == want
    text = "\n".join(out) + caplog.text + sidecar_path(path).read_text()
    assert KEY not in text and "SECRET" not in text
    # the loader now uses the real file as it is, and says it is not synthetic
    md = load_market_data(cfg, root=tmp_path, data_dir=tmp_path)
    assert not md.synthetic and len(md.bars) == 1200


def test_above_the_limit_needs_confirmation(cfg, tmp_path) -> None:
    client = FakeClient(cost=50.0)
    with pytest.raises(DataError, match="cancelled"):
        _run(cfg, tmp_path, client, confirm=lambda prompt: "n")
    assert [c[0] for c in client.calls] == ["get_cost", "get_billable_size"]  # nothing bought
    assert not (tmp_path / "futures_90d.dbn.zst").exists()
    asked = []
    _run(cfg, tmp_path, FakeClient(cost=50.0), confirm=lambda prompt: asked.append(prompt) or "y")
    assert asked and "$50.00" in asked[0]
    (tmp_path / "futures_90d.dbn.zst").unlink()
    client = FakeClient(cost=50.0)
    _run(cfg, tmp_path, client, yes=True, confirm=lambda prompt: pytest.fail("--yes must not ask"))
    assert client.calls[-1][0] == "get_range"


def test_truncated_download_is_refused_and_replaces_nothing(cfg, tmp_path) -> None:
    with pytest.raises(DataError, match="does not verify.*truncated"):
        _run(cfg, tmp_path, FakeClient(truncate=True))
    assert list(tmp_path.iterdir()) == []


def test_existing_truncated_file_is_fetched_again(cfg, tmp_path) -> None:
    path, _, _ = _run(cfg, tmp_path, FakeClient())
    good = path.read_bytes()
    client = FakeClient()
    _, out, _ = _run(cfg, tmp_path, client)  # a good file: nothing to do, no cost query
    assert client.calls == [] and "nothing to do" in out[0]
    path.write_bytes(good[: len(good) // 2])  # an interrupted copy, say
    client = FakeClient()
    _, out, _ = _run(cfg, tmp_path, client)
    assert "fails verification" in out[0] and [c[0] for c in client.calls][-1] == "get_range"
    assert path.read_bytes() == good


def test_client_errors_never_show_the_key(cfg, tmp_path) -> None:
    with pytest.raises(DataError) as e:
        _run(cfg, tmp_path, FakeClient(fail=RuntimeError(f"401 Unauthorized for key {KEY}")))
    assert "401 Unauthorized" in str(e.value) and KEY not in str(e.value)


def test_synthetic_stand_in_is_replaced_by_the_download(cfg, tmp_path) -> None:
    small = compose_data(["data=futures_90d", f"paths.data_dir={tmp_path}", "data.n_bars=50"], REPO)
    assert load_market_data(small, root=tmp_path, data_dir=tmp_path).synthetic
    client = FakeClient()
    path, _, _ = _run(cfg, tmp_path, client)
    assert client.calls[-1][0] == "get_range"
    md = load_market_data(small, root=tmp_path, data_dir=tmp_path)
    assert not md.synthetic and len(md.bars) == 1200  # the real file is neither regenerated nor marked synthetic
