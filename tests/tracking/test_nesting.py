"""A job finds the sweep's parent run (tracking/nesting.py): through the sweep folder, else the store; a
stale file of another sweep is not trusted; sweep ids are matched as runs store them (secrets removed)."""

from __future__ import annotations

from trainbench.core.vocab import SWEEP_RUN_FILE, Kind, Tag
from trainbench.tracking.nesting import find_sweep_run, parent_run_id, write_sweep_run_file


def _parent(client, exp_id, sweep_id):
    return client.create_run(exp_id, run_name=sweep_id, tags={Tag.KIND: Kind.SWEEP, Tag.SWEEP_ID: sweep_id}).info.run_id


def test_the_parent_is_found_through_the_sweep_folder_or_the_store(store, tmp_path):
    client, exp_id = store
    rid = _parent(client, exp_id, "nest-a")
    write_sweep_run_file(tmp_path / "multi", "from-the-file", "nest-a", exp_id, "sqlite:///x")
    assert parent_run_id(client, exp_id, "nest-a", tmp_path / "multi") == "from-the-file"
    # another machine without the folder: found in the store by sweep_id
    assert parent_run_id(client, exp_id, "nest-a", tmp_path / "elsewhere") == rid
    assert parent_run_id(client, exp_id, "nest-a", None) == rid
    # a stale file of another sweep (or experiment) is not trusted
    assert parent_run_id(client, exp_id, "nest-b", tmp_path / "multi") is None
    assert parent_run_id(client, "0", "nest-a", tmp_path / "multi") is None
    assert find_sweep_run(client, exp_id, "it's") is None


def test_a_sweep_id_holding_a_secret_is_matched_as_stored(store, tmp_path, monkeypatch):
    client, exp_id = store
    token = "tok-91b2c3d4e5f6"
    monkeypatch.setenv("MY_TOKEN", token)
    rid = _parent(client, exp_id, "s-***")
    write_sweep_run_file(tmp_path, rid, f"s-{token}", exp_id, "sqlite:///x")
    assert token not in (tmp_path / SWEEP_RUN_FILE).read_text()
    assert parent_run_id(client, exp_id, f"s-{token}", tmp_path) == rid
    assert find_sweep_run(client, exp_id, f"s-{token}") == rid
