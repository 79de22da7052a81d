"""MLflow's own conventions, so that trainbench's runs look native in the MLflow UI.

- The experiment is marked as a model-training experiment (the ``mlflow.experimentKind`` tag with the
  value MLflow's UI uses for custom model development), so the UI opens on its training-runs view;
  :func:`~trainbench.tracking.connection.ensure_experiment` sets it as it creates or opens the experiment.
- MLflow's standard system tags: ``mlflow.source.name`` / ``.type`` / ``.git.commit``, ``mlflow.user``,
  ``mlflow.parentRunId`` (a sweep's job under the sweep's parent run: tracking/nesting.py) and
  ``mlflow.note.content`` (the run's description: tracking/run_note.py).
- Each training run logs its data as an MLflow dataset input (context ``training``): the source is the
  DBN file, the digest the file's SHA-256 (cut to the 36 characters MLflow stores), the profile what the
  timings were measured on (schema, instruments, bar count, date range, synthetic).

Nothing here is needed to analyse runs: the analysis still finds training runs by ``sweep_id`` and
``kind=train`` (stores written before these tags existed analyse as before).
"""

from __future__ import annotations

import getpass
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.data.dataset import Dataset
from mlflow.utils.mlflow_tags import (
    MLFLOW_GIT_COMMIT,
    MLFLOW_PARENT_RUN_ID,
    MLFLOW_RUN_NOTE,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
    MLFLOW_USER,
)

from trainbench.core.vocab import Tag
from trainbench.tracking.nesting import parent_run_id

__all__ = ["CUSTOM_MODEL_DEVELOPMENT", "EXPERIMENT_KIND_TAG", "MLFLOW_PARENT_RUN_ID", "MLFLOW_RUN_NOTE",
           "TRAINING_EXPERIMENT_TAGS", "DbnDataset", "dataset_entity", "log_inputs", "mark_training_experiment",
           "native_run_tags", "system_tags", "ui_url"]

#: The experiment tag MLflow's UI reads to choose an experiment's view, and its value for model training
#: (``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT`` in MLflow 3's UI; ``genai_development`` is the GenAI view).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CUSTOM_MODEL_DEVELOPMENT = "custom_model_development"
#: The tags a new experiment is created with.
TRAINING_EXPERIMENT_TAGS: Mapping[str, str] = {EXPERIMENT_KIND_TAG: CUSTOM_MODEL_DEVELOPMENT}
#: The dataset input tag MLflow uses for a dataset's role in a run.
DATASET_CONTEXT_TAG = "mlflow.data.context"
#: MLflow stores a dataset digest of at most this many characters (``MAX_DATASET_DIGEST_SIZE``).
DIGEST_LEN = 36


# --------------------------------------------------------------------------------------------------
# the experiment
# --------------------------------------------------------------------------------------------------


def mark_training_experiment(client: Any, experiment: Any) -> bool:
    """Tag an experiment (as MLflow returned it) as model training unless it already says what it is; True
    when tagged now."""
    if (experiment.tags or {}).get(EXPERIMENT_KIND_TAG):
        return False  # set before (by trainbench, by the user or by the UI's own experiment-type switch)
    client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, CUSTOM_MODEL_DEVELOPMENT)
    return True


def ui_url(base: str, experiment_id: str) -> str:
    """The experiment's training-runs view in MLflow's UI at ``base``.

    MLflow 3.17's UI chooses the view with its sidebar switch (GenAI / Model training, remembered by the
    browser, GenAI at first) rather than the experiment's kind tag; ``workflowType=machine_learning`` in
    the link selects model training.
    """
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


# --------------------------------------------------------------------------------------------------
# system tags
# --------------------------------------------------------------------------------------------------


def user() -> str:
    for name in ("MLFLOW_TRACKING_USERNAME",):  # who the server knows, when auth is on
        if os.environ.get(name):
            return os.environ[name]
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "unknown"


def system_tags(entry_point: str, git: Mapping[str, str] | None = None) -> dict[str, str]:
    """MLflow's standard source tags for a run started by ``entry_point`` (``run.py``, ``analyze.py``)."""
    tags = {MLFLOW_SOURCE_NAME: entry_point, MLFLOW_SOURCE_TYPE: "LOCAL", MLFLOW_USER: user()}
    commit = (git or {}).get(Tag.GIT_COMMIT)
    if commit and commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = commit
    return tags


def _hydra_sweep_dir() -> Path | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(str(HydraConfig.get().sweep.dir))
    except (ImportError, ValueError):
        return None


def native_run_tags(client: Any, experiment_id: str, sweep_id: str, multirun: bool,
                    tags: Mapping[str, str]) -> dict[str, str]:
    """The MLflow system tags of a training run: source, user, commit and, in a sweep, its parent run."""
    out = system_tags("run.py", tags)
    if multirun:
        parent = parent_run_id(client, experiment_id, sweep_id, _hydra_sweep_dir())
        if parent:
            out[MLFLOW_PARENT_RUN_ID] = parent
    return out


# --------------------------------------------------------------------------------------------------
# the dataset input
# --------------------------------------------------------------------------------------------------


class DbnDataset(Dataset):
    """A Databento DBN file as an MLflow dataset: source = the file, digest = its SHA-256 (36 chars)."""

    def __init__(self, name: str, info: Mapping[str, Any]) -> None:
        from mlflow.data.dataset_source_registry import resolve_dataset_source

        self._info = dict(info)
        path = Path(str(info["path"])).resolve()
        # MLflow's source for a local file (LocalArtifactDatasetSource, source type "local")
        with warnings.catch_warnings():  # "can be interpreted in multiple ways": two schemes, one class
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(path))
        super().__init__(source=source, name=name,
                         digest=str(info["sha256"])[:DIGEST_LEN])

    def _compute_digest(self) -> str:  # the digest is always given (the file's SHA-256)
        return str(self._info["sha256"])[:DIGEST_LEN]

    @property
    def profile(self) -> dict[str, Any]:
        i = self._info
        out: dict[str, Any] = {"format": "dbn", "schema": i.get("schema"), "instruments": i.get("instruments"),
                               "start": i.get("start"), "end": i.get("end"),
                               "synthetic": bool(i.get("synthetic")), "sha256": i.get("sha256")}
        if "n_bars" in i:
            out["num_bars"] = int(i["n_bars"])
        if "n_events" in i:
            out["num_events"] = int(i["n_events"])
        return out

    @property
    def schema(self) -> None:  # the DBN schema (ohlcv-1m, mbp-10) is in the profile
        return None

    def to_dict(self) -> dict[str, str]:
        d = super().to_dict()
        d["profile"] = json.dumps(self.profile)
        return d


def dataset_entity(name: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset input of a training run as a JSON-able dict (the unit the writer sends or spools)."""
    e = DbnDataset(name, info)._to_mlflow_entity()
    return {"name": e.name, "digest": e.digest, "source_type": e.source_type, "source": e.source,
            "schema": e.schema, "profile": e.profile}


def log_inputs(client: Any, run_id: str, datasets: list[Mapping[str, Any]], context: str) -> None:
    """Log datasets (dicts from :func:`dataset_entity`) as the run's inputs with the given context."""
    from mlflow.entities import Dataset as DatasetEntity
    from mlflow.entities import DatasetInput, InputTag

    inputs = [DatasetInput(DatasetEntity(**d), tags=[InputTag(DATASET_CONTEXT_TAG, context)]) for d in datasets]
    client.log_inputs(run_id, datasets=inputs)
