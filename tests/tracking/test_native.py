"""MLflow's own conventions (tracking/native.py): experiment kind, dataset inputs, system tags, run
descriptions and sweeps as parent runs, against a real sqlite store; plus the end-to-end check on a
sweep written by run.py."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from trainbench.core.vocab import Artifact, Outcome, ParamKey, ReportKey, Summary, Tag, data_tag
from trainbench.tracking import native
from trainbench.tracking.connection import connect
from trainbench.tracking.writer import RunWriter, apply_op

SHA = hashlib.sha256(b"not really a dbn file").hexdigest()
INFO = {"path": "/data/6e_ohlcv_1m.dbn.zst", "schema": "ohlcv-1m", "synthetic": True, "sha256": SHA,
        "n_bars": 3000, "instruments": "6EH4", "start": "2024-01-01T23:00:00", "end": "2024-01-04T02:59:00"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    uri = f"sqlite:///{root}/mlflow.db"
    tracking = SimpleNamespace(uri=uri, experiment="trainbench", artifact_location=str(root / "artifacts"),
                               timeout_s=5.0)
    client, exp_id = connect(tracking)
    return SimpleNamespace(root=root, uri=uri, tracking=tracking, client=client, exp_id=exp_id)


def _train_run(store, sweep_id, outcome=Outcome.COMPLETED, parent=None, job="0"):
    tags = {Tag.KIND: "train", Tag.MODEL: "dqn", Tag.SWEEP_ID: sweep_id, Tag.JOB: job, Tag.OUTCOME: outcome}
    if parent:
        tags[native.MLFLOW_PARENT_RUN_ID] = parent
    run = store.client.create_run(store.exp_id, run_name=f"{sweep_id}-{job}", tags=tags)
    store.client.set_terminated(run.info.run_id, {Outcome.COMPLETED: "FINISHED", Outcome.INTERRUPTED: "KILLED"}.get(
        outcome, "FAILED"))
    return run.info.run_id


# -- the experiment ----------------------------------------------------------------------------------


def test_connect_marks_new_and_existing_experiments_as_model_training(store):
    assert store.client.get_experiment(store.exp_id).tags[native.EXPERIMENT_KIND_TAG] == "custom_model_development"
    # an experiment made before (without the tag) gets it when a run next connects to it
    old = store.client.create_experiment("made-earlier")
    assert native.EXPERIMENT_KIND_TAG not in store.client.get_experiment(old).tags
    connect(SimpleNamespace(**{**vars(store.tracking), "experiment": "made-earlier"}))
    assert store.client.get_experiment(old).tags[native.EXPERIMENT_KIND_TAG] == native.CUSTOM_MODEL_DEVELOPMENT
    # a kind someone chose is kept
    other = store.client.create_experiment("genai-one", tags={native.EXPERIMENT_KIND_TAG: "genai_development"})
    assert native.mark_training_experiment(store.client, other) is False
    assert store.client.get_experiment(other).tags[native.EXPERIMENT_KIND_TAG] == "genai_development"


def test_the_kind_value_is_the_one_mlflows_ui_uses_for_model_training():
    from pathlib import Path

    import mlflow

    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    if not js.is_dir():
        pytest.skip("this mlflow install has no UI bundle")
    found = any(f'CUSTOM_MODEL_DEVELOPMENT="{native.CUSTOM_MODEL_DEVELOPMENT}"' in p.read_text(errors="ignore")
                for p in js.glob("*.js"))
    assert found, "MLflow's UI no longer names custom_model_development: check tracking/native.py"


# -- the dataset input ---------------------------------------------------------------------------------


def test_dataset_entity_is_the_file_with_its_sha256_and_profile():
    d = native.dataset_entity("6e_ohlcv_1m", INFO)
    assert d["name"] == "6e_ohlcv_1m" and d["digest"] == SHA[:36] and d["source_type"] == "local"
    assert json.loads(d["source"]) == {"uri": "/data/6e_ohlcv_1m.dbn.zst"}
    prof = json.loads(d["profile"])
    assert prof == {"format": "dbn", "schema": "ohlcv-1m", "instruments": "6EH4", "start": "2024-01-01T23:00:00",
                    "end": "2024-01-04T02:59:00", "synthetic": True, "sha256": SHA, "num_bars": 3000}


def test_writer_logs_the_dataset_input_with_context_training_also_through_the_spool(store):
    w = RunWriter(store.client, store.exp_id)
    rid = w.start("ds", {"kind": "train"}, {})
    w.log_dataset(native.dataset_entity("6e_ohlcv_1m", INFO), context="training")
    w.end(Outcome.COMPLETED)
    inputs = store.client.get_run(rid).inputs.dataset_inputs
    assert [(i.dataset.name, i.dataset.digest) for i in inputs] == [("6e_ohlcv_1m", SHA[:36])]
    assert {t.key: t.value for t in inputs[0].tags} == {"mlflow.data.context": "training"}
    # the spool stores the write as JSON and replays it (idempotent: logged once)
    op = json.loads(json.dumps({"op": "log_inputs", "datasets": [native.dataset_entity("6e_ohlcv_1m", INFO)],
                                "context": "training"}))
    apply_op(store.client, rid, op)
    assert len(store.client.get_run(rid).inputs.dataset_inputs) == 1


def test_a_store_that_refuses_dataset_inputs_does_not_fail_the_run(store, monkeypatch, caplog):
    from mlflow.exceptions import MlflowException

    w = RunWriter(store.client, store.exp_id)
    rid = w.start("old-server", {"kind": "train"}, {})

    def refuse(*a, **k):
        raise MlflowException("log_inputs is not supported by this server", error_code="ENDPOINT_NOT_FOUND")

    monkeypatch.setattr(store.client, "log_inputs", refuse)
    w.log_dataset(native.dataset_entity("6e_ohlcv_1m", INFO))
    assert w.end(Outcome.COMPLETED) and store.client.get_run(rid).info.status == "FINISHED"
    assert "did not take the run's dataset input" in caplog.text


# -- system tags and the description -----------------------------------------------------------------


def test_system_tags_name_source_user_and_commit():
    t = native.system_tags("run.py", {Tag.GIT_COMMIT: "abc123", Tag.GIT_DIRTY: "false"})
    assert t["mlflow.source.name"] == "run.py" and t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.git.commit"] == "abc123" and t["mlflow.user"]
    assert "mlflow.source.git.commit" not in native.system_tags("run.py", {Tag.GIT_COMMIT: "unknown"})


def test_run_note_says_model_size_device_epoch_time_with_interval_and_outcome():
    note = native.RunNote("tft", None, "NVIDIA H200", "6e_ohlcv_1m", params=123456, precision="bf16")
    note.summary = {Summary.EPOCH_TIME_MS_MEAN: 10.0, Summary.EPOCH_TIME_MS_STD: 1.0, Summary.EPOCHS_MEASURED: 100}
    text = note(Outcome.COMPLETED)
    assert "**tft**" in text and "outcome **completed**" in text and "NVIDIA H200, precision `bf16`" in text
    assert "default (no `model.size` set)" in text and "123,456 parameters" in text
    lo, hi = native.epoch_interval(note.summary)
    assert lo == pytest.approx(10 - 1.984217 * 0.1, rel=1e-5) and hi == pytest.approx(10 + 1.984217 * 0.1, rel=1e-5)
    assert f"[{lo:.2f}, {hi:.2f}] ms" in text
    sized = native.RunNote("tft", "paper", "cpu", "6e_ohlcv_1m")
    sized.error = "OutOfMemoryError: CUDA out of memory\nmore"
    text = sized(Outcome.OOM)
    assert "size `paper`" in text and "no measured epoch" in text and "error: OutOfMemoryError" in text
    assert native.epoch_interval({Summary.EPOCH_TIME_MS_MEAN: 5.0, Summary.EPOCH_TIME_MS_STD: 0.0, Summary.EPOCHS_MEASURED: 1}) is None


def test_writer_end_writes_the_description_and_a_broken_one_never_costs_the_status(store):
    w = RunWriter(store.client, store.exp_id)
    rid = w.start("note", {"kind": "train"}, {})
    w.describe = lambda outcome: f"ended {outcome}"
    w.end(Outcome.DIVERGED)
    run = store.client.get_run(rid)
    assert run.data.tags["mlflow.note.content"] == "ended diverged" and run.info.status == "FAILED"
    w = RunWriter(store.client, store.exp_id)
    rid = w.start("note2", {"kind": "train"}, {})
    w.describe = lambda outcome: 1 / 0
    w.end(Outcome.COMPLETED)
    run = store.client.get_run(rid)
    assert run.info.status == "FINISHED" and "mlflow.note.content" not in run.data.tags


# -- sweeps as parent runs ----------------------------------------------------------------------------


def test_sweep_parent_reaches_jobs_through_the_sweep_folder_or_the_store(store, tmp_path):
    rid = native.start_sweep_run(store.client, store.exp_id, "sw-a", tmp_path / "multi", ["model=dqn,ppo"],
                                 {Tag.GIT_COMMIT: "abc"})
    run = store.client.get_run(rid)
    assert run.info.run_name == "sw-a" and run.data.tags[Tag.KIND] == "sweep" and run.info.status == "RUNNING"
    assert run.data.tags["mlflow.source.git.commit"] == "abc"
    assert json.loads(run.data.params[ParamKey.SWEEP_OVERRIDES]) == ["model=dqn,ppo"]
    assert native.parent_run_id(store.client, store.exp_id, "sw-a", tmp_path / "multi") == rid
    # another machine without the folder: found in the store by sweep_id
    assert native.parent_run_id(store.client, store.exp_id, "sw-a", tmp_path / "elsewhere") == rid
    # a stale file of another sweep is not trusted
    assert native.parent_run_id(store.client, store.exp_id, "sw-b", tmp_path / "multi") is None
    assert native.find_sweep_run(store.client, store.exp_id, "it's") is None


def test_sweep_parent_holds_no_secret_and_is_still_found(store, tmp_path, monkeypatch):
    token = "tok-3f9a8b7c6d5e"
    monkeypatch.setenv("MY_TOKEN", token)
    sid = f"s-{token}"
    rid = native.start_sweep_run(store.client, store.exp_id, sid, tmp_path, [f"trainer.profile=p-{token}"])
    native.end_sweep_run(store.client, store.exp_id, rid, sid)
    run = store.client.get_run(rid)
    seen = repr((run.info.run_name, run.data.tags, run.data.params)) + (tmp_path / native.SWEEP_RUN_FILE).read_text()
    assert token not in seen and run.data.tags[Tag.SWEEP_ID] == "s-***"
    assert native.parent_run_id(store.client, store.exp_id, sid, tmp_path) == rid
    assert native.parent_run_id(store.client, store.exp_id, sid, None) == rid


@pytest.mark.parametrize(("outcomes", Outcome.INTERRUPTED, "status", "outcome"), [
    ([Outcome.COMPLETED, Outcome.COMPLETED], False, "FINISHED", Outcome.COMPLETED),
    ([Outcome.COMPLETED, Outcome.FAILED], False, "FAILED", Outcome.FAILED),
    ([Outcome.COMPLETED, Outcome.INTERRUPTED], False, "KILLED", Outcome.INTERRUPTED),
    ([Outcome.COMPLETED], True, "KILLED", Outcome.INTERRUPTED),
    ([], False, "FAILED", Outcome.FAILED),
])
def test_sweep_parent_carries_the_summary_and_ends_with_the_sweeps_status(store, tmp_path, outcomes,
                                                                          interrupted, status, outcome):
    sid = f"sw-{len(outcomes)}-{'-'.join(outcomes)}-{interrupted}"
    rid = native.start_sweep_run(store.client, store.exp_id, sid, tmp_path, [])
    for i, o in enumerate(outcomes):
        _train_run(store, sid, o, parent=rid, job=str(i))
    _train_run(store, sid, Outcome.FAILED, job="9")  # same sweep_id, not nested (another invocation): not counted
    assert native.end_sweep_run(store.client, store.exp_id, rid, sid, interrupted) == outcome
    run = store.client.get_run(rid)
    assert run.info.status == status and run.data.tags[Tag.OUTCOME] == outcome
    assert run.data.metrics[Summary.RUNS] == len(outcomes)
    assert run.data.metrics[Summary.RUNS_COMPLETED] == outcomes.count(Outcome.COMPLETED)
    for k, v in Counter(o for o in outcomes if o != Outcome.COMPLETED).items():
        assert run.data.metrics[f"runs_{k}"] == v
    assert f"Sweep `{sid}`: **{outcome}**" in run.data.tags["mlflow.note.content"]
    assert Artifact.SWEEP_SUMMARY in {a.path for a in store.client.list_artifacts(rid)}


def test_sweep_run_left_open_is_closed_as_interrupted_at_exit(store, tmp_path):
    sweep = native.SweepRun.start(store.tracking, "sw-exit", tmp_path, ["model=dqn"])
    assert sweep is not None
    sweep._at_exit()  # what the exit handler does when the end-of-sweep callback never ran
    assert store.client.get_run(sweep.run_id).info.status == "KILLED"
    assert sweep.end() is None  # once only


def test_sweep_run_that_cannot_be_written_lets_the_sweep_run_unnested(tmp_path, caplog):
    bad = SimpleNamespace(uri="http://127.0.0.1:9/", experiment="x", timeout_s=0.5)
    assert native.SweepRun.start(bad, "sw", tmp_path, []) is None
    assert "without one" in caplog.text


# -- end to end: run.py -m and analyze.py ----------------------------------------------------------------


@pytest.mark.slow
def test_sweep_store_is_native_in_mlflow(native_sweep):
    s = native_sweep
    c, exp_id = s.client, s.exp.experiment_id
    assert s.exp.tags[native.EXPERIMENT_KIND_TAG] == native.CUSTOM_MODEL_DEVELOPMENT
    sha = hashlib.sha256(s.data_file.read_bytes()).hexdigest()
    (parent,) = c.search_runs([exp_id], "tags.kind = 'sweep'")
    train = c.search_runs([exp_id], "tags.kind = 'train'")
    assert sorted(r.data.tags[Tag.MODEL] for r in train) == ["dqn", "ppo"]
    assert parent.info.run_name == parent.data.tags[Tag.SWEEP_ID] == train[0].data.tags[Tag.SWEEP_ID]
    assert parent.info.status == "FINISHED" and parent.data.metrics[Summary.RUNS_COMPLETED] == 2
    for r in train:
        t = r.data.tags
        assert t["mlflow.parentRunId"] == parent.info.run_id
        assert t["mlflow.source.name"] == "run.py" and t["mlflow.source.type"] == "LOCAL" and t["mlflow.user"]
        assert t["mlflow.source.git.commit"] == t[Tag.GIT_COMMIT]
        note = t["mlflow.note.content"]
        assert f"**{t['model']}**" in note and "outcome **completed**" in note and "size `small`" in note
        assert "95% t-interval" in note and "device: cpu" in note
        (inp,) = r.inputs.dataset_inputs
        assert inp.dataset.digest == sha[:36] and t[data_tag("sha256")] == sha
        assert json.loads(inp.dataset.source)["uri"] == str(s.data_file.resolve())
        assert json.loads(inp.dataset.profile)["num_bars"] == int(t[data_tag("n_bars")])
        assert {x.key: x.value for x in inp.tags} == {"mlflow.data.context": "training"}
    (analysis,) = c.search_runs([exp_id], "tags.kind = 'analysis'")
    assert analysis.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert analysis.data.params[ReportKey.RECOMMENDATION] == analysis.data.tags[ReportKey.RECOMMENDATION]
    assert analysis.data.params[ReportKey.CONFIDENCE] in ("low", "medium", "high")
    assert {Summary.TOTAL_HOURS, Summary.TOTAL_HOURS_CONSERVATIVE, Summary.CONFIDENCE_LEVEL} <= set(analysis.data.metrics)
    assert native.ui_url("http://127.0.0.1:5000", exp_id) in s.stdout
