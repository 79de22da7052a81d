"""The collector's policy in a command (core/collector.py): off while it imports, the imports frozen once,
on again after; frozen at exit, after the command's own work, with its log and output all there. Each case
runs in a child process: the policy is process-wide."""

from __future__ import annotations

import subprocess
import sys

from helpers.procs import child_env


def _child(code: str, *args: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                       env=child_env())
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


EXIT = """
import atexit, gc, logging, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
from trainbench.core.collector import skip_final_collections
skip_final_collections()
skip_final_collections()  # once per process
log = logging.getLogger("cmd")
log.addHandler(logging.FileHandler(sys.argv[1]))  # never closed by the command: logging's own atexit flushes it
log.warning("logged by the command")
print("frozen during the command:", gc.get_freeze_count() > 0)  # stdout: buffered, flushed at exit
"""


def test_exit_freezes_the_heap_after_the_commands_own_work_and_loses_no_output(tmp_path):
    target = tmp_path / "cmd.log"
    assert _child(EXIT, str(target)) == ["frozen during the command: False", "frozen at exit: True"]
    assert target.read_text() == "logged by the command\n"


IMPORTS = """
import gc
from trainbench.core.collector import paused_for_imports
with paused_for_imports(freeze=False):
    print("off while the command line imports:", not gc.isenabled())
print("on, nothing frozen:", gc.isenabled(), gc.get_freeze_count() == 0)
with paused_for_imports():
    import json, decimal  # a job's imports
    print("off while the job imports:", not gc.isenabled())
first = gc.get_freeze_count()
print("on, the imports frozen:", gc.isenabled(), first > 0)
garbage = [[] for _ in range(1000)]
for g in garbage:
    g.append(g)  # cycles an earlier job left
del garbage, g
try:
    with paused_for_imports():
        raise RuntimeError("an import failed")
except RuntimeError:
    pass
print("a later job freezes nothing of the earlier one's:", gc.get_freeze_count() == first, gc.isenabled())
print("its cycles are collected:", gc.collect() >= 1000)
gc.disable()
with paused_for_imports():
    pass
print("off before, off after:", not gc.isenabled())
"""


def test_the_collector_is_off_while_a_command_imports_and_the_imports_are_frozen_once():
    assert _child(IMPORTS) == [
        "off while the command line imports: True", "on, nothing frozen: True True",
        "off while the job imports: True", "on, the imports frozen: True True",
        "a later job freezes nothing of the earlier one's: True True", "its cycles are collected: True",
        "off before, off after: True"]
