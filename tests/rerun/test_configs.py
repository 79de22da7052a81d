"""The rerun's config: the original's values, the overrides given with rerun=, and keys this version lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainbench.compose import compose_run
from trainbench.core.errors import RerunError
from trainbench.rerun.configs import rerun_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_overrides_replace_the_originals_values_and_are_reported(tmp_path, store, logged_original,
                                                                 rerun_composition):
    uri, _, _ = store
    data = tmp_path / "data" / "bars.dbn"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes(b"x")
    rid, original = logged_original(data)
    current = rerun_composition(uri, rid, "trainer.epochs=7", "model.lr=0.5")
    # the current composition has other defaults too (e.g. trainer.seed=3); only given overrides count
    current.trainer.seed = 3
    cfg, diff, notes = rerun_config(current, original, ["rerun=x", "trainer.epochs=7", "model.lr=0.5",
                                                        "debug=default"], rid)
    assert cfg.trainer.epochs == 7 and cfg.model.lr == 0.5 and cfg.trainer.seed == 0
    assert diff["changed"] == {"model.lr": [original["model"]["lr"], 0.5], "trainer.epochs": [2, 7]}
    assert cfg.rerun == rid and cfg.sweep_id is None
    assert any("debug" in n for n in notes)  # a global group cannot be applied to a logged config

    # naming the original's own model group (needed to override its model-specific keys) keeps its values
    original["model"]["hidden"] = 64
    cfg, diff, _ = rerun_config(rerun_composition(uri, rid, "model=dqn", "model.gamma=0.5"), original,
                                ["model=dqn", "model.gamma=0.5"], rid)
    assert cfg.model.hidden == 64 and cfg.model.gamma == 0.5 and list(diff["changed"]) == ["model.gamma"]
    # another group replaces the section, and every value that changes is reported
    current = compose_run(["trainer=quick", f"tracking.uri={uri}", f"rerun={rid}"], root=str(REPO))
    cfg, diff, _ = rerun_config(current, original, ["trainer=quick"], rid)
    assert cfg.trainer.profile == "quick" and diff["changed"]["trainer.epochs"] == [2, 3]
    with pytest.raises(RerunError, match="keeps the original's model"):
        rerun_config(compose_run(["model=ppo", f"rerun={rid}"], root=str(REPO)), original, ["model=ppo"], rid)


def test_a_key_this_version_does_not_know_fails_with_a_message(tmp_path, store, logged_original,
                                                               rerun_composition):
    uri, _, _ = store
    data = tmp_path / "data" / "bars.dbn"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes(b"x")
    rid, original = logged_original(data)
    original["trainer"]["warp_drive"] = True
    with pytest.raises(RerunError, match="warp_drive"):
        rerun_config(rerun_composition(uri, rid), original, [], rid)
