"""The epoch loop: outcomes, kept epochs, summaries, no scalar read inside the timer, latency."""

import math

import pytest
import torch

from helpers.fakes import FakeTrainable
from trainbench.core.contamination_policy import MIN_CLEAN
from trainbench.core.vocab import Outcome, Series, Summary, Tag
from trainbench.measure.harness import EpochSink, measure_latency, read_scalars, run_epochs, summarize

CPU = torch.device("cpu")


class Sink(EpochSink):
    def __init__(self):
        self.steps, self.flushes = [], 0

    def log_epoch(self, step, metrics):
        self.steps.append((step, dict(metrics)))

    def flush(self):
        self.flushes += 1


def test_completed_run_counts_warmup_and_summarises_measured_epochs_only():
    sink = Sink()
    r = run_epochs(FakeTrainable([1.0, 0.9, 0.8, 0.7, 0.6, 0.5]), CPU, epochs=4, warmup_epochs=2, sink=sink)
    assert r.outcome == Outcome.COMPLETED
    assert [s for s, _ in sink.steps] == list(range(6))
    assert r.summary[Summary.EPOCHS_MEASURED] == 4
    measured = r.series[Series.EPOCH_TIME_MS][2:]
    assert r.summary[Summary.EPOCH_TIME_MS_MEAN_RAW] == pytest.approx(sum(measured) / 4)
    # the headline mean leaves out epochs another process slowed where enough clean ones remain (a busy suite
    # flags some): it is the mean of the measured epochs it kept, never of a warmup one
    flags = r.series[Series.CONTAMINATED][2:]
    clean = [t for t, f in zip(measured, flags, strict=True) if not f]
    kept = clean if len(clean) >= MIN_CLEAN else measured
    assert r.summary[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(sum(kept) / len(kept))
    assert set(r.series) >= {Series.EPOCH_TIME_MS, "loss", Series.GRAD_NORM, "loss_part", Series.SAMPLES_PER_S, Series.PEAK_HOST_MB}
    assert r.stability[Tag.LOSS_TREND] == "converging"
    assert 0 <= r.summary[Summary.HARNESS_OVERHEAD_PCT] < 100
    assert sink.flushes >= 1


def test_nonfinite_loss_ends_the_run_as_diverged_keeping_the_epochs():
    r = run_epochs(FakeTrainable([1.0, 1.0, float("nan")]), CPU, epochs=5, warmup_epochs=0)
    assert r.outcome == Outcome.DIVERGED
    assert len(r.series[Series.EPOCH_TIME_MS]) == 3
    assert "loss" in r.error


def test_oom_in_epoch_3_of_5_leaves_three_epochs():
    r = run_epochs(FakeTrainable([1.0], raise_at=3, exc=torch.OutOfMemoryError("CUDA out of memory")), CPU, 5, 0)
    assert r.outcome == Outcome.OOM
    assert r.epochs_run == 3
    assert r.summary[Summary.EPOCHS_MEASURED] == 3


def test_other_exception_is_failed_and_interrupt_is_interrupted():
    r = run_epochs(FakeTrainable([1.0], raise_at=1, exc=ValueError("boom")), CPU, 5, 0)
    assert (r.outcome, r.epochs_run) == (Outcome.FAILED, 1) and "boom" in r.error
    r = run_epochs(FakeTrainable([1.0], raise_at=2, exc=KeyboardInterrupt()), CPU, 5, 0)
    assert (r.outcome, r.epochs_run) == (Outcome.INTERRUPTED, 2)


def test_a_signal_after_the_loop_never_loses_what_it_measured():
    """A stop signal landing in the loop-end call before it took effect (or while a failure is handled): the
    call is made again, the outcome is the failure or ``interrupted``, and the epochs are summarised."""
    calls = []

    def loop_end():
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt("signal 15")

    r = run_epochs(FakeTrainable([1.0]), CPU, 3, 1, on_loop_end=loop_end)
    assert len(calls) == 2 and (r.outcome, r.epochs_run) == (Outcome.INTERRUPTED, 4)
    assert r.summary[Summary.EPOCHS_MEASURED] == 3
    calls.clear()
    r = run_epochs(FakeTrainable([1.0], raise_at=2, exc=ValueError("boom")), CPU, 5, 0, on_loop_end=loop_end)
    assert len(calls) == 2 and (r.outcome, r.summary[Summary.EPOCHS_MEASURED]) == (Outcome.FAILED, 2)


def test_read_scalars_and_summary():
    vals = read_scalars({"a": torch.tensor(1.5), "b": torch.tensor([2.0]).sum(), "c": 3})
    assert vals == {"a": 1.5, "b": 2.0, "c": 3.0}
    s = summarize([10.0, 20.0, 30.0, 40.0])
    assert s[Summary.EPOCH_TIME_MS_MEAN] == 25.0 and s[Summary.EPOCH_TIME_MS_P50] == 25.0
    assert math.isclose(s[Summary.EPOCH_TIME_MS_STD], 12.909944, rel_tol=1e-6)


def test_latency_metrics_for_batch_one_and_training_batch():
    m = measure_latency(FakeTrainable([1.0]), CPU, [1, 10], warmup=1, samples=5)
    assert {Summary.INFER_LATENCY_MS_P50, Summary.INFER_LATENCY_MS_P99, Summary.INFER_THROUGHPUT_PER_S,
            "infer_latency_ms_p50_b10", "infer_throughput_per_s_b10"} <= set(m)
    assert m[Summary.INFER_LATENCY_MS_P99] >= m[Summary.INFER_LATENCY_MS_P50] > 0


def test_latency_stops_at_its_budget_and_says_so(monkeypatch, caplog):
    import trainbench.measure.harness as harness

    clock = {"t": 0.0}
    monkeypatch.setattr(harness, "_clock", lambda: clock["t"])

    class Slow:  # every forward pass takes 1 s on the budget's clock
        def inference(self, bs):
            return lambda: clock.__setitem__("t", clock["t"] + 1.0)

    with caplog.at_level("INFO", logger="trainbench.measure.harness"):
        m = measure_latency(Slow(), CPU, [1, 10], warmup=5, samples=10, budget_s=4.0)  # 2 s a batch size
    assert clock["t"] == 6.0  # per batch size: two warmup passes fit its 2 s, then the one sample always taken
    assert "latency at batch 10: the budget (2 s) allowed 1 of 10 samples" in caplog.text
    assert m[Summary.INFER_LATENCY_MS_P50] >= 0 and "infer_latency_ms_p50_b10" in m


def test_oom_records_the_peak_at_failure_and_cpu_allocator_errors_count_as_oom():
    cpu_oom = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)")
    r = run_epochs(FakeTrainable([1.0], raise_at=3, exc=cpu_oom), CPU, 5, 0)
    assert (r.outcome, r.epochs_run) == (Outcome.OOM, 3)
    assert r.summary[Summary.PEAK_HOST_MB_AT_FAILURE] > 0
    assert "epoch 3" in r.error
