"""NotedStops: stop signals noted instead of raised where a write must not be cut in two."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from trainbench.core.stop_signals import NotedStops


@pytest.fixture
def handlers_restored():
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in old.items():
        signal.signal(s, h)


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_noted_signal_does_not_raise_and_reaches_the_handler_it_replaced_once_delivered(handlers_restored):
    got = []

    def before(signum, frame):
        got.append(signum)

    signal.signal(signal.SIGTERM, before)
    seen = []
    with NotedStops(on_note=seen.append) as stops:
        _sigterm()
        _sigterm()  # without second_stops a second one is noted too
        assert got == [] and stops.noted == [signal.SIGTERM] * 2 and seen == stops.noted
    assert signal.getsignal(signal.SIGTERM) is before  # put back
    stops.deliver()
    assert got == [signal.SIGTERM]  # the first, once


def test_a_signal_raises_inside_interruptible_only(handlers_restored):
    with NotedStops() as stops:
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGTERM)}"), stops.interruptible():
            _sigterm()
        _sigterm()  # outside it again: noted
    assert stops.noted == [signal.SIGTERM] * 2


def test_a_second_signal_stops_at_once_with_second_stops(handlers_restored):
    with NotedStops(second_stops=True) as stops:
        _sigterm()
        with pytest.raises(KeyboardInterrupt):
            _sigterm()
    assert stops.noted[0] == signal.SIGTERM


def test_delivering_to_python_s_sigint_handler_raises_keyboard_interrupt(handlers_restored):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with NotedStops() as stops:
        os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        stops.deliver()


def test_nothing_is_noted_or_delivered_when_no_signal_came_or_off_the_main_thread(handlers_restored):
    before = signal.getsignal(signal.SIGTERM)
    stops = NotedStops()
    t = threading.Thread(target=stops.start)  # signal.signal refuses other threads: nothing replaced
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before
    stops.restore()
    stops.deliver()  # nothing noted: nothing happens
    assert stops.noted == []


def test_a_signal_held_during_a_write_reaches_its_handler_after_it_and_a_default_one_its_default_action():
    """held_during_write: the handler runs once the block is done (also when the block raised); a signal with
    no handler (SIG_DFL) takes its default action then, here in a child process: it ends it."""
    import subprocess
    import sys

    child = """
import os, signal, sys
from trainbench.core.stop_signals import held_during_write
signal.signal(signal.SIGTERM, signal.SIG_DFL)
with held_during_write():
    os.kill(os.getpid(), signal.SIGTERM)
    print("the write finished", flush=True)
print("never reached", flush=True)
"""
    from helpers.procs import child_env

    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, env=child_env())
    assert p.returncode == -signal.SIGTERM and p.stdout == "the write finished\n"


def test_a_signal_held_during_a_failed_write_is_not_lost(handlers_restored):
    from trainbench.core.stop_signals import held_during_write

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own (an xdist worker ignores SIGINT)
    with pytest.raises(KeyboardInterrupt) as info, held_during_write():
        os.kill(os.getpid(), signal.SIGINT)
        raise OSError("the write failed")
    assert isinstance(info.value.__context__, OSError)
