"""serving.supervise.git: the attempt's diff and the reset, on a real repository."""

from __future__ import annotations

from serving.supervise import git
from tests.git_helpers import git as run_git


def test_snapshot_diff_and_restore(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    run_git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "a.py").write_text("x = 1\n")
    (repo / "gone.py").write_text("keep me\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "init")
    head = run_git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.py").write_text("x = 5\n")  # the user's own uncommitted change, and files
    (repo / "notes.txt").write_text("untracked at the start\n")
    (repo / "run.log").write_text("ignored\n")
    start = git.snapshot(repo)
    # the attempt: same-size edit within the second, a delete, a new file, a commit
    (repo / "a.py").write_text("x = 6\n")
    (repo / "gone.py").unlink()
    (repo / "new.py").write_text("y = 2\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "agent")
    (repo / "later.py").write_text("z\n")
    d = git.diff(repo, start, git.snapshot(repo))
    assert "-x = 5" in d
    assert "+x = 6" in d
    assert "deleted file mode" in d
    assert "+y = 2" in d
    assert "later.py" in d
    assert "notes.txt" not in d  # unchanged since the start
    assert "run.log" not in d
    git.restore(repo, start)
    assert run_git(repo, "rev-parse", "HEAD").strip() == head
    assert (repo / "a.py").read_text() == "x = 5\n"
    assert (repo / "gone.py").read_text() == "keep me\n"
    assert (repo / "notes.txt").exists()
    assert (repo / "run.log").exists()  # ignored files are never removed
    assert not (repo / "new.py").exists()
    assert not (repo / "later.py").exists()
    assert git.diff(repo, start, git.snapshot(repo)) == ""
    assert run_git(repo, "status", "--porcelain") == " M a.py\n?? notes.txt\n"
    assert not git.is_repo(tmp_path)
