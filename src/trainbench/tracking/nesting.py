"""Which run a sweep's jobs nest under: the sweep's parent run, found through the sweep folder or the store.

A sweep is a parent run (``kind=sweep``, named after the sweep; trainbench.sweep.parent opens and ends
it); every job's run and the sweep's analysis run nest under it through ``mlflow.parentRunId``. The
parent's id travels to the jobs in a file in the sweep folder (which every launcher shares with its
jobs, submitit's included), with a lookup by ``sweep_id`` in the store as the fallback. Sweep ids are
matched as runs store them: with the values of secret environment variables replaced (core/secrets.py).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from trainbench.core.secrets import redact
from trainbench.core.vocab import SWEEP_RUN_FILE, Kind, Tag, tag_filter

log = logging.getLogger(__name__)


def sweep_run_file(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / SWEEP_RUN_FILE


def write_sweep_run_file(sweep_dir: str | Path, run_id: str, sweep_id: str, experiment_id: str,
                         tracking_uri: str) -> None:
    """Leave the parent run's id in the sweep folder for the jobs (written whole, then renamed)."""
    folder = Path(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{SWEEP_RUN_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"run_id": run_id, Tag.SWEEP_ID: redact(sweep_id), "experiment_id": experiment_id,
                               "tracking_uri": tracking_uri}) + "\n")
    tmp.replace(sweep_run_file(folder))


def parent_run_id(client: Any, experiment_id: str, sweep_id: str, sweep_dir: str | Path | None) -> str | None:
    """The id of the sweep's parent run for a job: from the sweep folder, else the newest in the store."""
    sweep_id = redact(str(sweep_id))
    if sweep_dir is not None:
        try:
            obj = json.loads(sweep_run_file(sweep_dir).read_text())
            if obj.get(Tag.SWEEP_ID) == sweep_id and obj.get("experiment_id") == experiment_id and obj.get("run_id"):
                return str(obj["run_id"])
        except (OSError, ValueError):
            pass
    return find_sweep_run(client, experiment_id, sweep_id)


def find_sweep_run(client: Any, experiment_id: str, sweep_id: str) -> str | None:
    """The newest parent run (``kind=sweep``) of ``sweep_id`` in the experiment, if any."""
    sweep_id = redact(str(sweep_id))
    if "'" in sweep_id or "\\" in sweep_id:
        return None
    try:
        runs = client.search_runs([experiment_id], tag_filter({Tag.KIND: Kind.SWEEP, Tag.SWEEP_ID: sweep_id}),
                                  max_results=1, order_by=["attributes.start_time DESC"])
    except Exception as e:  # noqa: BLE001 - nesting is a convenience: never fail a job or an analysis on it
        log.debug("cannot look up the parent run of sweep %s: %s", sweep_id, e)
        return None
    return runs[0].info.run_id if runs else None
