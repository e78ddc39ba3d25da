"""Reading runs: format auto-detection, one run (`read_trajectory`), many (`read_runs`; the
label join is monitor.label_join).

Detection tries the readers of `monitor.formats.FORMATS` in order: a directory is offered to
each with an empty head (only directory formats such as AutoCodeRover accept it); a file is
offered with its first 64 KiB, decompressed when it is gzip. `format=` forces one reader.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

from monitor.errors import TranscriptError
from monitor.formats import FORMATS
from monitor.formats._layout import generic_name
from monitor.label_join import LabelJoin, load_explicit, load_labels
from monitor.problems import Problem
from monitor.scan import Scan, given_labels, scan
from monitor.textio import head_bytes
from monitor.types import Trajectory


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
    try:
        return _module(path, format).read(path)
    except TranscriptError:
        if not path.is_dir():
            raise
    # A folder that holds runs rather than being one (a mini-swe-agent instance folder holds
    # its `<instance>.traj.json`): read its one run, or say which it holds.
    inside = [p for p in scan([path], format).runs if p != path]
    if len(inside) == 1:
        return read_trajectory(inside[0], format)
    if not inside:
        raise TranscriptError(path, "a folder with no run of any known format in it")
    names = ", ".join(p.name for p in inside[:3]) + (", ..." if len(inside) > 3 else "")
    raise TranscriptError(
        path, f"a folder of {len(inside)} runs ({names}): give one of them, or ingest the folder"
    )


def _read_all(path: Path, format: str | None) -> list[Trajectory]:
    """Every run in `path` (a file may hold several, e.g. OpenHands output.jsonl)."""
    module = _module(path, format)
    many = getattr(module, "read_all", None)
    return list(many(path)) if many is not None else [module.read(path)]


def read_runs(
    paths: Iterable[str | Path],
    *,
    format: str | None = None,
    labels: Iterable[str | Path] = (),
    problems: list[Problem] | None = None,
    progress: bool = False,
    scanned: Scan | None = None,
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
        scanned: when given, receives what the walk found (runs, label files, links followed).

    Yields:
        Trajectories with `resolved` set from the label files; a run whose reader left
        `source` empty gets its folder's name.
    """
    problems = problems if problems is not None else []
    found = scan(paths, format)
    problems.extend(found.problems)
    if scanned is not None:
        scanned.runs, scanned.labels, scanned.links = found.runs, found.labels, found.links
        scanned.problems = found.problems
    given = given_labels(paths, found)
    near = [p for p in found.labels if p not in given]
    join = LabelJoin(load_labels(near, problems) + load_explicit([*given, *labels], problems))
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
                traj.source = folder_source(path)
            key = f"{traj.source}|{traj.run}|{traj.id}"
            if key in seen:
                reason = f"duplicate run {traj.id} (also read from {seen[key]}); kept the first"
                problems.append(Problem(str(path), reason))
                continue
            seen[key] = str(path)
            join.label(traj, path, problems)
            short = _cut_short(traj)
            if short:
                problems.append(Problem(str(path), short))
            yield traj
    join.report(problems)


def _cut_short(traj: Trajectory) -> str:
    """Why a run's file holds fewer model calls than its own totals count ("" when it does
    not): a transcript saved cut short (four of CodeR's published `.traj` files hold 5 to 28 of
    their 38 to 57 calls). Such a run is kept, its verdict resting on steps it does not show."""
    calls = traj.totals.api_calls if traj.totals is not None else None
    held = len(traj.steps)
    # more calls missing than held: retries a harness does not record (SWE-agent's format
    # errors: up to 13 of 32 calls here) are fewer
    if not calls or calls - held <= max(5, held):
        return ""
    return (
        f"run {traj.id} holds {held} of the {calls} model calls its totals count (saved cut "
        "short?); kept, its reported tokens spread over the steps it holds"
    )


def folder_source(path: Path) -> str:
    """The source of a run whose reader does not know its layout: the folder holding it, or
    the first one above that is not a generic container (`agent`, `trajs`, `logs`, ...)."""
    folder = Path(os.path.abspath(path if path.is_dir() else path.parent))
    for p in (folder, *folder.parents):
        if p.name and not generic_name(p.name):
            return p.name
    return folder.name
