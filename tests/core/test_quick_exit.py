"""At exit a command freezes what exists instead of collecting it (core/quick_exit.py): the atexit handlers
registered before still run after it, and what the command wrote through its log and its output is all there."""

from __future__ import annotations

import subprocess
import sys

from helpers.procs import child_env

CHILD = """
import atexit, gc, logging, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
from trainbench.core.quick_exit import skip_final_collections
skip_final_collections()
skip_final_collections()  # once per process
log = logging.getLogger("cmd")
log.addHandler(logging.FileHandler(sys.argv[1]))  # never closed by the command: logging's own atexit flushes it
log.warning("logged by the command")
print("frozen during the command:", gc.get_freeze_count() > 0)  # stdout: buffered, flushed at exit
"""


def test_exit_freezes_the_heap_after_the_commands_own_work_and_loses_no_output(tmp_path):
    target = tmp_path / "cmd.log"
    p = subprocess.run([sys.executable, "-c", CHILD, str(target)], capture_output=True, text=True, timeout=60,
                       env=child_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["frozen during the command: False", "frozen at exit: True"]
    assert target.read_text() == "logged by the command\n"
