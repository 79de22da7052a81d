"""A run with secrets in its environment (and referenced by its config) writes none of them anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.procs import child_env
from trainbench.core.vocab import Tag

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-5e1f-93ab-Zq7"
KEY = "db-Kx82Lmq0Pz93Vb"


@pytest.mark.slow
def test_no_secret_in_anything_a_run_writes(tmp_path, shared_data_dir):
    env = child_env(MY_TOKEN=TOKEN, DATABENTO_API_KEY=KEY)
    cmd = [sys.executable, "run.py", "model=dqn", "debug=default", "size=tiny", "trainer.latency.enabled=false",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/artifacts",
           f"paths.mlruns={tmp_path}/mlruns", f"paths.data_dir={shared_data_dir}", f"hydra.run.dir={tmp_path}/out",
           # three ways a secret gets into a run: interpolated from the environment into a tag and params,
           # into a list param and the config artifact, and typed literally on the command line
           "sweep_id=s-${oc.env:MY_TOKEN}", "data.download.symbols=[${oc.env:DATABENTO_API_KEY}]",
           f"trainer.profile=p-{TOKEN}"]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id])
    # the sweep id leaves the secret out where it is derived (one id for the run, its sweep and the summary)
    assert run.data.tags[Tag.SWEEP_ID] == "s-___" and run.data.tags[Tag.TRAINER_PROFILE] == "p-***"
    assert run.data.params["data.download.symbols"] == '["***"]'
    seen = [repr(run.data.params), repr(run.data.tags), repr(sorted(run.data.metrics)), p.stdout, p.stderr]
    dl = tmp_path / "downloaded"
    client.download_artifacts(run.info.run_id, "", str(dl))
    files = [f for f in tmp_path.rglob("*") if f.is_file()]  # store, artifacts, Hydra's .hydra/ and job log
    names = {f.relative_to(tmp_path).as_posix() for f in files}
    assert {"mlflow.db", "out/.hydra/config.yaml", "out/.hydra/hydra.yaml", "out/.hydra/overrides.yaml",
            "out/run.log", "downloaded/config/config.yaml", "downloaded/epochs.json",
            "downloaded/environment.json"} <= names
    assert "***" in (tmp_path / "out" / ".hydra" / "overrides.yaml").read_text()
    for secret in (TOKEN, KEY):
        assert not any(secret in s for s in seen), secret
        leaks = [f.relative_to(tmp_path).as_posix() for f in files if secret.encode() in f.read_bytes()]
        assert leaks == [], (secret, leaks)
