"""A rerun whose original's artifacts do not parse (issue 31): one line naming the run and the file, exit 2,
never a YAML or JSON parser's traceback; checked through a real ``run.py rerun=<id>`` and in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.procs import child_env
from trainbench.compose import compose_run
from trainbench.core.errors import EXIT_BAD_INPUT, RerunError
from trainbench.core.vocab import Artifact, Outcome, Tag
from trainbench.rerun.orchestrate import prepare_rerun

REPO = Path(__file__).resolve().parents[2]


def _forged(client, exp, tmp_path, config: str | None = None, overrides: str = "- model=dqn\n",
            environment: str = '{"python": "3.11"}') -> str:
    """A training run whose artifacts are the given texts (the config defaults to a valid one)."""
    if config is None:
        cfg = compose_run(["model=dqn", "debug=default", f"paths.data_dir={tmp_path}/data"], root=str(REPO))
        config = OmegaConf.to_yaml(OmegaConf.to_container(cfg, resolve=True))
    run = client.create_run(exp, tags={Tag.KIND: "train", Tag.MODEL: "dqn", Tag.DEVICE: "cpu", Tag.SWEEP_ID: "s0",
                                       Tag.JOB: "0", Tag.OUTCOME: Outcome.COMPLETED})
    rid = run.info.run_id
    client.log_text(rid, config, Artifact.CONFIG)
    client.log_text(rid, overrides, Artifact.OVERRIDES)
    client.log_text(rid, environment, Artifact.ENVIRONMENT)
    client.set_terminated(rid, "FINISHED")
    return rid


BROKEN = {
    "config-yaml": {"config": "model:\n  name: dqn\n  batch_size: [64,\n"},
    "config-not-a-mapping": {"config": "- just\n- a list\n"},
    "overrides-yaml": {"overrides": "- model=dqn\n- {unclosed\n"},
    "environment-json": {"environment": '{"python": "3.11",'},
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_artifacts_that_do_not_parse_are_one_rerun_error(case, tmp_path, store, rerun_composition):
    uri, client, exp = store
    rid = _forged(client, exp, tmp_path, **BROKEN[case])
    with pytest.raises(RerunError) as e:
        prepare_rerun(rerun_composition(uri, rid), [], out=lambda s: None)
    assert rid in str(e.value) and "\n" not in str(e.value)
    assert case.split("-")[0] in str(e.value)


@pytest.mark.slow
def test_run_py_rerun_of_a_run_with_damaged_artifacts_is_one_line(tmp_path, store):
    uri, client, exp = store
    rid = _forged(client, exp, tmp_path, environment="{not json at all")
    p = subprocess.run([sys.executable, "run.py", f"rerun={rid}", f"tracking.uri={uri}",
                        f"paths.data_dir={tmp_path}/data", f"hydra.run.dir={tmp_path}/out"], cwd=REPO,
                       env=child_env(HYDRA_FULL_ERROR="0"), capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == EXIT_BAD_INPUT, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and Artifact.ENVIRONMENT in errors[0] and "not valid JSON" in errors[0], out[-3000:]


def test_a_plain_rerun_of_a_sweep_job_reports_no_sweep_id_difference(tmp_path, store, logged_original,
                                                                      rerun_composition):
    from trainbench.rerun.configs import rerun_config

    uri, _, _ = store
    data = tmp_path / "bars.dbn"
    data.write_bytes(b"x")
    rid, original = logged_original(data)
    original[Tag.SWEEP_ID] = "sw1"  # a job of sweep sw1 (the config key is named like the tag)
    cfg, diff, _ = rerun_config(rerun_composition(uri, rid), original, [f"rerun={rid}"], rid)
    assert cfg.sweep_id is None  # cleared by design: a rerun is not one of the sweep's jobs
    assert diff["changed"] == {}
    # a sweep id the user gives is a difference, and reported as one
    given = f"{Tag.SWEEP_ID}=again1"
    cfg, diff, _ = rerun_config(rerun_composition(uri, rid, given), original, [f"rerun={rid}", given], rid)
    assert cfg.sweep_id == "again1" and diff["changed"] == {Tag.SWEEP_ID: ["sw1", "again1"]}
