"""Reruns: `run.py rerun=<run_id>` and Hydra's `--experimental-rerun`, end to end and piece by piece."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf, open_dict

from trainbench.config import compose_run
from trainbench.rerun import (
    RerunError,
    SaveJobConfig,
    compare_facts,
    hydra_rerun,
    loss_comparison,
    prepare_rerun,
    rerun_config,
)

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------
# end to end (subprocesses, as a user runs it)
# --------------------------------------------------------------------------------------------------


def _run(tmp_path, *args, out="out"):
    cmd = [sys.executable, "run.py", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
           f"tracking.artifact_location={tmp_path}/artifacts", f"paths.data_dir={tmp_path}/data",
           f"hydra.run.dir={tmp_path}/{out}", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


def _epochs(client, run_id, tmp_path):
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        return json.loads(Path(client.download_artifacts(run_id, "epochs.json", d)).read_text())


_TRAJECTORY = ("loss", "grad_norm", "loss_td", "q_mean", "epsilon", "reward_mean")


@pytest.mark.slow
def test_rerun_reproduces_params_and_losses_and_hydra_rerun_still_works(tmp_path):
    p = _run(tmp_path, "debug=default", "model=dqn", "trainer.deterministic=true")
    assert p.returncode == 0, p.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench").experiment_id
    (orig,) = client.search_runs([exp], "tags.kind = 'train'")
    rid = orig.info.run_id

    p = _run(tmp_path, f"+rerun={rid}", out="out2")
    assert p.returncode == 0, p.stderr[-3000:]
    # the diff is printed before the run opens (and so before anything trains)
    assert p.stdout.index(f"rerun of {rid}") < p.stdout.index("MLflow run ")
    assert "data_sha256" in p.stdout
    (new,) = client.search_runs([exp], f"tags.rerun_of = '{rid}'")
    assert new.info.status == "FINISHED"
    assert new.data.tags["sweep_id"] != orig.data.tags["sweep_id"]
    assert new.data.tags["rerun_data_match"] == "true"
    assert new.data.tags["rerun_losses_identical"] == "true"
    a, b = dict(orig.data.params), dict(new.data.params)
    assert b.pop("rerun") == rid and a.pop("rerun") == "None"
    assert a == b  # every config param, model_info.* and samples_per_epoch
    ea, eb = _epochs(client, rid, tmp_path), _epochs(client, new.info.run_id, tmp_path)
    for key in _TRAJECTORY:
        assert ea[key] == eb[key], key  # exactly equal floats, epoch by epoch
    assert ea["epoch_time_ms"] != eb["epoch_time_ms"]  # timings are measured again, not copied
    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        diff = json.loads(Path(client.download_artifacts(new.info.run_id, "rerun_diff.json", d)).read_text())
    assert diff["rerun_of"] == rid and diff["checks"]["data_sha256"]["same"] is True
    assert diff["checks"]["git_commit"]["same"] is True and diff["config"]["changed"] == {}

    # Hydra's own rerun from the job folder: same losses, a sweep of its own, tagged
    pickle = tmp_path / "out" / ".hydra" / "config.pickle"
    assert pickle.is_file()
    p = subprocess.run([sys.executable, "run.py", "--experimental-rerun", str(pickle)], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (hyd,) = client.search_runs([exp], "tags.rerun_of_hydra != ''")
    assert hyd.data.tags["rerun_of_hydra"] == str(pickle)
    assert hyd.data.tags["sweep_id"] not in (orig.data.tags["sweep_id"], new.data.tags["sweep_id"])
    eh = _epochs(client, hyd.info.run_id, tmp_path)
    assert all(ea[k] == eh[k] for k in _TRAJECTORY)


# --------------------------------------------------------------------------------------------------
# in process: the diff, the config, errors
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(uri, client, experiment id): one sqlite store for this module (creating one costs seconds)."""
    root = tmp_path_factory.mktemp("rerun-store")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("trainbench", artifact_location=str(root / "artifacts"))
    return uri, client, exp


