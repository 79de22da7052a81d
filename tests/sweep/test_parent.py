"""The sweep's parent run (sweep/parent.py): opened with the command line and git state, found by the jobs,
ended with the sweep's summary and status; closed as interrupted when the sweep process ends without
Hydra's end-of-sweep callback; never holding a secret."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from trainbench.core.vocab import SWEEP_RUN_FILE, Artifact, Outcome, ParamKey, Summary, Tag
from trainbench.sweep.parent import SweepRun, end_sweep_run, start_sweep_run
from trainbench.tracking.conventions import MLFLOW_PARENT_RUN_ID
from trainbench.tracking.nesting import parent_run_id


def _train_run(store, sweep_id, outcome=Outcome.COMPLETED, parent=None, job="0"):
    tags = {Tag.KIND: "train", Tag.MODEL: "dqn", Tag.SWEEP_ID: sweep_id, Tag.JOB: job, Tag.OUTCOME: outcome}
    if parent:
        tags[MLFLOW_PARENT_RUN_ID] = parent
    run = store.client.create_run(store.exp_id, run_name=f"{sweep_id}-{job}", tags=tags)
    store.client.set_terminated(run.info.run_id, {Outcome.COMPLETED: "FINISHED", Outcome.INTERRUPTED: "KILLED"}.get(
        outcome, "FAILED"))
    return run.info.run_id


def test_sweep_parent_reaches_jobs_through_the_sweep_folder_or_the_store(store, tmp_path):
    rid = start_sweep_run(store.client, store.exp_id, "sw-a", tmp_path / "multi", ["model=dqn,ppo"],
                          {Tag.GIT_COMMIT: "abc"})
    run = store.client.get_run(rid)
    assert run.info.run_name == "sw-a" and run.data.tags[Tag.KIND] == "sweep" and run.info.status == "RUNNING"
    assert run.data.tags["mlflow.source.git.commit"] == "abc"
    assert json.loads(run.data.params[ParamKey.SWEEP_OVERRIDES]) == ["model=dqn,ppo"]
    assert parent_run_id(store.client, store.exp_id, "sw-a", tmp_path / "multi") == rid
    # another machine without the folder: found in the store by sweep_id
    assert parent_run_id(store.client, store.exp_id, "sw-a", tmp_path / "elsewhere") == rid


def test_sweep_parent_holds_no_secret_and_is_still_found(store, tmp_path, monkeypatch):
    token = "tok-3f9a8b7c6d5e"
    monkeypatch.setenv("MY_TOKEN", token)
    sid = f"s-{token}"
    rid = start_sweep_run(store.client, store.exp_id, sid, tmp_path, [f"trainer.profile=p-{token}"])
    end_sweep_run(store.client, store.exp_id, rid, sid)
    run = store.client.get_run(rid)
    seen = repr((run.info.run_name, run.data.tags, run.data.params)) + (tmp_path / SWEEP_RUN_FILE).read_text()
    assert token not in seen and run.data.tags[Tag.SWEEP_ID] == "s-***"
    assert parent_run_id(store.client, store.exp_id, sid, tmp_path) == rid
    assert parent_run_id(store.client, store.exp_id, sid, None) == rid


@pytest.mark.parametrize(("outcomes", Outcome.INTERRUPTED, "status", "outcome"), [
    ([Outcome.COMPLETED, Outcome.COMPLETED], False, "FINISHED", Outcome.COMPLETED),
    ([Outcome.COMPLETED, Outcome.FAILED], False, "FAILED", Outcome.FAILED),
    ([Outcome.COMPLETED, Outcome.INTERRUPTED], False, "KILLED", Outcome.INTERRUPTED),
    ([Outcome.COMPLETED], True, "KILLED", Outcome.INTERRUPTED),
    ([], False, "FAILED", Outcome.FAILED),
])
def test_sweep_parent_carries_the_summary_and_ends_with_the_sweeps_status(store, tmp_path, outcomes,
                                                                          interrupted, status, outcome):
    sid = f"sw-{len(outcomes)}-{'-'.join(outcomes)}-{interrupted}"
    rid = start_sweep_run(store.client, store.exp_id, sid, tmp_path, [])
    for i, o in enumerate(outcomes):
        _train_run(store, sid, o, parent=rid, job=str(i))
    _train_run(store, sid, Outcome.FAILED, job="9")  # same sweep_id, not nested (another invocation): not counted
    assert end_sweep_run(store.client, store.exp_id, rid, sid, interrupted) == outcome
    run = store.client.get_run(rid)
    assert run.info.status == status and run.data.tags[Tag.OUTCOME] == outcome
    assert run.data.metrics[Summary.RUNS] == len(outcomes)
    assert run.data.metrics[Summary.RUNS_COMPLETED] == outcomes.count(Outcome.COMPLETED)
    for k, v in Counter(o for o in outcomes if o != Outcome.COMPLETED).items():
        assert run.data.metrics[f"runs_{k}"] == v
    assert f"Sweep `{sid}`: **{outcome}**" in run.data.tags["mlflow.note.content"]
    assert Artifact.SWEEP_SUMMARY in {a.path for a in store.client.list_artifacts(rid)}


def test_sweep_run_left_open_is_closed_as_interrupted_at_exit(store, tmp_path):
    sweep = SweepRun.start(store.client, store.exp_id, "sw-exit", tmp_path, ["model=dqn"])
    assert sweep is not None
    sweep._at_exit()  # what the exit handler does when the end-of-sweep callback never ran
    assert store.client.get_run(sweep.run_id).info.status == "KILLED"
    assert sweep.end() is None  # once only


def test_sweep_run_that_cannot_be_written_lets_the_sweep_run_unnested(tmp_path, caplog):
    class Refuses:  # a store that went away between the sweep's connect and its parent run
        tracking_uri = "http://127.0.0.1:9/"

        def create_run(self, *args, **kwargs):
            raise ConnectionError("connection refused")

    assert SweepRun.start(Refuses(), "0", "sw", tmp_path, []) is None
    assert "without one" in caplog.text
