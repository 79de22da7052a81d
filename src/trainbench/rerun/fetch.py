"""Reading the original run from MLflow: the store, its config, overrides, environment and epochs."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from trainbench.core.errors import RerunError, TrackingUnavailable
from trainbench.rerun.names import (
    ARTIFACT_CONFIG,
    ARTIFACT_ENVIRONMENT,
    ARTIFACT_EPOCHS,
    ARTIFACT_OVERRIDES,
    KIND_TRAIN,
    TAG_KIND,
    TAG_MODEL,
)


def store_client(tracking: Any) -> Any:
    """An MlflowClient of the store that ``tracking.*`` names; RerunError when there is none or it is down."""
    from trainbench.core.errors import StoreNotFound
    from trainbench.tracking.connection import open_store

    try:
        return open_store(tracking)
    except StoreNotFound as e:
        raise RerunError(f"{e}: the run to rerun must be in the store that tracking.* names. Use tracking=server "
                         "or tracking.uri=<uri>.") from None
    except TrackingUnavailable as e:
        raise RerunError(str(e)) from None


def artifact_text(client: Any, run_id: str, path: str) -> str | None:
    """A text artifact of a run, or None when it has none at ``path``."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    with tempfile.TemporaryDirectory(prefix="tb-rerun-") as tmp:
        try:
            return Path(client.download_artifacts(run_id, path, tmp)).read_text()
        except Exception:  # noqa: BLE001 - a missing artifact is reported by the caller
            return None


def fetch_original(client: Any, run_id: str) -> tuple[Any, dict[str, Any], list[str], dict[str, Any] | None]:
    """(run, resolved config, overrides, environment.json or None) of a logged training run."""
    try:
        run = client.get_run(run_id)
    except Exception as e:  # noqa: BLE001 - MlflowException(RESOURCE_DOES_NOT_EXIST) and friends
        raise RerunError(f"rerun={run_id}: no such run in the tracking store {client.tracking_uri} "
                         f"({type(e).__name__}). Copy the id from the MLflow UI or `analyze.py`'s report, and "
                         "point tracking.* at the store that holds it.") from None
    tags = run.data.tags
    if tags.get(TAG_KIND, KIND_TRAIN) != KIND_TRAIN or TAG_MODEL not in tags:
        raise RerunError(f"rerun={run_id} is not a training run ({TAG_KIND}={tags.get(TAG_KIND)!r}): only runs "
                         "made by run.py can be rerun.")
    text = artifact_text(client, run_id, ARTIFACT_CONFIG)
    if text is None:
        raise RerunError(f"rerun={run_id}: the run has no {ARTIFACT_CONFIG} artifact (a run from before the "
                         "run contract, or its artifacts are gone), so it cannot be rerun exactly.")
    resolved = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    if not isinstance(resolved, dict):
        raise RerunError(f"rerun={run_id}: its {ARTIFACT_CONFIG} is not a config (a mapping of sections).")
    ov_text = artifact_text(client, run_id, ARTIFACT_OVERRIDES)
    overrides = yaml.safe_load(ov_text) if ov_text else []  # plain strings: never resolved (OmegaConf would)
    if not isinstance(overrides, list):
        overrides = []
    env_text = artifact_text(client, run_id, ARTIFACT_ENVIRONMENT)
    env = json.loads(env_text) if env_text else None
    return run, resolved, [str(o) for o in overrides], env if isinstance(env, dict) else None


def epochs(client: Any, run_id: str) -> dict[str, Any] | None:
    """A run's epochs.json (its per-epoch series), or None when it has none."""
    text = artifact_text(client, run_id, ARTIFACT_EPOCHS)
    return json.loads(text) if text else None
