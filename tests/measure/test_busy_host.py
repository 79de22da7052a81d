"""When host load contaminates an epoch (measure/load.py), and the run's summary over the epochs the analysis
uses (core/contamination_policy.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from trainbench.core.vocab import Series, Summary
from trainbench.measure.harness import summarize
from trainbench.measure.load import HOST_WAIT_PCT, LoadSampler, contaminated

LINUX = os.path.exists("/proc/thread-self/schedstat") and hasattr(os, "sched_setaffinity")
BURN = "import os, time\nos.sched_setaffinity(0, {%d})\nt = time.time() + 30\nwhile time.time() < t: pass\n"


def _hogs(cpus):
    hogs = [subprocess.Popen([sys.executable, "-c", BURN % c]) for c in cpus]
    time.sleep(0.5)  # they are spinning
    return hogs


def _stop(hogs):
    for h in hogs:
        h.kill()
        h.wait()


def _epoch(sampler, work):
    sampler.sample()  # start a fresh interval
    time.sleep(0.11)
    sampler.sample()
    work()
    return sampler.sample()


def _spin(seconds=0.4):
    t = time.perf_counter() + seconds
    while time.perf_counter() < t:
        pass


def test_the_rule_per_device():
    busy_host = {Series.CPU_OTHER_PCT: 90.0, Series.CPU_STEAL_PCT: 0.0, Series.HOST_WAIT_PCT: 1.0}
    assert contaminated(busy_host, "cpu") == 1.0  # a CPU epoch competes with the other processes
    assert contaminated(busy_host, "cuda") == 0.0  # a GPU epoch whose dispatch thread ran is unaffected
    starved = {**busy_host, Series.HOST_WAIT_PCT: HOST_WAIT_PCT}
    assert contaminated(starved, "cuda") == 1.0  # its dispatch thread waited for a CPU: the device may idle
    assert contaminated({**busy_host, Series.GPU_OTHER_PROCESSES: 1.0}, "cuda") == 1.0  # the GPU itself shared
    no_wait = {Series.CPU_OTHER_PCT: 90.0}
    assert contaminated(no_wait, "cuda") == 1.0  # the wait unreadable: the CPU rule, erring towards flagging


@pytest.mark.skipif(not LINUX, reason="needs Linux schedstat and CPU affinity")
def test_a_thread_that_shares_its_cpu_with_a_busy_process_waits_and_one_that_sleeps_does_not():
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})  # this thread (the harness's) on one CPU ...
    hogs = _hogs([cpu])  # ... with a process spinning on the same CPU
    try:
        sampler = LoadSampler(min_interval_s=0.1)
        starved = _epoch(sampler, _spin)  # the epoch needs the CPU: it waits about half the time
        waiting = _epoch(sampler, lambda: time.sleep(0.4))  # like a thread blocked on the GPU: no CPU wanted
    finally:
        _stop(hogs)
        os.sched_setaffinity(0, before)
    assert starved[Series.HOST_WAIT_PCT] >= 20, starved
    assert contaminated(starved, "cuda") == 1.0
    assert waiting[Series.HOST_WAIT_PCT] < HOST_WAIT_PCT, waiting
    assert waiting[Series.CPU_OTHER_PCT] >= 100 / (os.cpu_count() or 1) * 0.5  # the machine was busy all along
    assert contaminated(waiting, "cpu") == 1.0 and contaminated(waiting, "cuda") == 0.0


def test_the_run_summary_is_over_the_epochs_the_analysis_uses():
    s = summarize([10.0, 11.0, 50.0, 12.0], [0, 0, 1, 0])  # three clean epochs: the loaded one is left out
    assert s[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(11.0)
    assert s[Summary.EPOCH_TIME_MS_MEAN_RAW] == pytest.approx(20.75) and s[Summary.CONTAMINATED_USED] == 0.0
    assert s[Summary.EPOCH_TIME_MS_P95] < 50
    busy = summarize([50.0, 52.0, 51.0], [1, 1, 1])  # a machine busy throughout: used, and said so
    assert busy[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(51.0) and busy[Summary.CONTAMINATED_USED] == 1.0
    assert summarize([10.0, 11.0])[Summary.EPOCH_TIME_MS_MEAN] == pytest.approx(10.5)  # no flags: all count
