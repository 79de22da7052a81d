"""Machine load per epoch: sampled outside the timer, logged, contaminated epochs flagged."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from trainbench.core.vocab import Outcome, Series, Summary
from trainbench.measure import load
from trainbench.measure.harness import EpochSink, run_epochs
from trainbench.measure.load import LoadSampler, contaminated, load_summary

CPU = torch.device("cpu")


class Sleeper:
    """An epoch that waits without using the CPU, so any busy CPU time during it is someone else's."""

    samples_per_epoch = 1
    batch_size = 1

    def train_epoch(self):
        time.sleep(0.3)
        return {"loss": torch.tensor(1.0)}


class Sink(EpochSink):
    def __init__(self):
        self.steps = []

    def log_epoch(self, step, metrics):
        self.steps.append(dict(metrics))


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")
def test_epochs_while_other_processes_burn_every_cpu_are_flagged_contaminated():
    burn = "import time\nt = time.time() + 60\nwhile time.time() < t: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        sink = Sink()
        r = run_epochs(Sleeper(), CPU, epochs=3, warmup_epochs=1, sink=sink)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert r.outcome == Outcome.COMPLETED
    for m in sink.steps:  # logged per epoch, like every other metric
        assert {Series.CPU_BUSY_PCT, Series.CPU_OTHER_PCT, Series.CPU_STEAL_PCT, "contaminated"} <= set(m)
        assert m[Series.CPU_OTHER_PCT] >= 50 and m["contaminated"] == 1.0, m
    assert r.series["contaminated"] == [1.0] * 4
    assert r.summary[Summary.CONTAMINATED_EPOCHS] == 3 and r.summary[Summary.CONTAMINATED_PCT] == 100.0  # measured only


def test_own_cpu_time_is_not_counted_as_other_load(monkeypatch):
    """Deltas from the machine's counters: busy time this process used itself is not contamination."""
    ticks = iter([(100.0, 50.0, 0.0), (104.0, 50.5, 0.0), (108.0, 52.0, 0.2)])  # (total, idle, steal) s
    own = iter([10.0, 13.5, 16.0])
    monkeypatch.setattr(load, "_read_proc_stat", lambda: next(ticks))
    monkeypatch.setattr(load.os, "times", lambda: os.times_result((next(own), 0.0, 0.0, 0.0, 0.0)))
    s = LoadSampler(min_interval_s=0)
    a = s.sample()
    assert a[Series.CPU_BUSY_PCT] == pytest.approx(100 * 3.5 / 4) and a[Series.CPU_OTHER_PCT] == pytest.approx(0.0)
    assert contaminated(a) == 0.0
    b = s.sample()  # 4 s of CPU: 2.5 s ours, 0.2 s stolen, 1.3 s idle -> 0 s others
    assert b[Series.CPU_STEAL_PCT] == pytest.approx(5.0) and b[Series.CPU_OTHER_PCT] == pytest.approx(0.0, abs=1e-9)
    assert contaminated(b) == 1.0  # steal >= 2 %


def test_rule_and_summary():
    assert contaminated({Series.CPU_OTHER_PCT: 9.9, Series.CPU_STEAL_PCT: 1.9}) == 0.0
    assert contaminated({Series.CPU_OTHER_PCT: 10.0}) == 1.0
    assert contaminated({Series.GPU_OTHER_PROCESSES: 1.0}) == 1.0
    assert contaminated({}) == 0.0  # no figures: not flagged
    s = load_summary({"contaminated": [1.0, 0.0, 1.0, 0.0], Series.CPU_OTHER_PCT: [50, 1, 30, 2]}, warmup_epochs=1)
    assert s[Summary.CONTAMINATED_EPOCHS] == 1 and s[Summary.CONTAMINATED_PCT] == pytest.approx(100 / 3)
    assert s[Summary.CPU_OTHER_PCT_MAX] == 30


def test_short_epochs_read_the_machine_at_most_every_interval(monkeypatch):
    reads = []
    monkeypatch.setattr(load, "_read_proc_stat", lambda: reads.append(1) or (100.0 + len(reads), 50.0, 0.0))
    s = LoadSampler(min_interval_s=60)
    for _ in range(100):
        s.sample()
    assert len(reads) == 2  # the constructor's read and the first epoch's (a run's first epoch has figures)


def test_a_first_read_within_one_clock_tick_is_retried_so_short_epochs_on_a_busy_machine_are_flagged(monkeypatch):
    """Epochs shorter than a clock tick: the counters have not moved at the first read, so it gives no
    figures; the sampler keeps its baseline and reads again, instead of carrying 'no figures' (clean) over
    every short epoch that follows."""
    counters = iter([(100.0, 50.0, 0.0), (100.0, 50.0, 0.0), (102.0, 50.2, 0.0)])  # (total, idle, steal) s
    own = iter([10.0, 10.0, 10.5])
    monkeypatch.setattr(load, "_read_proc_stat", lambda: next(counters))
    monkeypatch.setattr(load.os, "times", lambda: os.times_result((next(own), 0.0, 0.0, 0.0, 0.0)))
    s = LoadSampler(min_interval_s=60)  # every later epoch inside the interval
    assert s.sample() == {}  # under a tick: nothing known yet
    b = s.sample()  # read again over the whole interval: 1.8 s busy, 0.5 s ours -> 65% others
    assert b[Series.CPU_OTHER_PCT] == pytest.approx(65.0) and contaminated(b) == 1.0
    assert s.sample() == b  # then short epochs carry those figures


def test_run_epochs_reads_the_sampler_the_run_started_so_the_first_epoch_covers_a_long_interval(monkeypatch):
    """A run starts its LoadSampler when it opens (train._Run.load) and hands it to run_epochs: a short first
    epoch's figures then cover the run so far, not the one or two clock ticks of that epoch (one tick can read
    an idle machine on a busy one, and the epochs under 0.1 s after it carry that reading)."""
    # from the run's opening to the end of the first epoch: 2 s of CPU time over 2 CPUs, 0.2 s of it ours
    counters = iter([(100.0, 50.0, 0.0), (102.0, 50.0, 0.0)])
    own = iter([10.0, 10.2])
    monkeypatch.setattr(load, "_read_proc_stat", lambda: next(counters))
    monkeypatch.setattr(load.os, "times", lambda: os.times_result((next(own), 0.0, 0.0, 0.0, 0.0)))
    started = LoadSampler(min_interval_s=60)  # every later epoch inside the interval: no more reads
    sink = Sink()

    class Quick(Sleeper):
        def train_epoch(self):
            return {"loss": torch.tensor(1.0)}

    r = run_epochs(Quick(), CPU, epochs=3, warmup_epochs=1, sink=sink, load=started)
    assert r.outcome == Outcome.COMPLETED
    assert [m[Series.CPU_OTHER_PCT] for m in sink.steps] == pytest.approx([90.0] * 4)
    assert r.series["contaminated"] == [1.0] * 4
