"""Reading runs: format auto-detection, one run (`read_trajectory`), many (`read_runs`).

Detection tries the readers of `monitor.formats.FORMATS` in order: a directory is offered to
each with an empty head (only directory formats such as AutoCodeRover accept it); a file is
offered with its first 64 KiB, decompressed when it is gzip. `format=` forces one reader.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from monitor.errors import LabelError, TranscriptError
from monitor.formats import FORMATS
from monitor.labels import LabelFile, LabelIndex, is_label_name, load_label
from monitor.textio import head_bytes, strip_gz
from monitor.types import Trajectory

# Files that sit beside runs and are neither transcripts nor labels.
_SKIP_SUFFIXES = (
    ".diff", ".patch", ".txt", ".log", ".md", ".rst", ".tsv", ".csv", ".sh", ".py",
    ".yaml", ".yml", ".toml", ".html", ".png", ".lock", ".parquet",
)  # fmt: skip
_SKIP_NAMES = frozenset({"preds.json", "all_preds.jsonl", "summary.json", "PROVENANCE", "LICENSE"})


@dataclass
class Problem:
    """Something that could not be read or joined: the path and what is wrong."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass
class Scan:
    """What a walk over input paths found."""

    runs: list[Path] = field(default_factory=list)
    labels: list[Path] = field(default_factory=list)


def detect(path: str | Path) -> ModuleType:
    """The reader module for the run at `path`; TranscriptError when none fits."""
    path = Path(path)
    if path.is_dir():
        for module in FORMATS.values():
            if module.sniff(path, b""):
                return module
        raise TranscriptError(path, "directory is not a run of any known format")
    if not path.exists():
        raise TranscriptError(path, _missing(path))
    head = head_bytes(path)
    if not head.strip():
        raise TranscriptError(path, "empty file")
    if b"\x00" in head[:4096]:
        raise TranscriptError(path, "binary content (NUL bytes), not a transcript")
    for module in FORMATS.values():
        try:
            if module.sniff(path, head):
                return module
        except Exception:  # noqa: BLE001 - a sniffer must never stop detection
            continue
    raise TranscriptError(
        path, f"unknown format (none of: {', '.join(FORMATS)}); use --format to force one"
    )


def _missing(path: Path) -> str:
    """Why an existing name cannot be read as a file: a symlink loop, a dangling link, or none."""
    if not path.is_symlink():
        return "no such file"
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symbolic link loop (skipped)"
    return f"broken symbolic link to {os.readlink(path)!r} (skipped)"


def _module(path: Path, format: str | None) -> ModuleType:
    if format is None:
        return detect(path)
    if format not in FORMATS:
        raise TranscriptError(path, f"unknown --format {format!r} (known: {', '.join(FORMATS)})")
    return FORMATS[format]


def read_trajectory(path: str | Path, format: str | None = None) -> Trajectory:
    """Read one run (a transcript file or a run directory, plain or gzip).

    Args:
        path: the transcript file or run directory.
        format: a reader name from `monitor.formats.FORMATS` to force; None detects it.

    Returns:
        The parsed Trajectory, with `resolved=None` (use `read_runs` to join labels).

    Raises:
        TranscriptError: naming the file, when it cannot be read as a run.
    """
    path = Path(path)
    return _module(path, format).read(path)


def _read_all(path: Path, format: str | None) -> list[Trajectory]:
    """Every run in `path` (a file may hold several, e.g. OpenHands output.jsonl)."""
    module = _module(path, format)
    many = getattr(module, "read_all", None)
    return list(many(path)) if many is not None else [module.read(path)]


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


def scan(paths: Iterable[str | Path], format: str | None = None) -> Scan:
    """Walk the paths: run candidates (files and run directories) and label files, sorted."""
    found = Scan()
    dir_formats = [m for name, m in FORMATS.items() if format in (None, name)]
    for root in map(Path, paths):
        if not root.exists():
            found.runs.append(root)  # read_runs reports it as a problem ("no such file")
            continue
        if root.is_file():
            (found.labels if is_label_name(root) else found.runs).append(root)
            continue
        if any(m.sniff(root, b"") for m in dir_formats):
            found.runs.append(root)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            keep = []
            for d in sorted(dirnames):
                sub = here / d
                if any(m.sniff(sub, b"") for m in dir_formats):
                    found.runs.append(sub)
                elif not d.startswith("."):
                    keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                p = here / name
                if is_label_name(p) or _run_report(p):
                    found.labels.append(p)
                elif not _skipped(p):
                    found.runs.append(p)
    found.runs.sort()
    found.labels.sort()
    return found


