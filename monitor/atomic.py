"""Output folders written whole or not at all: build beside, fsync, rename into place.

    with atomic_dir(out) as tmp:   # tmp: an empty sibling folder, ".<name>.tmp-<pid>-<hex>"
        write everything into tmp
    # out now holds exactly what was written; the previous `out` (if any) stayed whole until then

A process killed inside the block leaves the old `out` untouched and a stale temporary sibling;
the next `atomic_dir` on the same `out` removes stale siblings whose writer is gone (their pid
no longer runs), so a rerun needs no clean-up. The swap of an existing folder is two renames
(old -> ".<name>.old-...", new -> name): a kill between them leaves the old folder under its
`.old` name, which the next run puts back before it starts (`recover`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

_TMP = ".tmp-"
_OLD = ".old-"


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root` (contents first, then the folders naming them)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for dirpath, _dirs, _files in os.walk(root, topdown=False):
        fsync_dir(Path(dirpath))


def fsync_dir(path: Path) -> None:
    """fsync a folder so a rename inside it survives a power cut (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory: the rename still happened
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _sibling_pid(name: str, marker: str) -> int | None:
    """The writer pid in ".<out>.tmp-<pid>-<hex>" / ".<out>.old-<pid>-<hex>", or None."""
    tail = name.rsplit(marker, 1)[-1]
    head = tail.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _siblings(out: Path, marker: str) -> list[Path]:
    prefix = f".{out.name}{marker}"
    parent = out.parent
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.name.startswith(prefix))


def recover(out: str | Path) -> None:
    """Undo what a writer killed mid-way left beside `out`: put back an old folder that was
    moved aside but never replaced, and remove temporary siblings whose writer is gone."""
    out = Path(out)
    for old in _siblings(out, _OLD):
        pid = _sibling_pid(old.name, _OLD)
        if pid is not None and _pid_alive(pid):
            continue
        if not out.exists():
            old.rename(out)  # killed between the two renames: the old output comes back
        else:
            shutil.rmtree(old, ignore_errors=True)
    for tmp in _siblings(out, _TMP):
        pid = _sibling_pid(tmp.name, _TMP)
        if pid is None or not _pid_alive(pid):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(out: str | Path) -> Iterator[Path]:
    """A temporary empty folder beside `out`; on a clean exit it is fsynced and renamed to
    `out` (replacing a previous `out` folder); on an exception it is removed and `out` is left
    as it was.

    Raises:
        NotADirectoryError: `out` exists and is not a folder.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: exists and is not a folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    recover(out)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}{_TMP}{tag}"
    tmp.mkdir()
    try:
        yield tmp
        _fsync_tree(tmp)
        if out.exists():
            old = out.parent / f".{out.name}{_OLD}{tag}"
            out.rename(old)
            tmp.rename(out)
            fsync_dir(out.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write one file whole or not at all (temporary sibling, fsync, rename), as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Write one file whole or not at all: a temporary sibling, fsync, rename into place, then
    (with `sync_dir`) fsync of the folder so the rename itself survives a crash; a cache whose
    entry may be lost, never torn, passes sync_dir=False."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{_TMP}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)
