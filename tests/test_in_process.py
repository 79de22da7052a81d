"""helpers.procs.in_process: a command run in the test's process leaves the process as it found it, as a child
process would have (the tests that use it run beside others in one xdist worker)."""

from __future__ import annotations

import logging
import os
import sys

from helpers.procs import REPO, in_process


def test_a_command_in_process_leaves_argv_environment_logging_hydra_and_the_exit_mark_as_they_were(tmp_path):
    from hydra.core.hydra_config import HydraConfig

    from trainbench.cli import analyze_command
    from trainbench.config import team
    from trainbench.core import errors

    before = (list(sys.argv), dict(os.environ), logging.getLogger().handlers[:], logging.getLogger().level,
              errors.has_task_started(), HydraConfig.initialized(), list(team._ROOT), os.getcwd())
    p = in_process(analyze_command, [f"tracking.uri=sqlite:///{tmp_path}/none.db", f"paths.root={tmp_path}"],
                   cwd=REPO, HYDRA_FULL_ERROR="0")
    # Hydra ran the job (it marked the task started) and the job refused the missing store: one line, exit 2
    assert p.returncode == 2 and "analyze: error:" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.args[0] == str(REPO / "analyze.py")
    after = (list(sys.argv), dict(os.environ), logging.getLogger().handlers[:], logging.getLogger().level,
             errors.has_task_started(), HydraConfig.initialized(), list(team._ROOT), os.getcwd())
    assert after == before
