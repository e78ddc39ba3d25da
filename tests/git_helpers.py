"""A throw-away git repository for the tests of diffs, resets and restarts."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run `git ARGS...` in `repo` with a fixed identity; its stdout."""
    return subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def git_repo(work: Path) -> Path:
    """`work` as a new repository with one commit holding a.py (`x = 1`)."""
    work.mkdir()
    git(work, "init", "-q")
    (work / "a.py").write_text("x = 1\n")
    git(work, "add", "a.py")
    git(work, "commit", "-qm", "init")
    return work
