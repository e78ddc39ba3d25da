"""The work tree of an attempt: snapshot it, diff two snapshots, put it back.

A snapshot is (HEAD commit, tree of the work tree): the tree is written through a temporary
index (a copy of the real one, so unchanged files are not hashed again) with `git add -A`, so it
holds untracked files too and the real index is never touched. Ignored files are not part of it
and are never removed. Nor are the supervisor's own files (`keep`: the transcript, its kept
attempts, restart packets and prompts, the summary) when they lie inside the work tree: they
are left out of every snapshot and diff (so no attempt's diff or prompt carries a stopped
transcript) and the reset leaves them where they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class GitError(RuntimeError):
    """A git command failed (the message has its stderr)."""


@dataclass(frozen=True)
class Snapshot:
    head: str  # "" in a repository without commits
    tree: str


def _git(workdir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    p = subprocess.run(
        ["git", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    if p.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {workdir}: {p.stderr.strip()[-500:]}")
    return p.stdout


def is_repo(workdir: Path) -> bool:
    """Whether `workdir` is inside a git work tree."""
    try:
        return _git(workdir, "rev-parse", "--is-inside-work-tree").strip() == "true"
    except (GitError, OSError):
        return False


def keep_specs(workdir: Path, files: Sequence[Path], prefixes: Sequence[Path] = ()) -> list[str]:
    """Patterns (from the top of the work tree, as .gitignore writes them) for `files` and every
    file whose path starts with one of `prefixes` (e.g. `run.jsonl.attempt-`): what a snapshot,
    a diff and a reset leave out. Relative paths are the process's (as the command line gave
    them); paths outside the work tree need none."""
    try:
        top = Path(_git(workdir, "rev-parse", "--show-toplevel").strip()).resolve()
    except (GitError, OSError):
        return []
    specs = []
    for path, tail in [(f, "") for f in files] + [(p, "*") for p in prefixes]:
        where = Path(path).absolute().parent.resolve() / Path(path).name  # the link kept
        try:
            rel = where.relative_to(top).as_posix()
        except ValueError:
            continue
        specs.append("/" + "".join(_literal(c) for c in rel) + tail)
    return specs


def _literal(c: str) -> str:
    """One character matched as itself by a glob pathspec and a .gitignore pattern alike."""
    if c == "\\":
        return "\\\\"  # a backslash escapes in both; in brackets it would escape the "]"
    return f"[{c}]" if c in "*?[] " else c


def _pathspecs(keep: Sequence[str]) -> list[str]:
    """The whole work tree (whatever folder git runs in) less `keep`."""
    return ["--", ":/", *(f":(top,exclude,glob){k[1:]}" for k in keep)]


def snapshot(workdir: Path, keep: Sequence[str] = ()) -> Snapshot:
    """The work tree as it is now (tracked and untracked files, not ignored ones, not `keep`)."""
    try:
        head = _git(workdir, "rev-parse", "--verify", "-q", "HEAD").strip()
    except GitError:
        head = ""
    index = Path(_git(workdir, "rev-parse", "--absolute-git-dir").strip()) / "index"
    with tempfile.TemporaryDirectory(prefix="failfast-git-") as tmp:
        tmp_index = Path(tmp) / "index"
        if index.exists():
            shutil.copy2(index, tmp_index)  # its mtime too: git's racy-clean check needs it
        env = {"GIT_INDEX_FILE": str(tmp_index)}
        _git(workdir, "add", "-A", *_pathspecs(keep), env=env)
        tree = _git(workdir, "write-tree", env=env).strip()
    return Snapshot(head, tree)


def diff(workdir: Path, before: Snapshot, after: Snapshot) -> str:
    """What changed from `before` to `after`, as a patch `git apply` takes."""
    return _git(workdir, "diff", "--binary", before.tree, after.tree)


def restore(
    workdir: Path, snap: Snapshot, keep: Sequence[str] = (), protect: Sequence[Path] = ()
) -> None:
    """Put the repository back to `snap`: HEAD (commits made since are dropped from the branch),
    the work tree's files (files created since are removed, except `keep`), the index as HEAD.
    The whole work tree, whichever folder of it `workdir` is. `protect`: files (the `keep` ones
    that exist) copied aside first and put back after: an agent that ran `git add -A` or
    committed them would otherwise have them removed by the reset."""
    with tempfile.TemporaryDirectory(prefix="failfast-keep-") as aside:
        saved = []
        for i, path in enumerate(protect):
            if Path(path).is_file():
                copy = Path(aside) / str(i)
                shutil.copy2(path, copy)
                saved.append((Path(path), copy))
        try:
            _restore(workdir, snap, keep)
        finally:
            for path, copy in saved:
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(copy, path)


def _restore(workdir: Path, snap: Snapshot, keep: Sequence[str]) -> None:
    if snap.head:
        _git(workdir, "reset", "-q", "--hard", snap.head)
    # excluded as ignored files are: an untracked folder holding one is not removed whole
    _git(workdir, "clean", "-fdq", *(f"--exclude={k}" for k in keep), "--", ":/")
    _git(workdir, "read-tree", snap.tree)
    _git(workdir, "checkout-index", "-a", "-f")
    if snap.head:
        _git(workdir, "reset", "-q")  # index back to HEAD; files the snapshot had stay on disk
    else:
        _git(workdir, "read-tree", "--empty")
