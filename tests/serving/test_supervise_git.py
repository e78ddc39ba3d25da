"""serving.supervise.git: the attempt's diff and the reset, on a real repository."""

from __future__ import annotations

from pathlib import Path

from serving.supervise import git
from tests.git_helpers import git as run_git
from tests.git_helpers import git_repo


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


def test_own_files_inside_the_work_tree_are_kept_out_and_survive(tmp_path, monkeypatch):
    """The transcript, its kept attempts and the summary written inside the repository (the
    README's example does this) are in no diff and are not removed by the reset."""
    repo = tmp_path / "r"
    (repo / "sub").mkdir(parents=True)
    run_git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    (repo / "task.md").write_text("Fix it.\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-qm", "init")
    monkeypatch.chdir(repo / "sub")  # relative paths are the process's, not the work tree's
    keep = git.keep_specs(
        repo, [Path("../run.jsonl"), Path("out/summary.json")], [Path("../run.jsonl.attempt-")]
    )
    assert git.keep_specs(repo, [tmp_path / "elsewhere.jsonl"]) == []
    start = git.snapshot(repo, keep)
    (repo / "a.py").write_text("x = 2\n")
    (repo / "new.py").write_text("y\n")
    (repo / "run.jsonl").write_text("{}\n")
    (repo / "run.jsonl.attempt-1").write_text("{}\n")
    (repo / "run.jsonl.attempt-1.restart.json").write_text("{}\n")
    (repo / "sub" / "out").mkdir()
    (repo / "sub" / "out" / "summary.json").write_text("{}\n")
    (repo / "run.jsonl.attempt-1.other").write_text("kept: it starts with the prefix\n")
    (repo / "sub" / "run.jsonl.attempt-1").write_text("not ours: another folder\n")
    d = git.diff(repo, start, git.snapshot(repo, keep))
    assert "+x = 2" in d
    assert "new.py" in d
    assert "run.jsonl" not in d.replace("sub/run.jsonl.attempt-1", "")
    assert "summary.json" not in d
    git.restore(repo, start, keep)
    assert (repo / "a.py").read_text() == "x = 1\n"
    assert not (repo / "new.py").exists()
    assert not (repo / "sub" / "run.jsonl.attempt-1").exists()
    for kept in (
        "run.jsonl",
        "run.jsonl.attempt-1",
        "run.jsonl.attempt-1.restart.json",
        "sub/out/summary.json",
    ):
        assert (repo / kept).exists(), kept
    assert (repo / "task.md").read_text() == "Fix it.\n"


def test_kept_names_with_glob_characters_match_only_themselves(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    run_git(repo, "init", "-q")
    name = "run [1]*?! #x\\y.jsonl "
    keep = git.keep_specs(repo, [repo / name])
    start = git.snapshot(repo, keep)
    (repo / name).write_text("ours\n")
    (repo / "run 1x!.jsonl ").write_text("the agent's\n")
    d = git.diff(repo, start, git.snapshot(repo, keep))
    assert "run 1x!.jsonl" in d
    assert "ours" not in d
    git.restore(repo, start, keep)
    assert (repo / name).exists()
    assert not (repo / "run 1x!.jsonl ").exists()


def test_own_files_the_agent_staged_or_committed_survive_the_reset(tmp_path):
    """mini-swe-agent submits with `git add -A`: a reset --hard would remove staged new files."""
    repo = git_repo(tmp_path / "r")
    keep = git.keep_specs(repo, [repo / "run.jsonl"], [repo / "run.jsonl.attempt-"])
    start = git.snapshot(repo, keep)
    ours = {"run.jsonl.attempt-1": "t1\n", "run.jsonl.attempt-1.restart.json": "{}\n"}
    for name, text in ours.items():
        (repo / name).write_text(text)
    (repo / "a.py").write_text("x = 2\n")
    run_git(repo, "add", "-A")  # the agent's submit stages everything, ours too
    run_git(repo, "commit", "-qm", "agent")
    git.restore(repo, start, keep, [repo / n for n in ours])
    assert (repo / "a.py").read_text() == "x = 1\n"
    for name, text in ours.items():
        assert (repo / name).read_text() == text
