"""The writer's spool: a store that goes away mid-run loses nothing; `trainbench sync` uploads leftovers."""

import json

import pytest
from mlflow.exceptions import MlflowException

from helpers.runs import metric_steps
from trainbench.cli import main as cli_main
from trainbench.core.vocab import Artifact, Outcome, ParamKey, Series, Summary, Tag
from trainbench.tracking.connection import is_transient, retry
from trainbench.tracking.spool import Spool, find_spools
from trainbench.tracking.writer import RunWriter

WRITES = ("log_batch", "log_text", "log_dict", "log_artifact", "set_terminated")


class FlakyClient:
    """A real MlflowClient whose writes fail like an unreachable server while ``down`` is set."""

    def __init__(self, client):
        self._client, self.down, self.refused = client, False, 0

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if name not in WRITES:
            return attr

        def call(*a, **kw):
            if self.down:
                self.refused += 1
                raise MlflowException("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch "
                                      "failed with exception HTTPConnectionPool: Max retries exceeded "
                                      "(Connection refused)")
            return attr(*a, **kw)
        return call


def test_store_down_mid_run_spools_and_resends_when_back(store, tmp_path):
    client, exp = store
    flaky = FlakyClient(client)
    w = RunWriter(flaky, exp, flush_every=2, spool_dir=tmp_path / "spool", spool_wait_s=0, resend_every_s=0)
    run_id = w.start("r", {"model": "dqn"}, {"trainer.epochs": "12"})
    for step in range(4):
        w.log_epoch(step, {Series.LOSS: float(step), Series.EPOCH_TIME_MS: 1.0})
    flaky.down = True
    for step in range(4, 8):
        w.log_epoch(step, {Series.LOSS: float(step), Series.EPOCH_TIME_MS: 1.0})
    w.set_tags({"phase": "down"})
    assert metric_steps(client, run_id) == [0, 1, 2, 3]  # the store has not seen the rest ...
    spool = w.spool_path
    assert spool is not None and len(Spool(spool).ops()) == 3  # ... it is on disk, in order
    assert [op["op"] for op in Spool(spool).ops()] == ["log_batch"] * 3
    flaky.down = False
    for step in range(8, 10):  # the first flush after the store is back sends the spool first
        w.log_epoch(step, {Series.LOSS: float(step), Series.EPOCH_TIME_MS: 1.0})
    assert metric_steps(client, run_id) == list(range(10)) and not spool.exists() and w.spool_path is None
    for step in range(10, 12):
        w.log_epoch(step, {Series.LOSS: float(step), Series.EPOCH_TIME_MS: 1.0})
    assert w.end(Outcome.COMPLETED)
    run = client.get_run(run_id)
    assert metric_steps(client, run_id) == list(range(12)) and metric_steps(client, run_id, Series.EPOCH_TIME_MS) == list(range(12))
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "down"


def test_store_never_back_leaves_a_spool_that_sync_uploads(store, tmp_path, capsys):
    client, exp = store
    flaky = FlakyClient(client)
    w = RunWriter(flaky, exp, flush_every=3, spool_dir=tmp_path / "spool", spool_wait_s=0, resend_every_s=0)
    run_id = w.start("r", {"model": "ppo"}, {})
    w.log_epoch(0, {Series.LOSS: 0.0})
    flaky.down = True
    for step in range(1, 7):
        w.log_epoch(step, {Series.LOSS: float(step)})
    w.log_summary({Summary.EPOCH_TIME_MS_MEAN: 3.5})
    w.log_text('{"epoch_time_ms": [1, 2]}', Artifact.EPOCHS)
    w.log_dict({"python": "3"}, Artifact.ENVIRONMENT)
    art = tmp_path / "weights.txt"
    art.write_text("w")
    w.log_artifact(art, "model")
    art.unlink()  # a temporary file is gone by the time the spool is sent: the spool kept a copy
    assert w.end(Outcome.COMPLETED) is False  # never came back: the spool stays
    assert client.get_run(run_id).info.status == "RUNNING"
    folder = tmp_path / "spool" / run_id
    assert [s.folder for s in find_spools(tmp_path / "spool")] == [folder]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["run_id"] == run_id and meta["tracking_uri"] == client.tracking_uri

    assert cli_main(["sync", str(tmp_path / "spool"), "--yes"]) == 0
    assert "spool removed" in capsys.readouterr().out
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    assert metric_steps(client, run_id) == list(range(7)) and run.data.metrics[Summary.EPOCH_TIME_MS_MEAN] == 3.5
    arts = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "model")}
    assert {Artifact.EPOCHS, Artifact.ENVIRONMENT, "model/weights.txt"} <= arts
    assert not folder.exists()
    assert cli_main(["sync", str(tmp_path / "spool"), "--yes"]) == 2  # nothing left to sync