def _original(tmp_path, client, exp, data_file: Path, **tags):
    """A logged training run as run.py writes it (config, overrides, environment.json, tags)."""
    cfg = compose_run(["model=dqn", "debug=default", f"data.path={data_file}", "data.synthetic=false",
                       f"paths.data_dir={tmp_path}/data"], root=str(REPO))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    sha = hashlib.sha256(data_file.read_bytes()).hexdigest()
    run = client.create_run(exp, tags={"kind": "train", "model": "dqn", "device": "cpu", "sweep_id": "s0",
                                       "job": "0", "outcome": "completed", "git_commit": "0" * 40,
                                       "git_dirty": "false", "data_sha256": sha, **tags})
    rid = run.info.run_id
    client.log_text(rid, OmegaConf.to_yaml(resolved), "config/config.yaml")
    client.log_text(rid, yaml.safe_dump(["model=dqn", "debug=default"]), "config/overrides.yaml")
    client.log_dict(rid, {"python": "3.0.0", "torch": "0.1", "cuda": None, "packages": {"numpy": "0.0.1"},
                          "device": {"label": "cpu", "torch_threads": 1}, "cpu": {"name": "Z80"},
                          "hostname": "elsewhere"}, "environment.json")
    client.set_terminated(rid, "FINISHED")
    return rid, resolved


def _current(tmp_path, uri, rid, *extra):
    return compose_run(["model=dqn", "debug=default", f"tracking.uri={uri}", f"paths.data_dir={tmp_path}/data",
                        f"rerun={rid}", *extra], root=str(REPO))


def test_a_changed_data_file_is_detected_by_its_hash(tmp_path, store):
    uri, client, exp = store
    data = tmp_path / "bars.dbn"
    data.write_bytes(b"the original bytes")
    rid, _ = _original(tmp_path, client, exp, data)
    printed = []

    plan = prepare_rerun(_current(tmp_path, uri, rid), [f"rerun={rid}"], out=printed.append)
    assert plan.diff["checks"]["data_sha256"]["same"] is True
    assert plan.tags["rerun_data_match"] == "true" and plan.tags["rerun_of"] == rid

    data.write_bytes(b"the original bytez")  # same size, one byte different
    plan = prepare_rerun(_current(tmp_path, uri, rid), [f"rerun={rid}"], out=printed.append)
    assert plan.diff["checks"]["data_sha256"]["same"] is False
    assert "data_sha256" in plan.diff["differs"] and plan.tags["rerun_data_match"] == "false"
    assert "data_sha256" in plan.tags["rerun_differs"]
    assert any("differs from the one the original read" in n for n in plan.diff["notes"])
    table = printed[-1]
    assert f"rerun of {rid}" in table and "data_sha256" in table and "DIFFERS" in table


def test_the_diff_names_environment_differences(tmp_path, store):
    uri, client, exp = store
    data = tmp_path / "bars.dbn"
    data.write_bytes(b"x")
    rid, _ = _original(tmp_path, client, exp, data)
    plan = prepare_rerun(_current(tmp_path, uri, rid), [f"rerun={rid}"], out=lambda s: None)
    differs = plan.diff["differs"]
    # the fake original ran at another commit, on another Python/torch/numpy, on a Z80
    for key in ("git_commit", "python", "torch", "packages", "cpu"):
        assert key in differs, key
    assert "device" not in differs and "data_sha256" not in differs
    assert plan.diff["checks"]["packages"]["changed"]["numpy"][0] == "0.0.1"


def test_overrides_replace_the_originals_values_and_are_reported(tmp_path, store):
    uri, client, exp = store
    data = tmp_path / "bars.dbn"
    data.write_bytes(b"x")
    rid, original = _original(tmp_path, client, exp, data)
    current = _current(tmp_path, uri, rid, "trainer.epochs=7", "model.lr=0.5")
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
    cfg, diff, _ = rerun_config(_current(tmp_path, uri, rid, "model=dqn", "model.gamma=0.5"), original,
                                ["model=dqn", "model.gamma=0.5"], rid)
    assert cfg.model.hidden == 64 and cfg.model.gamma == 0.5 and list(diff["changed"]) == ["model.gamma"]
    # another group replaces the section, and every value that changes is reported
    current = compose_run(["trainer=quick", f"tracking.uri={uri}", f"rerun={rid}"], root=str(REPO))
    cfg, diff, _ = rerun_config(current, original, ["trainer=quick"], rid)
    assert cfg.trainer.profile == "quick" and diff["changed"]["trainer.epochs"] == [2, 3]
    with pytest.raises(RerunError, match="keeps the original's model"):
        rerun_config(compose_run(["model=ppo", f"rerun={rid}"], root=str(REPO)), original, ["model=ppo"], rid)


def test_a_key_this_version_does_not_know_fails_with_a_message(tmp_path, store):
    uri, client, exp = store
    data = tmp_path / "bars.dbn"
    data.write_bytes(b"x")
    rid, original = _original(tmp_path, client, exp, data)
    original["trainer"]["warp_drive"] = True
    with pytest.raises(RerunError, match="warp_drive"):
        rerun_config(_current(tmp_path, uri, rid), original, [], rid)


