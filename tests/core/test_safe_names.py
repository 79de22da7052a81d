"""The sweep id's one home (core/safe_names.sweep_id): a job and its sweep's summary derive the same id."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from trainbench.core.safe_names import sweep_id
from trainbench.sweep.summary import sweep_id_of


def test_an_explicit_sweep_id_wins(tmp_path):
    assert sweep_id("baseline-1", tmp_path, multirun=True) == "baseline-1"


def test_the_summary_derives_what_the_jobs_derive(tmp_path):
    folder = tmp_path / "multirun" / "2026-01-02_03-04-05"
    job_side = sweep_id(None, folder, multirun=True)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(folder)}}})
    assert sweep_id_of(cfg) == job_side and job_side.startswith("2026-01-02_03-04-05-")
    assert sweep_id(None, tmp_path / "other" / "2026-01-02_03-04-05", True) != job_side  # another folder


def test_a_single_run_is_named_by_its_last_two_folders(tmp_path):
    folder = tmp_path / "outputs" / "2026-01-02" / "03-04-05_dqn_small"
    sid = sweep_id(None, folder, multirun=False)
    assert sid.startswith("2026-01-02_03-04-05_dqn_small-") and len(sid.rsplit("-", 1)[1]) == 6
    assert sweep_id(None, Path("weird name!"), True).startswith("weird_name_-")


def test_a_sweep_folder_named_after_a_secret_gives_one_id_without_it(tmp_path, monkeypatch):
    from trainbench.core.secrets import redact_mapping
    from trainbench.core.vocab import Tag

    token = "hf_Zq81s3cretToken"
    monkeypatch.setenv("HF_TOKEN", token)
    folder = tmp_path / f"run-{token}"
    job_side = sweep_id(None, folder, multirun=True)
    tagged = redact_mapping({Tag.SWEEP_ID: job_side})[Tag.SWEEP_ID]  # what a job's run is tagged with
    summary_side = sweep_id_of(OmegaConf.create({"hydra": {"sweep": {"dir": str(folder)}}}))
    assert token not in job_side and tagged == job_side == summary_side
    assert token not in sweep_id(f"x-{token}", tmp_path, True) and sweep_id("x-1", tmp_path, True) == "x-1"
