"""MLflow's own conventions (tracking/conventions.py): experiment kind, dataset inputs, system tags, against
a real sqlite store; plus the end-to-end check on a sweep written by run.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from helpers.runs import scratch_store
from trainbench.core.vocab import Outcome, ReportKey, Summary, Tag, data_tag
from trainbench.tracking import conventions
from trainbench.tracking.writer import RunWriter, apply_op

SHA = hashlib.sha256(b"not really a dbn file").hexdigest()
INFO = {"path": "/data/6e_ohlcv_1m.dbn.zst", "schema": "ohlcv-1m", "synthetic": True, "sha256": SHA,
        "n_bars": 3000, "instruments": "6EH4", "start": "2024-01-01T23:00:00", "end": "2024-01-04T02:59:00"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return scratch_store(tmp_path_factory.mktemp("conventions"))


# -- the experiment ----------------------------------------------------------------------------------


def test_an_experiment_is_marked_unless_it_says_what_it_is(store):
    c = store.client
    old = c.get_experiment(c.create_experiment("unmarked"))
    assert conventions.mark_training_experiment(c, old) is True
    assert c.get_experiment(old.experiment_id).tags[conventions.EXPERIMENT_KIND_TAG] == \
        conventions.CUSTOM_MODEL_DEVELOPMENT
    other = c.get_experiment(c.create_experiment(
        "genai-one", tags={conventions.EXPERIMENT_KIND_TAG: "genai_development"}))
    assert conventions.mark_training_experiment(c, other) is False  # a kind someone chose is kept
    assert c.get_experiment(other.experiment_id).tags[conventions.EXPERIMENT_KIND_TAG] == "genai_development"


def test_the_kind_value_is_the_one_mlflows_ui_uses_for_model_training():
    from pathlib import Path

    import mlflow

    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    if not js.is_dir():
        pytest.skip("this mlflow install has no UI bundle")
    found = any(f'CUSTOM_MODEL_DEVELOPMENT="{conventions.CUSTOM_MODEL_DEVELOPMENT}"' in p.read_text(errors="ignore")
                for p in js.glob("*.js"))
    assert found, "MLflow's UI no longer names custom_model_development: check tracking/conventions.py"


# -- the dataset input ---------------------------------------------------------------------------------


def test_dataset_entity_is_the_file_with_its_sha256_and_profile():
    d = conventions.dataset_entity("6e_ohlcv_1m", INFO)
    assert d["name"] == "6e_ohlcv_1m" and d["digest"] == SHA[:36] and d["source_type"] == "local"
    assert json.loads(d["source"]) == {"uri": "/data/6e_ohlcv_1m.dbn.zst"}
    prof = json.loads(d["profile"])
    assert prof == {"format": "dbn", "schema": "ohlcv-1m", "instruments": "6EH4", "start": "2024-01-01T23:00:00",
                    "end": "2024-01-04T02:59:00", "synthetic": True, "sha256": SHA, "num_bars": 3000}


def test_writer_logs_the_dataset_input_with_context_training_also_through_the_spool(store):
    w = RunWriter(store.client, store.exp_id)
    rid = w.start("ds", {"kind": "train"}, {})
    w.log_dataset(conventions.dataset_entity("6e_ohlcv_1m", INFO), context="training")
    w.end(Outcome.COMPLETED)
    inputs = store.client.get_run(rid).inputs.dataset_inputs
    assert [(i.dataset.name, i.dataset.digest) for i in inputs] == [("6e_ohlcv_1m", SHA[:36])]
    assert {t.key: t.value for t in inputs[0].tags} == {"mlflow.data.context": "training"}
    # the spool stores the write as JSON and replays it (idempotent: logged once)
    op = json.loads(json.dumps({"op": "log_inputs", "datasets": [conventions.dataset_entity("6e_ohlcv_1m", INFO)],
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
    w.log_dataset(conventions.dataset_entity("6e_ohlcv_1m", INFO))
    assert w.end(Outcome.COMPLETED) and store.client.get_run(rid).info.status == "FINISHED"
    assert "did not take the run's dataset input" in caplog.text


# -- system tags ---------------------------------------------------------------------------------------


def test_system_tags_name_source_user_and_commit():
    t = conventions.system_tags("run.py", {Tag.GIT_COMMIT: "abc123", Tag.GIT_DIRTY: "false"})
    assert t["mlflow.source.name"] == "run.py" and t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.git.commit"] == "abc123" and t["mlflow.user"]
    assert "mlflow.source.git.commit" not in conventions.system_tags("run.py", {Tag.GIT_COMMIT: "unknown"})


# -- end to end: run.py -m and analyze.py ----------------------------------------------------------------


@pytest.mark.slow
def test_sweep_store_is_native_in_mlflow(default_sweep):
    """The session's real sweep of every registered model and its analysis (tests/conftest.py)."""
    from trainbench.models.registry import REGISTRY

    s = default_sweep
    c, exp_id = s.client, s.exp.experiment_id
    assert s.exp.tags[conventions.EXPERIMENT_KIND_TAG] == conventions.CUSTOM_MODEL_DEVELOPMENT
    # the bars' managed file of the configuration; tlob trains on its own book file beside it
    (book_file,) = (f for f in (s.data_file.parent).glob("*.dbn.zst") if f != s.data_file)
    sha = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in (s.data_file, book_file)}
    (parent,) = c.search_runs([exp_id], "tags.kind = 'sweep'")
    train = c.search_runs([exp_id], "tags.kind = 'train'")
    assert sorted(r.data.tags[Tag.MODEL] for r in train) == REGISTRY.names()
    assert parent.info.run_name == parent.data.tags[Tag.SWEEP_ID] == train[0].data.tags[Tag.SWEEP_ID]
    assert parent.info.status == "FINISHED" and parent.data.metrics[Summary.RUNS_COMPLETED] == len(train)
    for r in train:
        t = r.data.tags
        assert t["mlflow.parentRunId"] == parent.info.run_id
        assert t["mlflow.source.name"] == "run.py" and t["mlflow.source.type"] == "LOCAL" and t["mlflow.user"]
        assert t["mlflow.source.git.commit"] == t[Tag.GIT_COMMIT]
        note = t["mlflow.note.content"]
        assert f"**{t['model']}**" in note and "outcome **completed**" in note and "size `small`" in note
        assert "95% t-interval" in note and "device: cpu" in note
        data_file = book_file if t[Tag.MODEL] == "tlob" else s.data_file
        (inp,) = r.inputs.dataset_inputs
        assert inp.dataset.digest == sha[data_file][:36] and t[data_tag("sha256")] == sha[data_file]
        assert json.loads(inp.dataset.source)["uri"] == str(data_file.resolve())
        if data_file == book_file:  # a book's size is its events
            assert json.loads(inp.dataset.profile)["num_events"] == int(t[data_tag("n_events")])
        else:
            assert json.loads(inp.dataset.profile)["num_bars"] == int(t[data_tag("n_bars")])
        assert {x.key: x.value for x in inp.tags} == {"mlflow.data.context": "training"}
    (analysis,) = c.search_runs([exp_id], "tags.kind = 'analysis'")
    assert analysis.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert analysis.data.params[ReportKey.RECOMMENDATION] == analysis.data.tags[ReportKey.RECOMMENDATION]
    assert analysis.data.params[ReportKey.CONFIDENCE] in ("low", "medium", "high")
    assert {Summary.TOTAL_HOURS, Summary.TOTAL_HOURS_CONSERVATIVE, Summary.CONFIDENCE_LEVEL} <= set(analysis.data.metrics)
    assert conventions.ui_url("http://127.0.0.1:5000", exp_id) in s.stdout
