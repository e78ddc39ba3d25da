"""The walk over input paths: which files are run candidates and which are label files,
following symbolic links as `find -L` does (each real folder read once, loops skipped), and
the label files the user pointed at. monitor.reading reads what it finds."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from monitor.errors import TranscriptError
from monitor.formats import FORMATS, aider
from monitor.labels import is_label_name
from monitor.problems import Problem
from monitor.textio import head_bytes, strip_gz

# Files that sit beside runs and are neither transcripts nor labels.
_SKIP_SUFFIXES = (
    ".diff", ".patch", ".txt", ".log", ".md", ".rst", ".tsv", ".csv", ".sh", ".py",
    ".yaml", ".yml", ".toml", ".html", ".png", ".lock", ".parquet",
)  # fmt: skip
_SKIP_NAMES = frozenset(
    {"preds.json", "all_preds.jsonl", "summary.json", "PROVENANCE", "LICENSE", "config.json"}
)  # config.json: a harness's settings (a Harbor job's), never a run


@dataclass
class Scan:
    """What a walk over input paths found.

    Attributes:
        runs: run candidates (files and run directories).
        labels: label files.
        links: symbolic links followed (to folders and to files).
        problems: links skipped (a loop, or a second link to a folder already read).
    """

    runs: list[Path] = field(default_factory=list)
    labels: list[Path] = field(default_factory=list)
    links: int = 0
    problems: list[Problem] = field(default_factory=list)


def _skipped(p: Path) -> bool:
    name = strip_gz(p.name)
    return name.startswith(".") or name in _SKIP_NAMES or name.endswith(_SKIP_SUFFIXES)


def _run_report(p: Path) -> bool:
    """True for a SWE-bench run report `<model>.<run_id>.json` (named freely, found by content)."""
    if not strip_gz(p.name).endswith(".json") or strip_gz(p.name).endswith(".traj.json"):
        return False
    try:
        head = head_bytes(p, 4096)
    except TranscriptError:
        return False
    return head.lstrip().startswith(b"{") and (
        b'"total_instances"' in head or b'"resolved_ids"' in head
    )


def _is_md_run(p: Path) -> bool:
    """True for a markdown file that is an Aider chat transcript (other .md files are skipped)."""
    name = strip_gz(p.name)
    if not name.endswith(".md"):
        return False
    try:
        return aider.sniff(p, head_bytes(p, 4096))
    except TranscriptError:
        return False


def _candidate(p: Path, found: Scan) -> None:
    if is_label_name(p) or _run_report(p):
        found.labels.append(p)
    elif _is_md_run(p) or not _skipped(p):
        found.runs.append(p)


class _Walk:
    """A walk that follows symbolic links as `find -L` does, reading each real folder once."""

    def __init__(self, found: Scan, dir_formats: list[ModuleType]) -> None:
        self.found = found
        self.dir_formats = dir_formats
        self.seen: dict[tuple[int, int], Path] = {}  # (device, inode) -> the path it was read as

    def first_visit(self, p: Path, chain: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
        """The folder's identity when it is new; None (and a Problem) for a loop or a repeat."""
        st = p.stat()
        key = (st.st_dev, st.st_ino)
        real, above = os.path.realpath(p), os.path.realpath(p.parent)
        up = p.is_symlink() and (above == real or above.startswith(real.rstrip(os.sep) + os.sep))
        if key in chain or up:  # a link back to a folder above it (given or not)
            self.found.problems.append(Problem(str(p), f"symbolic link loop to {real} (skipped)"))
            return None
        if key in self.seen:
            self.found.problems.append(
                Problem(str(p), f"same folder as {self.seen[key]}, already read (skipped)")
            )
            return None
        self.seen[key] = p
        return key

    def run_dir(self, sub: Path) -> bool:
        """True (and noted) when `sub` is a run directory; its label files are noted too."""
        module = next((m for m in self.dir_formats if m.sniff(sub, b"")), None)
        if module is None:
            return False
        self.found.runs.append(sub)
        self.found.labels.extend(getattr(module, "labels_in", lambda _p: [])(sub))
        return True

    def folders(self, root: Path, key: tuple[int, int]) -> None:
        """Collect the runs and label files under `root` (a folder visited for the first time)."""
        stack: list[tuple[Path, tuple[tuple[int, int], ...]]] = [(root, (key,))]
        while stack:
            here, chain = stack.pop()
            try:
                entries = sorted(os.scandir(here), key=lambda e: e.name)
            except OSError as e:
                self.found.problems.append(Problem(str(here), f"cannot list folder: {e.strerror}"))
                continue
            for entry in entries:
                sub = here / entry.name
                link = entry.is_symlink()
                try:
                    is_dir = entry.is_dir()  # follows a link; False for a loop or a dangling one
                except OSError:
                    is_dir = False
                if not is_dir:
                    if link and sub.exists():
                        self.found.links += 1
                    _candidate(sub, self.found)  # a dangling link or a loop: reported on reading
                    continue
                if link:
                    self.found.links += 1
                if (sub / "state.json").is_file() and (sub / "dataset_info.json").is_file():
                    continue  # a corpus `ingest` wrote (its own --out, say): not transcripts
                sub_key = self.first_visit(sub, chain)
                if sub_key is None or self.run_dir(sub) or entry.name.startswith("."):
                    continue
                stack.append((sub, (*chain, sub_key)))


def scan(paths: Iterable[str | Path], format: str | None = None) -> Scan:
    """Walk the paths: run candidates (files and run directories) and label files, sorted.

    Symbolic links are followed (to folders and files); each real folder is read once, under the
    first path that reaches it; a link back to a folder above it (a loop), or a second link to a
    folder already read, is a Problem and skipped. Paths keep the links' names: a run reached
    through a link belongs to the folder the link is in (that folder names its source).
    """
    found = Scan()
    dir_formats = [m for name, m in FORMATS.items() if format in (None, name)]
    walk = _Walk(found, dir_formats)
    for root in map(Path, paths):
        if not root.exists():
            found.runs.append(root)  # read_runs reports it as a problem ("no such file")
            continue
        if root.is_symlink():
            found.links += 1
        if root.is_file():
            (found.labels if is_label_name(root) else found.runs).append(root)
            continue
        key = walk.first_visit(root, ())
        if key is not None and not walk.run_dir(root):
            walk.folders(root, key)
    found.runs.sort()
    found.labels.sort()
    return found


def given_labels(paths: Iterable[str | Path], found: Scan) -> list[Path]:
    """Label files the user pointed at: a label file given as a path, and the label files of a
    folder given as a path that holds no run (`ingest runs/ labels/`). They label every run they
    name, wherever it lies, as `--labels` files do; a label file beside runs labels only the
    runs of its own folder tree."""
    out: list[Path] = []
    for root in map(Path, paths):
        if root.is_file():
            out += [root] if root in found.labels else []
        elif root.is_dir() and not any(r.is_relative_to(root) for r in found.runs):
            out += [p for p in found.labels if p.is_relative_to(root)]
    return out
