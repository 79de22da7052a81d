"""The checkout a run was trained from, as run tags: its commit, whether tracked files were modified, and a
hash of the uncommitted diff. Plain ``git`` calls (no torch), so the sweep's parent run can record it too."""

from __future__ import annotations

import hashlib
import subprocess

from trainbench.core.vocab import Tag


def git_state(root: str) -> dict[str, str]:
    """``git_commit``, ``git_dirty`` (``true``/``false``/``unknown`` outside a checkout) and, when dirty,
    ``git_diff_sha256``: two dirty runs at one commit can then be told apart."""
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = run("rev-parse", "HEAD")
    dirty = run("status", "--porcelain", "--untracked-files=no")
    out = {Tag.GIT_COMMIT: commit or "unknown", Tag.GIT_DIRTY: str(bool(dirty)).lower() if commit else "unknown"}
    if commit and dirty:  # which uncommitted changes: two dirty runs at one commit can then be told apart
        out[Tag.GIT_DIFF_SHA256] = hashlib.sha256(run("diff", "HEAD").encode()).hexdigest()
    return out
