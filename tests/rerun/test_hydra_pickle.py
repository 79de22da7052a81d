"""Hydra's own rerun: a sweep id and a tag of its own, and a pickled job config that keeps its types but
not the secrets."""

from __future__ import annotations

import pickle
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from trainbench.compose import compose_run
from trainbench.core.vocab import Tag
from trainbench.rerun import hydra_rerun
from trainbench.rerun.hydra_pickle import save_job_config

REPO = Path(__file__).resolve().parents[2]


def test_hydra_rerun_gets_its_own_sweep_and_a_tag():
    cfg = OmegaConf.create({Tag.SWEEP_ID: None})
    same, tags = hydra_rerun(cfg, ["run.py", "model=dqn"])
    assert tags == {} and same.sweep_id is None
    cfg, tags = hydra_rerun(cfg, ["run.py", "--experimental-rerun", "/x/.hydra/config.pickle"])
    assert tags == {Tag.RERUN_OF_HYDRA: "/x/.hydra/config.pickle"} and cfg.sweep_id.startswith("hydra-rerun-")
    # an explicit sweep id is kept as a prefix, never reused: the rerun must not join the original's sweep
    cfg, _ = hydra_rerun(OmegaConf.create({Tag.SWEEP_ID: "nightly"}), ["run.py", "--experimental-rerun", "p"])
    assert cfg.sweep_id.startswith("nightly-hydra-rerun-")


def test_the_pickled_job_config_keeps_its_types_but_not_secrets(tmp_path, monkeypatch):
    secret = "tok-5e1f-93ab-Zq7"
    monkeypatch.setenv("MY_TOKEN", secret)
    cfg = compose_run(["model=dqn", f"trainer.profile=p-{secret}"], root=str(REPO))
    hydra = OmegaConf.create({"hydra": {"output_subdir": ".hydra", "runtime": {"output_dir": str(tmp_path)},
                                        "overrides": {"task": [f"trainer.profile=p-{secret}", "model=dqn"]}}})
    OmegaConf.set_readonly(hydra.hydra.overrides.task, True)  # as Hydra leaves it
    with open_dict(cfg):
        cfg.hydra = hydra.hydra
    save_job_config(cfg)
    raw = (tmp_path / ".hydra" / "config.pickle").read_bytes()
    assert secret.encode() not in raw
    back = pickle.loads(raw)
    assert back.trainer.profile == "p-***" and list(back.hydra.overrides.task) == ["trainer.profile=p-***", "model=dqn"]
    assert OmegaConf.get_type(back, "trainer").__name__ == "TrainerConfig"  # still typed: validate() works on it
    assert cfg.trainer.profile == f"p-{secret}"  # the running job's own config is untouched
