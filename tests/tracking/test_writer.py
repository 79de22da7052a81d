"""The MLflow writer: buffered per-epoch metrics, flattened params, outcome -> status, reachability."""

import time

import pytest

from trainbench.core.errors import TrackingUnavailable
from trainbench.core.vocab import Outcome, ParamKey, Series, Tag
from trainbench.tracking.connection import check_reachable
from trainbench.tracking.writer import RunWriter, flatten


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
