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


#: The largest logged artifact a rerun reads, by kind: a config or an overrides list is a few KB, an
#: epochs.json some MB; anything larger was not written by run.py and is refused before it is downloaded.
MAX_ARTIFACT_BYTES = {".yaml": 1 << 20, ".json": 32 << 20}
#: A YAML artifact's bounds, checked on its parse events before any object is built: nodes after its aliases
#: are expanded (a "billion laughs" alias bomb expands to billions), and nesting depth.
MAX_YAML_NODES, MAX_YAML_DEPTH = 100_000, 64


def _too_large(run_id: str, path: str, size: int) -> RerunError:
    limit = MAX_ARTIFACT_BYTES[Path(path).suffix]
    return RerunError(f"rerun={run_id}: its {path} artifact is {size:,} bytes, more than the {limit:,} a run.py run "
                      "writes: the run's artifacts were changed or damaged, so it is not read; rerun another run "
                      "of the same config.")


def artifact_text(client: Any, run_id: str, path: str) -> str | None:
    """A text artifact of a run, or None when it has none at ``path``; RerunError when it is larger than
    :data:`MAX_ARTIFACT_BYTES` allows (checked on the store's listing before the download, and on disk)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    limit = MAX_ARTIFACT_BYTES[Path(path).suffix]
    try:
        listed = {f.path: f.file_size for f in client.list_artifacts(run_id, str(Path(path).parent))}
    except Exception:  # noqa: BLE001 - a store that cannot list: the size is checked on disk below
        listed = {}
    if (listed.get(path) or 0) > limit:
        raise _too_large(run_id, path, int(listed[path]))
    with tempfile.TemporaryDirectory(prefix="tb-rerun-") as tmp:
        try:
            local = Path(client.download_artifacts(run_id, path, tmp))
        except Exception:  # noqa: BLE001 - a missing artifact is reported by the caller
            return None
        if not local.is_file():
            return None
        if local.stat().st_size > limit:
            raise _too_large(run_id, path, local.stat().st_size)
        return local.read_text(errors="replace")


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


def check_yaml_bounds(text: str) -> str | None:
    """Why ``text`` is too large to build as YAML, or None: more than :data:`MAX_YAML_NODES` nodes once its
    aliases are expanded (an alias bomb: a few lines that OmegaConf would copy into billions of nodes) or
    nesting deeper than :data:`MAX_YAML_DEPTH`. Read from the parser's events, which build nothing: an
    alias costs the size of its anchor's node, counted, never copied. A syntax error is left to the loader."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, nodes so far] of each open mapping or sequence
    total = 0
    try:
        for ev in yaml.parse(text, Loader=loader):
            if isinstance(ev, yaml.AliasEvent):
                n = sizes.get(ev.anchor, 1)
            elif isinstance(ev, yaml.ScalarEvent):
                n = 1
                if ev.anchor:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, yaml.CollectionStartEvent):
                stack.append([ev.anchor, 1])
                if len(stack) > MAX_YAML_DEPTH:
                    return f"it nests deeper than {MAX_YAML_DEPTH} levels"
                continue
            elif isinstance(ev, yaml.CollectionEndEvent) and stack:
                anchor, n = stack.pop()  # its values are counted in the total already
                if anchor:
                    sizes[anchor] = n
                if stack:
                    stack[-1][1] += n
                continue
            else:
                continue
            total += n
            if stack:
                stack[-1][1] += n
            if total > MAX_YAML_NODES:
                return f"it expands to more than {MAX_YAML_NODES:,} values (YAML aliases repeat a node)"
    except yaml.YAMLError:
        return None
    return None


def parsed(run_id: str, path: str, text: str, kind: type) -> Any:
    """A logged artifact's YAML (``.yaml``) or JSON text as a ``kind`` (dict or list), without resolving
    anything in it; an artifact that does not parse, exceeds the bounds (:data:`MAX_ARTIFACT_BYTES`,
    :func:`check_yaml_bounds`), or is not a ``kind``, is a :class:`RerunError` (one line naming the run, the
    file and the problem), never a parser's traceback or an unbounded parse."""
    if len(text.encode(errors="replace")) > MAX_ARTIFACT_BYTES[Path(path).suffix]:
        raise _too_large(run_id, path, len(text.encode(errors="replace")))
    if not path.endswith(".json"):
        problem = check_yaml_bounds(text)
        if problem:
            raise RerunError(f"rerun={run_id}: its {path} artifact is not read: {problem}, which a config run.py "
                             "writes never does; the run's artifacts were changed or forged, so it cannot be rerun: rerun "
                             "another run of the same config.")
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
