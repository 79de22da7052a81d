"""MLflow's own conventions, so that trainbench's runs look native in the MLflow UI.

- The experiment is marked as a model-training experiment (the ``mlflow.experimentKind`` tag with the
  value MLflow's UI uses for custom model development), so the UI opens on its training-runs view.
- Each training run logs its data as an MLflow dataset input (context ``training``): the source is the
  DBN file, the digest the file's SHA-256 (cut to the 36 characters MLflow stores), the profile what the
  timings were measured on (schema, instruments, bar count, date range, synthetic).
- MLflow's standard system tags: ``mlflow.source.name`` / ``.type`` / ``.git.commit``, ``mlflow.user``
  and ``mlflow.note.content`` (the run's description: a short Markdown summary).
- A sweep is a parent run (``kind=sweep``, named after the sweep); every job's run and the sweep's
  analysis run nest under it through ``mlflow.parentRunId``. The parent's id travels to the jobs in a
  file in the sweep folder (which every launcher shares with its jobs, submitit's included), with a
  lookup by ``sweep_id`` in the store as the fallback.

Nothing here is needed to analyse runs: the analysis still finds training runs by ``sweep_id`` and
``kind=train`` (stores written before these tags existed analyse as before).
"""

from __future__ import annotations

import atexit
import getpass
import json
import logging
import math
import os
import time
import warnings
from collections import Counter
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

from trainbench.core.vocab import (
    SWEEP_RUN_FILE,
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

__all__ = ["CUSTOM_MODEL_DEVELOPMENT", "EXPERIMENT_KIND_TAG", "MLFLOW_PARENT_RUN_ID", "MLFLOW_RUN_NOTE",
           "DbnDataset", "RunNote", "SweepRun", "dataset_entity", "find_sweep_run", "mark_training_experiment",
           "native_run_tags", "system_tags", "ui_url"]

log = logging.getLogger(__name__)

#: The experiment tag MLflow's UI reads to choose an experiment's view, and its value for model training
#: (``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT`` in MLflow 3's UI; ``genai_development`` is the GenAI view).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
CUSTOM_MODEL_DEVELOPMENT = "custom_model_development"
#: The dataset input tag MLflow uses for a dataset's role in a run.
DATASET_CONTEXT_TAG = "mlflow.data.context"
#: MLflow stores a dataset digest of at most this many characters (``MAX_DATASET_DIGEST_SIZE``).
DIGEST_LEN = 36


# --------------------------------------------------------------------------------------------------
# the experiment
# --------------------------------------------------------------------------------------------------


def mark_training_experiment(client: Any, experiment_id: str) -> bool:
    """Tag the experiment as model training unless it already says what it is; True when tagged now."""
    exp = client.get_experiment(experiment_id)
    if (exp.tags or {}).get(EXPERIMENT_KIND_TAG):
        return False  # set before (by trainbench, by the user or by the UI's own experiment-type switch)
    client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, CUSTOM_MODEL_DEVELOPMENT)
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


# --------------------------------------------------------------------------------------------------
# the run's description
# --------------------------------------------------------------------------------------------------


def epoch_interval(summary: Mapping[str, float]) -> tuple[float, float] | None:
    """The 95% t-interval of a run's mean epoch time, from its summary metrics (None under 2 epochs)."""
    mean, std, n = (summary.get(k) for k in (Summary.EPOCH_TIME_MS_MEAN, Summary.EPOCH_TIME_MS_STD,
                                             Summary.EPOCHS_MEASURED))
    if mean is None or std is None or n is None or n < 2 or not math.isfinite(std):
        return None
    from scipy import stats

    half = float(stats.t.ppf(0.975, int(n) - 1)) * float(std) / math.sqrt(int(n))
    return float(mean) - half, float(mean) + half


class RunNote:
    """Builds ``mlflow.note.content`` when the run ends (the writer calls it with the outcome)."""

    def __init__(self, model: str, size: Any, device: str, data: str, params: Any = None,
                 precision: str | None = None) -> None:
        self.model, self.size, self.device, self.data, self.params = model, size, device, data, params
        self.precision = precision
        self.summary: Mapping[str, float] = {}
        self.error: str | None = None

    def __call__(self, outcome: str) -> str:
        s = self.summary
        size = f"`{self.size}`" if self.size not in (None, "") else "default (no `model.size` set)"
        if self.params:
            size += f", {int(self.params):,} parameters"
        mean = s.get(Summary.EPOCH_TIME_MS_MEAN)
        if mean is None:
            timing = "no measured epoch"
        else:
            ci = epoch_interval(s)
            n = int(s.get(Summary.EPOCHS_MEASURED, 0))
            timing = f"{mean:.2f} ms mean over {n} measured epoch(s)"
            if ci is not None:  # a t-interval can reach below 0 with few, noisy epochs: time cannot
                timing += f", 95% t-interval of the mean [{max(0.0, ci[0]):.2f}, {ci[1]:.2f}] ms"
        lines = [f"**{self.model}** on `{self.data}` · outcome **{outcome}**", "",
                 f"- model: `{self.model}`, size {size}",
                 f"- device: {self.device}" + (f", precision `{self.precision}`" if self.precision else ""),
                 f"- epoch time: {timing}"]
        if self.error and outcome != Outcome.COMPLETED:
            lines.append(f"- error: {self.error.splitlines()[0][:300]}")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# sweeps as parent runs
