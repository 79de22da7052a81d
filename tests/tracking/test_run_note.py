"""The run's description (tracking/run_note.py): what it says, and that the writer writes it at the end."""

from __future__ import annotations

import pytest

from trainbench.core.vocab import Outcome, Summary
from trainbench.tracking.run_note import RunNote, epoch_interval
from trainbench.tracking.writer import RunWriter


def test_run_note_says_model_size_device_epoch_time_with_interval_and_outcome():
    note = RunNote("tft", None, "NVIDIA H200", "6e_ohlcv_1m", params=123456, precision="bf16")
    note.summary = {Summary.EPOCH_TIME_MS_MEAN: 10.0, Summary.EPOCH_TIME_MS_STD: 1.0, Summary.EPOCHS_MEASURED: 100}
    text = note(Outcome.COMPLETED)
    assert "**tft**" in text and "outcome **completed**" in text and "NVIDIA H200, precision `bf16`" in text
    assert "default (no `model.size` set)" in text and "123,456 parameters" in text
    lo, hi = epoch_interval(note.summary)
    assert lo == pytest.approx(10 - 1.984217 * 0.1, rel=1e-5) and hi == pytest.approx(10 + 1.984217 * 0.1, rel=1e-5)
    assert f"[{lo:.2f}, {hi:.2f}] ms" in text
    sized = RunNote("tft", "paper", "cpu", "6e_ohlcv_1m")
    sized.error = "OutOfMemoryError: CUDA out of memory\nmore"
    text = sized(Outcome.OOM)
    assert "size `paper`" in text and "no measured epoch" in text and "error: OutOfMemoryError" in text
    assert epoch_interval({Summary.EPOCH_TIME_MS_MEAN: 5.0, Summary.EPOCH_TIME_MS_STD: 0.0, Summary.EPOCHS_MEASURED: 1}) is None


def test_writer_end_writes_the_description_and_a_broken_one_never_costs_the_status(store):
    client, exp_id = store
    w = RunWriter(client, exp_id)
    rid = w.start("note", {"kind": "train"}, {})
    w.describe = lambda outcome: f"ended {outcome}"
    w.end(Outcome.DIVERGED)
    run = client.get_run(rid)
    assert run.data.tags["mlflow.note.content"] == "ended diverged" and run.info.status == "FAILED"
    w = RunWriter(client, exp_id)
    rid = w.start("note2", {"kind": "train"}, {})
    w.describe = lambda outcome: 1 / 0
    w.end(Outcome.COMPLETED)
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and "mlflow.note.content" not in run.data.tags
