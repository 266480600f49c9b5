"""The manifest's git state: a real `git` in a scratch repository (clean, dirty, nested in someone
else's checkout, outside any); it starts `git` children, hence tests/live."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.results.manifest import git_state


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_state(tmp_path):
    assert git_state(tmp_path) == (None, None)  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f.txt").write_text("1")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "f.txt").write_text("2")
    assert git_state(tmp_path) == (head, True)
    (tmp_path / "sub").mkdir()
    assert git_state(tmp_path / "sub") == (None, None)  # inside someone else's checkout


# ------------------------------------------------------------------ run identity