# --------------------------------------------------------------------------------------------------


def _sweep_file(sweep_dir: str | Path) -> Path:
    return Path(sweep_dir) / SWEEP_RUN_FILE


def start_sweep_run(client: Any, experiment_id: str, sweep_id: str, sweep_dir: str | Path,
                    overrides: list[str], git: Mapping[str, str] | None = None) -> str:
    """Open the sweep's parent run and leave its id in the sweep folder for the jobs; returns the id.

    Like every run, it never holds the value of a secret environment variable (core/secrets.py)."""
    from trainbench.core.secrets import redact_mapping

    sweep_id = _redact(sweep_id)
    overrides = [_redact(o) for o in overrides]
    cmd = " ".join(["python run.py -m", *overrides])
    tags = redact_mapping({Tag.KIND: Kind.SWEEP, Tag.SWEEP_ID: sweep_id, Tag.OUTCOME: Outcome.RUNNING, **(git or {}),
                           **system_tags("run.py", git), MLFLOW_RUN_NOTE: f"Sweep `{sweep_id}` running: `{cmd}`\n"})
    run = client.create_run(experiment_id, run_name=sweep_id, tags=tags)
    rid = run.info.run_id
    if overrides:
        client.log_batch(rid, params=[_param(ParamKey.SWEEP_OVERRIDES, json.dumps(overrides))])
    folder = Path(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{SWEEP_RUN_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"run_id": rid, Tag.SWEEP_ID: sweep_id, "experiment_id": experiment_id,
                               "tracking_uri": str(client.tracking_uri)}) + "\n")
    tmp.replace(_sweep_file(folder))
    return rid


def _redact(text: str) -> str:
    """``text`` as runs store it: values of secret environment variables replaced by ``***``."""
    from trainbench.core.secrets import redact

    return redact(str(text))


def _param(key: str, value: str) -> Any:
    from mlflow.entities import Param

    return Param(key, value[:6000])


def parent_run_id(client: Any, experiment_id: str, sweep_id: str, sweep_dir: str | Path | None) -> str | None:
    """The id of the sweep's parent run for a job: from the sweep folder, else the newest in the store."""
    sweep_id = _redact(sweep_id)
    if sweep_dir is not None:
        try:
            obj = json.loads(_sweep_file(sweep_dir).read_text())
            if obj.get(Tag.SWEEP_ID) == sweep_id and obj.get("experiment_id") == experiment_id and obj.get("run_id"):
                return str(obj["run_id"])
        except (OSError, ValueError):
            pass
    return find_sweep_run(client, experiment_id, sweep_id)


def find_sweep_run(client: Any, experiment_id: str, sweep_id: str) -> str | None:
    """The newest parent run (``kind=sweep``) of ``sweep_id`` in the experiment, if any."""
    sweep_id = _redact(sweep_id)
    if "'" in sweep_id or "\\" in sweep_id:
        return None
    try:
        runs = client.search_runs([experiment_id], tag_filter({Tag.KIND: Kind.SWEEP, Tag.SWEEP_ID: sweep_id}),
                                  max_results=1, order_by=["attributes.start_time DESC"])
    except Exception as e:  # noqa: BLE001 - nesting is a convenience: never fail a job or an analysis on it
        log.debug("cannot look up the parent run of sweep %s: %s", sweep_id, e)
        return None
    return runs[0].info.run_id if runs else None


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

    sweep_id = _redact(sweep_id)
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
    def start(cls, tracking: Any, sweep_id: str, sweep_dir: str | Path, overrides: list[str],
              root: str | None = None) -> SweepRun | None:
        """Open the parent run; None (with a warning) when it cannot be written: jobs then run unnested."""
        from trainbench.tracking.connection import connect

        try:
            client, exp_id = connect(tracking)
            mark_training_experiment(client, exp_id)
            git = None
            if root:
                from trainbench.core.gitstate import git_state

                git = git_state(root)
            rid = start_sweep_run(client, exp_id, sweep_id, sweep_dir, overrides, git)
        except Exception as e:  # noqa: BLE001 - the sweep's jobs run without a parent rather than not at all
            log.warning("could not open the sweep's parent run in MLflow (%s); the jobs run without one", e)
            return None
        return cls(client, exp_id, sweep_id, rid)

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
