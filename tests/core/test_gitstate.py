"""The checkout's state as run tags, in a real throwaway git repository."""

from __future__ import annotations

import subprocess

from trainbench.core.gitstate import git_state
from trainbench.core.vocab import Tag


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


def test_clean_dirty_and_outside_a_checkout(tmp_path):
    assert git_state(str(tmp_path)) == {Tag.GIT_COMMIT: "unknown", Tag.GIT_DIRTY: "unknown"}
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-qm", "one")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (tmp_path / "untracked.txt").write_text("not part of the checkout's state\n")
    assert git_state(str(tmp_path)) == {Tag.GIT_COMMIT: head, Tag.GIT_DIRTY: "false"}
    (tmp_path / "a.py").write_text("x = 2\n")
    first = git_state(str(tmp_path))
    assert first[Tag.GIT_DIRTY] == "true" and len(first[Tag.GIT_DIFF_SHA256]) == 64
    (tmp_path / "a.py").write_text("x = 3\n")  # another uncommitted change at the same commit: another hash
    assert git_state(str(tmp_path))[Tag.GIT_DIFF_SHA256] != first[Tag.GIT_DIFF_SHA256]