def test_unknown_or_non_training_runs_are_refused(tmp_path, store):
    uri, client, exp = store
    with pytest.raises(RerunError, match="no such run"):
        prepare_rerun(_current(tmp_path, uri, "0" * 32), [], out=lambda s: None)
    rid = client.create_run(exp, tags={"kind": "analysis"}).info.run_id
    with pytest.raises(RerunError, match="not a training run"):
        prepare_rerun(_current(tmp_path, uri, rid), [], out=lambda s: None)
    with pytest.raises(RerunError, match="no MLflow store"):
        prepare_rerun(_current(tmp_path, f"sqlite:///{tmp_path}/none/mlflow.db", rid), [], out=lambda s: None)


def test_loss_comparison_is_exact_and_ignores_timings():
    a = {"loss": [1.0, 0.5], "grad_norm": [2.0, 1.0], "epoch_time_ms": [10.0, 11.0], "warmup_epochs": 1}
    same = loss_comparison(a, {**a, "epoch_time_ms": [12.0, 9.0]})
    assert same["identical"] and set(same["series"]) == {"loss", "grad_norm"}
    # the machine's load, rates and the validation pass's time are measurements too, never compared
    load = {"cpu_busy_pct": [50.0, 60.0], "contaminated": [0, 1], "env_steps_per_s": [1e4, 2e4],
            "eval_time_ms": [3.0, 4.0]}
    other = {k: [v[1], v[0]] for k, v in load.items()}
    assert loss_comparison({**a, **load}, {**a, **other})["identical"]
    off = loss_comparison(a, {**a, "loss": [1.0, 0.5000001]})
    assert not off["identical"] and off["series"]["loss"]["max_abs_diff"] == pytest.approx(1e-7)


def test_unrecorded_facts_are_unknown_not_equal():
    checks = compare_facts({"git_commit": "abc", "git_dirty": "true"},
                           {"git_commit": "abc", "git_dirty": "true", "git_diff_sha256": "d1", "packages": {}},
                           None, "f00")
    assert checks["git_commit"]["same"] is True
    assert checks["git_diff_sha256"]["same"] is None  # a dirty original without a diff hash: unknowable
    assert checks["data_sha256"]["same"] is None and checks["packages"]["same"] is None


def test_hydra_rerun_gets_its_own_sweep_and_a_tag():
    cfg = OmegaConf.create({"sweep_id": None})
    same, tags = hydra_rerun(cfg, ["run.py", "model=dqn"])
    assert tags == {} and same.sweep_id is None
    cfg, tags = hydra_rerun(cfg, ["run.py", "--experimental-rerun", "/x/.hydra/config.pickle"])
    assert tags == {"rerun_of_hydra": "/x/.hydra/config.pickle"} and cfg.sweep_id.startswith("hydra-rerun-")
    # an explicit sweep id is kept as a prefix, never reused: the rerun must not join the original's sweep
    cfg, _ = hydra_rerun(OmegaConf.create({"sweep_id": "nightly"}), ["run.py", "--experimental-rerun", "p"])
    assert cfg.sweep_id.startswith("nightly-hydra-rerun-")


def test_the_pickled_job_config_keeps_its_types_but_not_secrets(tmp_path, monkeypatch):
    import pickle

    secret = "tok-5e1f-93ab-Zq7"
    monkeypatch.setenv("MY_TOKEN", secret)
    cfg = compose_run(["model=dqn", f"trainer.profile=p-{secret}"], root=str(REPO))
    hydra = OmegaConf.create({"hydra": {"output_subdir": ".hydra", "runtime": {"output_dir": str(tmp_path)},
                                        "overrides": {"task": [f"trainer.profile=p-{secret}", "model=dqn"]}}})
    OmegaConf.set_readonly(hydra.hydra.overrides.task, True)  # as Hydra leaves it
    with open_dict(cfg):
        cfg.hydra = hydra.hydra
    SaveJobConfig().on_job_start(cfg)
    raw = (tmp_path / ".hydra" / "config.pickle").read_bytes()
    assert secret.encode() not in raw
    back = pickle.loads(raw)
    assert back.trainer.profile == "p-***" and list(back.hydra.overrides.task) == ["trainer.profile=p-***", "model=dqn"]
    assert OmegaConf.get_type(back, "trainer").__name__ == "TrainerConfig"  # still typed: validate() works on it
    assert cfg.trainer.profile == f"p-{secret}"  # the running job's own config is untouched
