"""One way into the store (tracking/connection.py): the experiment is marked as model training as it is
created or opened; a reader creates nothing; a run and the analysis wait on a server by one rule; importing
trainbench.tracking loads no MLflow."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainbench.core.errors import ExperimentNotFound, StoreNotFound
from trainbench.tracking.connection import connect, open_store
from trainbench.tracking.conventions import CUSTOM_MODEL_DEVELOPMENT, EXPERIMENT_KIND_TAG

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_connect_marks_new_and_existing_experiments_as_model_training(tmp_path):
    tracking = SimpleNamespace(uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="trainbench", timeout_s=5.0)
    client, exp_id = connect(tracking)
    assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND_TAG] == CUSTOM_MODEL_DEVELOPMENT
    # an experiment made before (without the tag) gets it when a run next connects to it
    old = client.create_experiment("made-earlier")
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old).tags
    connect(SimpleNamespace(**{**vars(tracking), "experiment": "made-earlier"}))
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == CUSTOM_MODEL_DEVELOPMENT
    # a kind someone chose is kept
    other = client.create_experiment("genai-one", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    connect(SimpleNamespace(**{**vars(tracking), "experiment": "genai-one"}))
    assert client.get_experiment(other).tags[EXPERIMENT_KIND_TAG] == "genai_development"


@pytest.mark.slow
def test_a_reader_creates_neither_the_store_nor_the_experiment(tmp_path):
    missing = SimpleNamespace(uri=f"sqlite:///{tmp_path}/none/mlflow.db", experiment="trainbench")
    with pytest.raises(StoreNotFound, match=r"no MLflow store at .*none/mlflow.db"):
        connect(missing, create=False)
    with pytest.raises(StoreNotFound):
        open_store(missing)
    assert not (tmp_path / "none").exists()
    tracking = SimpleNamespace(uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="trainbench")
    client, exp_id = connect(tracking)
    with pytest.raises(ExperimentNotFound, match="experiment 'absent' does not exist"):
        connect(SimpleNamespace(**{**vars(tracking), "experiment": "absent"}), create=False)
    assert client.get_experiment_by_name("absent") is None
    assert connect(tracking, create=False)[1] == exp_id


@pytest.mark.slow
def test_a_new_store_is_announced_and_a_path_that_names_no_place_is_refused(tmp_path, monkeypatch, caplog):
    """A mistyped sqlite URI used to create an empty store and its folders silently."""
    from trainbench.core.errors import TrackingUnavailable

    deep = SimpleNamespace(uri=f"sqlite:///{tmp_path}/typo/deeper/mlflow.db", experiment="trainbench")
    with pytest.raises(TrackingUnavailable, match=r"neither that folder nor its parent exists.*mkdir -p"):
        connect(deep)
    assert not (tmp_path / "typo").exists()
    monkeypatch.chdir(tmp_path)  # three slashes meant as an absolute path: a relative one, and said so
    with pytest.raises(TrackingUnavailable, match=r"three slashes is a path relative to the working folder .*"
                                                  r"four: sqlite:////home/me/mlflow.db"):
        connect(SimpleNamespace(uri="sqlite:///home/me/mlflow.db", experiment="trainbench"))
    assert not (tmp_path / "home").exists()
    new = SimpleNamespace(uri=f"sqlite:///{tmp_path}/runs/mlflow.db", experiment="trainbench")
    with caplog.at_level("INFO", logger="trainbench.tracking.connection"):
        connect(new)  # its own folder may be created: the embedded store's mlruns/ in a fresh checkout
    notes = [r.getMessage() for r in caplog.records if "new MLflow store" in r.getMessage()]
    assert len(notes) == 1 and f"{tmp_path}/runs/mlflow.db" in notes[0], notes
    caplog.clear()
    with caplog.at_level("INFO", logger="trainbench.tracking.connection"):
        connect(new)  # an existing store: nothing to say
    assert not [r for r in caplog.records if "new MLflow store" in r.getMessage()]


def _waits(monkeypatch, call) -> tuple[float, str]:
    """(the /health check's timeout, MLflow's HTTP request timeout) that ``call`` sets for a server that
    does not answer; the env is as a fresh process has it."""
    for name in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"):
        monkeypatch.delenv(name, raising=False)
    seen = []

    def health(url, timeout):
        seen.append(timeout)
        raise urllib.error.HTTPError(url, 404, "no /health here (a proxy)", None, None)  # it answered

    def no_server(*a, **k):
        raise ConnectionRefusedError("nothing listens")

    monkeypatch.setattr(urllib.request, "urlopen", health)
    monkeypatch.setattr("mlflow.utils.rest_utils.http_request", no_server)
    with pytest.raises(Exception):  # noqa: B017, PT011 - each caller words the failure its own way
        call()
    return seen[0], os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "")


@pytest.mark.parametrize("timeout_s", [1.0, 7.0])
def test_a_run_and_the_analysis_wait_on_a_server_by_one_rule(monkeypatch, timeout_s):
    from trainbench.analysis.runs import open_experiment

    uri = "http://127.0.0.1:9"
    tracking = SimpleNamespace(uri=uri, experiment="trainbench", timeout_s=timeout_s)
    run = _waits(monkeypatch, lambda: connect(tracking))
    analysis = _waits(monkeypatch, lambda: open_experiment(tracking, uri))
    assert run[0] == timeout_s and analysis == run, (run, analysis)


@pytest.mark.slow
def test_importing_the_tracking_package_loads_no_mlflow():
    code = ("import sys, trainbench.tracking, trainbench.config.run, trainbench.data.download; "
            "print(sorted(m for m in sys.modules if m == 'mlflow' or m.startswith('mlflow.')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
