"""The MLflow writer: buffered per-epoch metrics, flattened params, outcome -> status, reachability."""

import time

import pytest

from trainbench.core.errors import TrackingUnavailable
from trainbench.core.vocab import Outcome, ParamKey, Series, Tag
from trainbench.tracking.connection import check_reachable
from trainbench.tracking.writer import RunWriter, flatten


@pytest.mark.slow
def test_metrics_are_buffered_and_sent_in_batches(store):
    client, exp = store
    w = RunWriter(client, exp, flush_every=4)
    run_id = w.start("r", {"model": "dqn", "outcome": Outcome.RUNNING}, {ParamKey.BATCH_SIZE: "230"})
    calls0 = w.calls
    for step in range(10):
        w.log_epoch(step, {Series.LOSS: 1.0 / (step + 1), Series.EPOCH_TIME_MS: 5.0})
    assert w.calls - calls0 == 2  # flushed after epochs 4 and 8; the last 2 still buffered
    w.end(Outcome.COMPLETED)
    hist = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in hist) == list(range(10))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    assert run.data.params[ParamKey.BATCH_SIZE] == "230"


@pytest.mark.parametrize("outcome,status", [(Outcome.OOM, "FAILED"), (Outcome.DIVERGED, "FAILED"), (Outcome.INTERRUPTED, "KILLED")])
def test_outcome_sets_status(store, outcome, status):
    client, exp = store
    w = RunWriter(client, exp)
    run_id = w.start("r", {}, {})
    w.end(outcome)
    run = client.get_run(run_id)
    assert (run.info.status, run.data.tags[Tag.OUTCOME]) == (status, outcome)


def test_flatten_uses_dotted_keys_and_json_lists():
    assert flatten({"model": {"name": "tft", "quantiles": [0.1, 0.5]}, "x": None}) == {
        "model.name": "tft", "model.quantiles": "[0.1, 0.5]", "x": "None"}


def test_unreachable_server_fails_fast_with_the_fix():
    t0 = time.perf_counter()
    with pytest.raises(TrackingUnavailable, match="make server"):
        check_reachable("http://127.0.0.1:9", timeout_s=2)  # port 9 (discard): nothing listens
    assert time.perf_counter() - t0 < 5


def test_params_over_a_hundred_are_chunked(store):
    client, exp = store
    w = RunWriter(client, exp)
    run_id = w.start("r", {}, {f"p{i}": str(i) for i in range(250)})
    assert len(client.get_run(run_id).data.params) == 250


def test_a_ctrl_c_landing_inside_a_write_is_raised_after_it_and_leaves_the_store_unlocked(store, monkeypatch):
    """Ctrl-C while a write holds the SQLite store's write lock: the write finishes, the KeyboardInterrupt comes
    after it, and the run's next writes (its last epochs, its outcome) are not stuck behind a lock that the
    interrupted write's connection would keep until the collector freed it."""
    import os
    import signal
    import sqlite3

    from trainbench.tracking import writer as writer_module
    from trainbench.tracking.store import sqlite_path

    client, exp = store
    db = sqlite_path(str(client.tracking_uri))
    w = RunWriter(client, exp, flush_every=1)
    run_id = w.start("r", {}, {})
    real_apply = writer_module.apply_op
    interrupted_once = []

    def apply_with_ctrl_c_inside(c, rid, op):
        if op["op"] == "log_batch" and not interrupted_once:
            interrupted_once.append(True)
            con = sqlite3.connect(db, timeout=0.5)
            con.execute("BEGIN IMMEDIATE")  # the write lock, as SQLAlchemy's transaction holds it
            con.execute("UPDATE runs SET name = name WHERE run_uuid = ?", (rid,))
            os.kill(os.getpid(), signal.SIGINT)  # Python's handler raises KeyboardInterrupt here, if not held
            con.commit()
            con.close()
        return real_apply(c, rid, op)

    monkeypatch.setattr(writer_module, "apply_op", apply_with_ctrl_c_inside)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own (an xdist worker ignores it)
    try:
        with pytest.raises(KeyboardInterrupt):
            w.log_epoch(0, {Series.LOSS: 1.0})
    finally:
        signal.signal(signal.SIGINT, before)
    assert [m.step for m in client.get_metric_history(run_id, Series.LOSS)] == [0]  # the write was not cut
    probe = sqlite3.connect(db, timeout=0.5)  # nobody holds the write lock
    probe.execute("BEGIN IMMEDIATE")
    probe.rollback()
    probe.close()
    w.log_epoch(1, {Series.LOSS: 0.5})
    w.end(Outcome.INTERRUPTED)
    assert client.get_run(run_id).data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED
