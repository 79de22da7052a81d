"""Reading the original run from MLflow: the store, its config, overrides, environment and epochs."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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
    resolved = parsed(run_id, ARTIFACT_CONFIG, text, dict)
    ov_text = artifact_text(client, run_id, ARTIFACT_OVERRIDES)
    overrides = parsed(run_id, ARTIFACT_OVERRIDES, ov_text, list) if ov_text else []
    env_text = artifact_text(client, run_id, ARTIFACT_ENVIRONMENT)
    env = parsed(run_id, ARTIFACT_ENVIRONMENT, env_text, dict) if env_text else None
    return run, resolved, [str(o) for o in overrides], env


def epochs(client: Any, run_id: str) -> dict[str, Any] | None:
    """A run's epochs.json (its per-epoch series), or None when it has none."""
    text = artifact_text(client, run_id, ARTIFACT_EPOCHS)
    return parsed(run_id, ARTIFACT_EPOCHS, text, dict) if text else None


def parsed(run_id: str, path: str, text: str, kind: type) -> Any:
    """A logged artifact's YAML (``.yaml``) or JSON text as a ``kind`` (dict or list), without resolving
    anything in it; an artifact that does not parse, or is not a ``kind``, is a :class:`RerunError` (one
    line naming the run, the file and the problem), never a parser's traceback."""
    try:
        if path.endswith(".json"):
            value = json.loads(text)
        else:
            node = OmegaConf.create(text)
            value = OmegaConf.to_container(node, resolve=False)
    except Exception as e:  # noqa: BLE001 - yaml's, OmegaConf's and json's errors alike
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise RerunError(f"rerun={run_id}: its {path} artifact is not valid {'JSON' if path.endswith('.json') else 'YAML'} "
                         f"({type(e).__name__}: {first}); the run's artifacts were changed or damaged, so it "
                         "cannot be rerun exactly: rerun another run of the same config.") from None
    if not isinstance(value, kind):
        raise RerunError(f"rerun={run_id}: its {path} artifact holds a {type(value).__name__}, not a "
                         f"{'mapping' if kind is dict else 'list'}; the run's artifacts were changed or damaged, so "
                         "it cannot be rerun exactly: rerun another run of the same config.")
    return value