def test_a_replay_cut_short_resends_without_duplicates(store, tmp_path):
    client, exp = store
    run_id = RunWriter(client, exp).start("r", {}, {})
    sp = Spool.create(tmp_path, run_id, client.tracking_uri, exp)
    for step in range(3):
        sp.append({"op": "log_batch", "metrics": [["loss", float(step), 1000 + step, step]]})
    sent = []

    def send_two_then_fail(op):
        if len(sent) == 2:
            raise ConnectionError("gone again")
        client.log_batch(run_id, metrics=[__import__("mlflow").entities.Metric(*m) for m in op["metrics"]])
        sent.append(op)
    with pytest.raises(ConnectionError):
        sp.replay(send_two_then_fail)
    assert sp.sent() == 2 and sp.pending() == 1
    sp._mark_sent(1)  # as if the process died before recording the second acknowledgement
    assert cli_main(["sync", str(sp.folder), "--yes"]) == 0
    hist = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in hist) == [0, 1, 2]  # step 1 was sent twice and is stored once


def test_a_refused_write_that_is_not_an_outage_still_raises(store, tmp_path):
    client, exp = store
    w = RunWriter(client, exp, spool_dir=tmp_path / "spool")
    w.start("r", {}, {ParamKey.BATCH_SIZE: "64"})
    with pytest.raises(MlflowException):
        w.log_params({ParamKey.BATCH_SIZE: "128"})  # MLflow params are immutable: a bug, not an outage
    assert not (tmp_path / "spool").exists()


def test_an_interrupt_during_a_flush_keeps_the_unsent_epochs(store):
    client, exp = store
    flaky = FlakyClient(client)
    w = RunWriter(flaky, exp, flush_every=100)
    run_id = w.start("r", {}, {})
    for step in range(5):
        w.log_epoch(step, {Series.LOSS: float(step)})
    real = flaky._client.log_batch

    def interrupted(*a, **kw):
        raise KeyboardInterrupt("SIGTERM")
    flaky._client.log_batch = interrupted
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    flaky._client.log_batch = real
    w.end(Outcome.INTERRUPTED)
    assert metric_steps(client, run_id) == list(range(5))
    assert client.get_run(run_id).info.status == "KILLED"


def test_retry_covers_what_mlflow_raises_under_contention():
    # MLflow's SQLAlchemy store wraps sqlite3's OperationalError like this after its 20 s busy timeout
    from sqlalchemy.exc import OperationalError

    locked = MlflowException(message=OperationalError("INSERT ...", {}, Exception("database is locked")),
                             error_code=15)  # TEMPORARILY_UNAVAILABLE
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise locked
        return "ok"
    assert retry(flaky, "x", base_delay=0.001) == "ok" and len(calls) == 3
    assert is_transient(locked) and is_transient(ConnectionError())
    with pytest.raises(ValueError):
        retry(lambda: (_ for _ in ()).throw(ValueError("bad value")), "x")
    assert not is_transient(MlflowException("Changing param values is not allowed", error_code=1000))
