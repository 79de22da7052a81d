"""The sweep's parent run in MLflow: opened before a ``-m`` sweep's jobs, ended with the sweep's summary.

The parent (``kind=sweep``, named after the sweep) carries the command line, the git state and, at the
end, every job's outcome and epoch time (its description and ``sweep_summary.md``), the run counts as
metrics, and the sweep's status: ``completed`` when every run completed, ``interrupted`` when runs were
only interrupted (or the sweep was stopped), else ``failed``. Jobs find it and nest under it
(trainbench.tracking.nesting). Like every run, it never holds the value of a secret environment variable
(core/secrets.py).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainbench.core.secrets import redact, redact_mapping
from trainbench.core.vocab import (
    SWEEP_STATUS,
    Artifact,
    Kind,
    Outcome,
    ParamKey,
    Summary,
    Tag,
    runs_with,
    tag_filter,
)
from trainbench.tracking.conventions import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NOTE, system_tags
from trainbench.tracking.nesting import write_sweep_run_file

log = logging.getLogger(__name__)


def start_sweep_run(client: Any, experiment_id: str, sweep_id: str, sweep_dir: str | Path,
                    overrides: list[str], git: Mapping[str, str] | None = None) -> str:
    """Open the sweep's parent run and leave its id in the sweep folder for the jobs; returns the id."""
    sweep_id = redact(str(sweep_id))
    overrides = [redact(str(o)) for o in overrides]
    cmd = " ".join(["python run.py -m", *overrides])
    tags = redact_mapping({Tag.KIND: Kind.SWEEP, Tag.SWEEP_ID: sweep_id, Tag.OUTCOME: Outcome.RUNNING, **(git or {}),
                           # who holds it open: the analysis tells a live sweep from a killed one by them
                           Tag.SWEEP_HOST: socket.gethostname(), Tag.SWEEP_PID: str(os.getpid()),
                           **system_tags("run.py", git), MLFLOW_RUN_NOTE: f"Sweep `{sweep_id}` running: `{cmd}`\n"})
    run = client.create_run(experiment_id, run_name=sweep_id, tags=tags)
    rid = run.info.run_id
    if overrides:
        client.log_batch(rid, params=[_param(ParamKey.SWEEP_OVERRIDES, json.dumps(overrides))])
    write_sweep_run_file(sweep_dir, rid, sweep_id, experiment_id, str(client.tracking_uri))
    return rid


def _param(key: str, value: str) -> Any:
    from mlflow.entities import Param

    return Param(key, value[:6000])


def sweep_outcome(outcomes: Counter) -> str:
    """``completed`` when every run completed; ``interrupted`` when runs were only interrupted; else failed."""
    if outcomes and set(outcomes) == {Outcome.COMPLETED}:
        return Outcome.COMPLETED
    bad = {k for k in outcomes if k != Outcome.COMPLETED}
    if bad and bad <= {Outcome.INTERRUPTED, Outcome.RUNNING}:
        return Outcome.INTERRUPTED
    return Outcome.FAILED


def end_sweep_run(client: Any, experiment_id: str, run_id: str, sweep_id: str,
                  interrupted: bool = False) -> str:
    """Log the sweep's summary on its parent run and end it with the sweep's status; returns the outcome."""
    from mlflow.entities import Metric, RunTag

    sweep_id = redact(str(sweep_id))
    children = client.search_runs([experiment_id], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{run_id}' and "
                                  + tag_filter({Tag.KIND: Kind.TRAIN}), max_results=10_000)
    children.sort(key=lambda r: int(r.data.tags.get(Tag.JOB, 0)) if str(r.data.tags.get(Tag.JOB, "")).isdigit() else 0)
    outcomes = Counter(r.data.tags.get(Tag.OUTCOME, r.info.status.lower()) for r in children)
    outcome = Outcome.INTERRUPTED if interrupted else sweep_outcome(outcomes)
    rows = ["| job | model | outcome | epoch ms (mean) | run |", "|---|---|---|---|---|"]
    for r in children:
        t, mean = r.data.tags, r.data.metrics.get(Summary.EPOCH_TIME_MS_MEAN)
        rows.append(f"| {t.get(Tag.JOB, '?')} | {t.get(Tag.MODEL, '?')} | {t.get(Tag.OUTCOME, '?')} | "
                    f"{'–' if mean is None else f'{mean:.2f}'} | {r.info.run_id[:8]} |")
    counts = ", ".join(f"{v} {k}" for k, v in sorted(outcomes.items())) or "no runs"
    note = (f"Sweep `{sweep_id}`: **{outcome}** · {len(children)} run(s): {counts}\n\n" + "\n".join(rows) + "\n\n"
            f"Analyse it with `python analyze.py sweep={sweep_id}`.\n")
    ts = int(time.time() * 1000)
    done = outcomes.get(Outcome.COMPLETED, 0)
    metrics = [Metric(Summary.RUNS, float(len(children)), ts, 0),
               Metric(Summary.RUNS_COMPLETED, float(done), ts, 0),
               Metric(Summary.RUNS_NOT_COMPLETED, float(len(children) - done), ts, 0)]
    metrics += [Metric(runs_with(k), float(v), ts, 0) for k, v in outcomes.items() if k != Outcome.COMPLETED]
    client.log_batch(run_id, metrics=metrics, tags=[RunTag(Tag.OUTCOME, outcome), RunTag(MLFLOW_RUN_NOTE, note)])
    client.log_text(run_id, note, Artifact.SWEEP_SUMMARY)
    client.set_terminated(run_id, status=SWEEP_STATUS[outcome])
    return outcome


class SweepRun:
    """The parent run of one ``-m`` invocation, as the Hydra callback holds it.

    If the sweep process ends without Hydra's end-of-sweep callback (Ctrl-C, an exception in the
    launcher), an exit handler closes the parent as ``interrupted`` so it is not left RUNNING.
    """

    def __init__(self, client: Any, experiment_id: str, sweep_id: str, run_id: str) -> None:
        self.client, self.experiment_id, self.sweep_id, self.run_id = client, experiment_id, sweep_id, run_id
        self.ended = False
        atexit.register(self._at_exit)

    @classmethod
    def start(cls, client: Any, experiment_id: str, sweep_id: str, sweep_dir: str | Path, overrides: list[str],
              root: str | None = None) -> SweepRun | None:
        """Open the parent run in the store the sweep connected to; None (with a warning) when it cannot be
        written: jobs then run unnested."""
        try:
            git = None
            if root:
                from trainbench.core.gitstate import git_state

                git = git_state(root)
            rid = start_sweep_run(client, experiment_id, sweep_id, sweep_dir, overrides, git)
        except Exception as e:  # noqa: BLE001 - the sweep's jobs run without a parent rather than not at all
            log.warning("could not open the sweep's parent run in MLflow (%s); the jobs run without one", e)
            return None
        return cls(client, experiment_id, sweep_id, rid)

    def end(self, interrupted: bool = False) -> str | None:
        if self.ended:
            return None
        self.ended = True
        try:
            return end_sweep_run(self.client, self.experiment_id, self.run_id, self.sweep_id, interrupted)
        except Exception as e:  # noqa: BLE001 - the runs themselves are recorded; only the summary is lost
            log.warning("could not close the sweep's parent run %s in MLflow: %s", self.run_id, e)
            return None

    def _at_exit(self) -> None:
        if not self.ended:
            self.end(interrupted=True)
