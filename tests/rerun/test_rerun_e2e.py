"""Reruns end to end, as a user runs them: `run.py rerun=<run_id>` and Hydra's `--experimental-rerun`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trainbench.core.gitstate import git_state
from trainbench.core.vocab import Artifact, DataInfo, Series, Tag, data_tag

REPO = Path(__file__).resolve().parents[2]


def _run(run, tmp_path, *args, out="out"):
    """run.py against ``run``'s store and data folder (the session's ``single_dqn_run``)."""
    cmd = [sys.executable, "run.py", f"tracking.uri={run.uri}", f"tracking.artifact_location={run.root}/artifacts",
           f"paths.data_dir={run.root}/data", f"hydra.run.dir={tmp_path}/{out}", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def _epochs(client, run_id, tmp_path):
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        return json.loads(Path(client.download_artifacts(run_id, Artifact.EPOCHS, d)).read_text())


_TRAJECTORY = ("loss", Series.GRAD_NORM, "loss_td", "q_mean", "epsilon", "reward_mean")


@pytest.mark.slow
def test_rerun_reproduces_params_and_losses_and_hydra_rerun_still_works(single_dqn_run, tmp_path):
    # the original: the session's `run.py debug=default model=dqn trainer.deterministic=true` (tests/conftest.py)
    client, exp, rid = single_dqn_run.client, single_dqn_run.exp_id, single_dqn_run.run_id
    orig = client.get_run(rid)

    p = _run(single_dqn_run, tmp_path, f"+rerun={rid}", out="out2")
    assert p.returncode == 0, p.stderr[-3000:]
    # the diff is printed before the run opens (and so before anything trains)
    assert p.stdout.index(f"rerun of {rid}") < p.stdout.index("MLflow run ")
    assert data_tag(DataInfo.SHA256) in p.stdout
    (new,) = client.search_runs([exp], f"tags.rerun_of = '{rid}'")
    assert new.info.status == "FINISHED"
    assert new.data.tags[Tag.SWEEP_ID] != orig.data.tags[Tag.SWEEP_ID]
    assert new.data.tags[Tag.RERUN_DATA_MATCH] == "true"
    assert new.data.tags[Tag.RERUN_LOSSES_IDENTICAL] == "true"
    a, b = dict(orig.data.params), dict(new.data.params)
    assert b.pop("rerun") == rid and a.pop("rerun") == "None"
    assert a == b  # every config param, model_info.* and samples_per_epoch
    ea, eb = _epochs(client, rid, tmp_path), _epochs(client, new.info.run_id, tmp_path)
    for key in _TRAJECTORY:
        assert ea[key] == eb[key], key  # exactly equal floats, epoch by epoch
    assert ea[Series.EPOCH_TIME_MS] != eb[Series.EPOCH_TIME_MS]  # timings are measured again, not copied
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        diff = json.loads(Path(client.download_artifacts(new.info.run_id, Artifact.RERUN_DIFF, d)).read_text())
    assert diff[Tag.RERUN_OF] == rid and diff["checks"][data_tag(DataInfo.SHA256)]["same"] is True
    # the original ran earlier in the session: a commit made since then is a difference the check must name
    moved = orig.data.tags[Tag.GIT_COMMIT] != git_state(str(REPO))[Tag.GIT_COMMIT]
    assert diff["checks"][Tag.GIT_COMMIT]["same"] is (not moved) and diff["config"]["changed"] == {}

    # Hydra's own rerun from the job folder: same losses, a sweep of its own, tagged
    pickle = single_dqn_run.out / ".hydra" / "config.pickle"
    assert pickle.is_file()
    p = subprocess.run([sys.executable, "run.py", "--experimental-rerun", str(pickle)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (hyd,) = client.search_runs([exp], "tags.rerun_of_hydra != ''")
    assert hyd.data.tags[Tag.RERUN_OF_HYDRA] == str(pickle)
    assert hyd.data.tags[Tag.SWEEP_ID] not in (orig.data.tags[Tag.SWEEP_ID], new.data.tags[Tag.SWEEP_ID])
    eh = _epochs(client, hyd.info.run_id, tmp_path)
    assert all(ea[k] == eh[k] for k in _TRAJECTORY)
