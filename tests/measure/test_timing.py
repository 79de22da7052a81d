"""The synchronisation self-test tells a timer that waits for the device from one that does not."""

import queue
import threading
import time

import pytest
import torch

from trainbench.measure.timing import EpochTimer, sync_selftest


class FakeAsyncDevice:
    """Work is queued and returns at once; a worker thread executes it; ``synchronize`` waits."""

    def __init__(self) -> None:
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            ms = self.q.get()
            time.sleep(ms / 1e3)
            self.q.task_done()

    def sleep(self, ms: float) -> None:
        self.q.put(ms)

    def synchronize(self) -> None:
        self.q.join()


def test_synchronised_timer_reads_at_least_the_work():
    dev = FakeAsyncDevice()
    res = sync_selftest(dev.sleep, EpochTimer(torch.device("cpu"), sync=dev.synchronize), expected_ms=60)
    assert res.ok
    assert res.measured_ms >= 57
    assert res.unsynchronised_ms < 20  # the naive clock saw only the launch


def test_unsynchronised_timer_fails_the_selftest():
    dev = FakeAsyncDevice()
    res = sync_selftest(dev.sleep, EpochTimer(torch.device("cpu")), expected_ms=60)
    dev.synchronize()
    assert not res.ok
    assert res.measured_ms < 20


def test_a_timer_that_syncs_only_at_start_also_fails():
    """Synchronising before the work but not after it (the usual half-fix) still reads the launch only."""
    dev = FakeAsyncDevice()

    class StartOnly(EpochTimer):
        def stop(self) -> float:
            self.last_wall_ms = (time.perf_counter_ns() - self._t0) / 1e6
            return self.last_wall_ms

    res = sync_selftest(dev.sleep, StartOnly(torch.device("cpu"), sync=dev.synchronize), expected_ms=60)
    assert not res.ok and res.measured_ms < 20


def test_selftest_waits_for_the_device_between_its_two_measurements():
    """The naive measurement starts on an idle device: the first sleep must not leak into it."""
    dev = FakeAsyncDevice()
    res = sync_selftest(dev.sleep, EpochTimer(torch.device("cpu"), sync=dev.synchronize), expected_ms=40)
    assert res.ok and res.unsynchronised_ms < 20
    t0 = time.perf_counter()
    dev.synchronize()  # the naive call's sleep was also waited for before returning
    assert (time.perf_counter() - t0) * 1e3 < 20


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sleep_is_timed_by_the_epoch_timer_and_missed_by_a_naive_clock():
    from trainbench.measure.timing import cuda_sleep_fn

    dev = torch.device("cuda")
    res = sync_selftest(cuda_sleep_fn(dev), EpochTimer(dev), expected_ms=50)
    assert res.ok, res
    assert res.unsynchronised_ms < 25, res  # the launch returns long before the sleep ends
