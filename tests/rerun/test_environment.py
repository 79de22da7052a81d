"""What differs between the original's setup and this machine: the data file's hash, the environment,
and facts the original did not record."""

from __future__ import annotations

from trainbench.core.vocab import DataInfo, Tag, data_tag
from trainbench.rerun.environment import compare_facts
from trainbench.rerun.orchestrate import prepare_rerun


def test_a_changed_data_file_is_detected_by_its_hash(tmp_path, store, logged_original, rerun_composition):
    uri, _, _ = store
    data = tmp_path / "data" / "bars.dbn"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes(b"the original bytes")
    rid, _ = logged_original(data)
    printed = []

    plan = prepare_rerun(rerun_composition(uri, rid), [f"rerun={rid}"], out=printed.append)
    assert plan.diff["checks"][data_tag(DataInfo.SHA256)]["same"] is True
    assert plan.tags[Tag.RERUN_DATA_MATCH] == "true" and plan.tags[Tag.RERUN_OF] == rid

    data.write_bytes(b"the original bytez")  # same size, one byte different
    plan = prepare_rerun(rerun_composition(uri, rid), [f"rerun={rid}"], out=printed.append)
    assert plan.diff["checks"][data_tag(DataInfo.SHA256)]["same"] is False
    assert data_tag(DataInfo.SHA256) in plan.diff["differs"] and plan.tags[Tag.RERUN_DATA_MATCH] == "false"
    assert data_tag(DataInfo.SHA256) in plan.tags[Tag.RERUN_DIFFERS]
    assert any("differs from the one the original read" in n for n in plan.diff["notes"])
    table = printed[-1]
    assert f"rerun of {rid}" in table and data_tag(DataInfo.SHA256) in table and "DIFFERS" in table


def test_the_diff_names_environment_differences(tmp_path, store, logged_original, rerun_composition):
    uri, _, _ = store
    data = tmp_path / "data" / "bars.dbn"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes(b"x")
    rid, _ = logged_original(data)
    plan = prepare_rerun(rerun_composition(uri, rid), [f"rerun={rid}"], out=lambda s: None)
    differs = plan.diff["differs"]
    # the fake original ran at another commit, on another Python/torch/numpy, on a Z80
    for key in (Tag.GIT_COMMIT, "python", "torch", "packages", "cpu"):
        assert key in differs, key
    assert "device" not in differs and data_tag(DataInfo.SHA256) not in differs
    assert plan.diff["checks"]["packages"]["changed"]["numpy"][0] == "0.0.1"


def test_unrecorded_facts_are_unknown_not_equal():
    checks = compare_facts({Tag.GIT_COMMIT: "abc", Tag.GIT_DIRTY: "true"},
                           {Tag.GIT_COMMIT: "abc", Tag.GIT_DIRTY: "true", Tag.GIT_DIFF_SHA256: "d1", "packages": {}},
                           None, "f00")
    assert checks[Tag.GIT_COMMIT]["same"] is True
    assert checks[Tag.GIT_DIFF_SHA256]["same"] is None  # a dirty original without a diff hash: unknowable
    assert checks[data_tag(DataInfo.SHA256)]["same"] is None and checks["packages"]["same"] is None
