"""Reading the original from MLflow: an unknown run, a run that is not a training run, no store."""

from __future__ import annotations

import pytest

from trainbench.core.errors import RerunError
from trainbench.core.vocab import Tag
from trainbench.rerun.orchestrate import prepare_rerun


def test_unknown_or_non_training_runs_are_refused(tmp_path, store, rerun_composition):
    uri, client, exp = store
    with pytest.raises(RerunError, match="no such run"):
        prepare_rerun(rerun_composition(uri, "0" * 32), [], out=lambda s: None)
    rid = client.create_run(exp, tags={Tag.KIND: "analysis"}).info.run_id
    with pytest.raises(RerunError, match="not a training run"):
        prepare_rerun(rerun_composition(uri, rid), [], out=lambda s: None)
    with pytest.raises(RerunError, match="no MLflow store"):
        prepare_rerun(rerun_composition(f"sqlite:///{tmp_path}/none/mlflow.db", rid), [], out=lambda s: None)
