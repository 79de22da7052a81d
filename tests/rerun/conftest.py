"""Fixtures of the rerun tests: one MLflow store, a logged original run as run.py writes it, and the
composition a user's ``rerun=<id>`` invocation gives."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from trainbench.compose import compose_run
from trainbench.core.vocab import Artifact, DataInfo, Outcome, Tag, data_tag

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    """(uri, client, experiment id): one sqlite store for the rerun tests (creating one costs seconds)."""
    root = tmp_path_factory.mktemp("rerun-store")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("trainbench", artifact_location=str(root / "artifacts"))
    return uri, client, exp


@pytest.fixture
def logged_original(tmp_path, store) -> Callable[..., tuple[str, dict[str, Any]]]:
    """``(data_file, **tags) -> (run id, resolved config)``: a logged training run as run.py writes it
    (config, overrides, environment.json, tags), made on another machine at another commit."""
    _, client, exp = store

    def make(data_file: Path, **tags: str) -> tuple[str, dict[str, Any]]:
        cfg = compose_run(["model=dqn", "debug=default", f"data.path={data_file}", "data.synthetic=false",
                           f"paths.data_dir={tmp_path}/data"], root=str(REPO))
        resolved = OmegaConf.to_container(cfg, resolve=True)
        sha = hashlib.sha256(data_file.read_bytes()).hexdigest()
        run = client.create_run(exp, tags={Tag.KIND: "train", Tag.MODEL: "dqn", Tag.DEVICE: "cpu", Tag.SWEEP_ID: "s0",
                                           Tag.JOB: "0", Tag.OUTCOME: Outcome.COMPLETED, Tag.GIT_COMMIT: "0" * 40,
                                           Tag.GIT_DIRTY: "false", data_tag(DataInfo.SHA256): sha, **tags})
        rid = run.info.run_id
        client.log_text(rid, OmegaConf.to_yaml(resolved), Artifact.CONFIG)
        client.log_text(rid, yaml.safe_dump(["model=dqn", "debug=default"]), Artifact.OVERRIDES)
        client.log_dict(rid, {"python": "3.0.0", "torch": "0.1", "cuda": None, "packages": {"numpy": "0.0.1"},
                              "device": {"label": "cpu", "torch_threads": 1}, "cpu": {"name": "Z80"},
                              "hostname": "elsewhere"}, Artifact.ENVIRONMENT)
        client.set_terminated(rid, "FINISHED")
        return rid, resolved

    return make


@pytest.fixture
def rerun_composition(tmp_path) -> Callable[..., DictConfig]:
    """``(uri, run id, *extra overrides) -> config``: what ``run.py rerun=<id> ...`` composes here."""

    def compose(uri: str, rid: str, *extra: str) -> DictConfig:
        return compose_run(["model=dqn", "debug=default", f"tracking.uri={uri}", f"paths.data_dir={tmp_path}/data",
                            f"rerun={rid}", *extra], root=str(REPO))

    return compose
