"""The synchronisation self-test tells a timer that waits for the device from one that does not."""

import queue
import threading
import time

import torch

from trainbench.bench.timing import EpochTimer, sync_selftest


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
