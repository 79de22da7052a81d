"""A team's own card (conf/hardware/<card>.yaml in the project folder, trainbench.config.team) is a GPU of the
analysis like a packaged one: hardware=<card> prices and projects the local card, project=<card> projects onto it,
and MFU finds its peaks."""

from pathlib import Path

import numpy as np
from analysis_helpers import report_from_store

from helpers.workloads import DQN
from trainbench.config.team import set_root
from trainbench.core.vocab import Summary

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "hardware" / "team_card.yaml"


def test_a_teams_card_is_the_local_card_and_a_projection_target(store, tmp_path):
    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    (tmp_path / "conf" / "hardware" / "our_4090.yaml").write_text(
        EXAMPLE.read_text().replace("name: team_card", "name: our_4090"))
    set_root(tmp_path)  # as analyze.py does for its working folder (or paths.root=)
    store = store.new_experiment("team-card")
    rng = np.random.default_rng(0)
    store.add_run("dqn", 700 * (1 + 0.01 * rng.standard_normal(30)), sweep_id="team-card", device="cpu",
                  extra_metrics={**DQN, Summary.PREDICTED_PEAK_VRAM_RESERVED_MB: 300.0})
    r = report_from_store(store, tmp_path, "sweep=team-card", "hardware=our_4090", "project=[our_4090]")
    local = r["decision"]["local_instance"]
    assert local["gpu"] == "our_4090" and local["methods"] == ["roofline from cpu profile"]
    by = {(p["instance"], p["model"]): p for p in r["projections"]}
    assert by[("local", "dqn")]["epoch_ms"] > 0 and by[("local", "dqn")]["fits"] is True
    assert "local our_4090" in r["decision"]["rationale"]


def test_mfu_finds_a_teams_card(tmp_path):
    from trainbench.measure.flops import peak_tflops

    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    (tmp_path / "conf" / "hardware" / "our_4090.yaml").write_text(
        EXAMPLE.read_text().replace("name: team_card", "name: our_4090"))
    set_root(tmp_path)
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") == (165.2, "hardware=our_4090 (bf16)")