def load_labels(paths: Iterable[Path], problems: list[Problem]) -> list[LabelFile]:
    """Load label files; each one that cannot be used becomes a Problem.

    Notes about usable files (e.g. read leniently) are re-issued as warnings.
    """
    out = []
    for p in paths:
        try:
            lf = load_label(p)
        except LabelError as e:
            problems.append(Problem(e.path, e.reason))
            continue
        for note in lf.warnings:
            warnings.warn(note, stacklevel=2)
        out.append(lf)
    return out


def read_runs(
    paths: Iterable[str | Path],
    *,
    format: str | None = None,
    labels: Iterable[str | Path] = (),
    problems: list[Problem] | None = None,
    progress: bool = False,
) -> Iterator[Trajectory]:
    """Read every run under `paths` and join its label (`resolved`).

    Bad files do not stop the walk: each becomes a Problem appended to `problems` (when
    given), as do duplicate runs (same source, run and id; the first read is kept), label files
    that disagree, and, once the iterator is exhausted, label files that name instances with no
    run here and runs that no label file covers (one Problem per source).

    Args:
        paths: files or folders to search.
        format: force one reader for every file (None: detect per file).
        labels: label files given explicitly (`--labels`): they label every run they name,
            wherever it lies (see monitor.labels).
        problems: list that collects Problems.
        progress: show a tqdm progress bar on stderr.

    Yields:
        Trajectories with `resolved` set from the label files; a run whose reader left
        `source` empty gets its folder's name.
    """
    problems = problems if problems is not None else []
    found = scan(paths, format)
    join = _Joiner(load_labels(found.labels, problems) + load_explicit(labels, problems))
    seen: dict[str, str] = {}
    runs: Iterable[Path] = found.runs
    if progress:
        from tqdm import tqdm

        runs = tqdm(found.runs, desc="ingest", unit="run", disable=None)
    for path in runs:
        try:
            trajs = _read_all(path, format)
        except TranscriptError as e:
            problems.append(Problem(e.path, e.reason))
            continue
        for traj in trajs:
            if not traj.source:  # readers that do not know their layout: the folder names it
                traj.source = (path if path.is_dir() else path.parent).resolve().name
            key = f"{traj.source}|{traj.run}|{traj.id}"
            if key in seen:
                reason = f"duplicate run {traj.id} (also read from {seen[key]}); kept the first"
                problems.append(Problem(str(path), reason))
                continue
            seen[key] = str(path)
            join.label(traj, path, problems)
            yield traj
    join.report(problems)


def load_explicit(paths: Iterable[str | Path], problems: list[Problem]) -> list[LabelFile]:
    """Label files the user named (`--labels`); each one that cannot be used is a Problem."""
    out = []
    for p in map(Path, paths):
        try:
            out.append(load_label(p, explicit=True))
        except LabelError as e:
            problems.append(Problem(e.path, e.reason))
    return out


class _Joiner:
    """Joins verdicts to runs and remembers what to report once every run was read."""

    def __init__(self, labels: list[LabelFile]) -> None:
        self.labels = labels
        self.index = LabelIndex(labels)
        self.matched: dict[int, set[str]] = {id(lf): set() for lf in labels}
        self.uncovered: dict[str, list[str]] = {}  # source folder -> runs no label file covers

    def label(self, traj: Trajectory, path: Path, problems: list[Problem]) -> None:
        """Set `traj.resolved` from the label files; note disagreements as Problems."""
        run_path = Path(traj.path or path).resolve()
        for named in self.index.naming(traj.instance_id):  # label files whose ids have a run
            if named.covers(run_path):
                self.matched[id(named)].add(traj.instance_id)
        verdict, lf, other = self.index.pick(run_path, traj.instance_id)
        traj.resolved = verdict
        if lf is None and not any(f.covers(run_path) for f in self.labels):
            root = next((p for p in run_path.parents if p.name == traj.source), run_path.parent)
            self.uncovered.setdefault(str(root), []).append(traj.id)
        if lf is not None and other is not None:
            problems.append(
                Problem(
                    str(path),
                    f"labels disagree: {lf.path} says {verdict}, {other.path} says {other.verdicts[traj.instance_id]}; used {lf.path.name}",
                )
            )

    def report(self, problems: list[Problem]) -> None:
        """Problems for label ids with no run, and for runs no label file covers."""
        for lf in self.labels:
            missing = sorted(lf.named - self.matched[id(lf)])
            if missing:
                problems.append(
                    Problem(
                        str(lf.path),
                        f"names {len(missing)} instance(s) with no run here: {_shown(missing)}",
                    )
                )
        for root, ids in sorted(self.uncovered.items()):
            problems.append(
                Problem(
                    root,
                    f"{len(ids)} run(s) that no label file covers (no verdict): {_shown(sorted(ids))}",
                )
            )


def _shown(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
