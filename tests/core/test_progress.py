"""Progress without a terminal: phase lines with durations, epoch lines at a bounded rate."""

from __future__ import annotations

import logging

import pytest

from trainbench.core.progress import EpochLog, phase


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "trainbench.progress"]


def test_epoch_lines_every_n_epochs_and_the_last(caplog):
    caplog.set_level(logging.INFO, "trainbench.progress")
    clock = Clock()
    e = EpochLog(total=1005, warmup=5, desc="dqn", every_epochs=100, every_s=0, clock=clock)
    for i in range(1005):
        clock.t += 0.01
        e.update(i, 10.0, 0.5)
    lines = _lines(caplog)
    assert len(lines) == e.lines == 11  # epochs 100, 200, ..., 1000 and the last
    assert lines[0].startswith("dqn: epoch 100/1005 (measured 95/1000): 10.0 ms, loss 0.5")
    assert lines[-1].startswith("dqn: epoch 1005/1005 (measured 1000/1000)")


def test_epoch_lines_every_t_seconds_for_slow_epochs(caplog):
    caplog.set_level(logging.INFO, "trainbench.progress")
    clock = Clock()
    e = EpochLog(total=50, warmup=2, every_epochs=0, every_s=30, clock=clock)
    for i in range(50):
        clock.t += 7.0  # an epoch every 7 s: a line every 5 epochs (35 s)
        e.update(i, 7000.0)
    assert e.lines == 10  # epochs 5, 10, ..., 50 (the last among them)
    assert "warmup 1/2" not in " ".join(_lines(caplog))  # the first line comes after 30 s


def test_a_phase_logs_its_start_and_end_with_the_duration(caplog):
    caplog.set_level(logging.INFO, "trainbench.progress")
    clock = Clock()
    with phase("data generation", "ohlcv-1m into x.dbn.zst", clock=clock):
        clock.t = 75.0
    with pytest.raises(KeyboardInterrupt), phase("latency", clock=clock):
        clock.t = 76.5
        raise KeyboardInterrupt
    assert _lines(caplog) == ["phase data generation: started (ohlcv-1m into x.dbn.zst)",
                              "phase data generation: done in 1 min 15 s", "phase latency: started",
                              "phase latency: stopped after 1.5 s (KeyboardInterrupt)"]
