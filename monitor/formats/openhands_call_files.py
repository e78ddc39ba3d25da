"""An OpenHands `llm_completions/<instance>/` folder: one `<model>-<unix time>.json` per LLM call
of a run (OpenHands `openhands/llm/llm.py`, log_completions), and which of them is the run now.
Used by monitor.formats.openhands_completions."""

from __future__ import annotations

from pathlib import Path

from monitor.errors import TranscriptError
from monitor.formats._fields import file_stem
from monitor.textio import read_bytes, strip_gz


def call_files(folder: Path) -> list[Path]:
    """The `*.json` (or `.json.gz`) files in `folder`, by name; [] when it cannot be listed."""
    try:
        children = sorted(folder.iterdir())
    except OSError:
        return []
    return [p for p in children if p.is_file() and strip_gz(p.name).endswith(".json")]


def without_timestamp(stem: str) -> str:
    """`<model>-<unix time>` -> `<model>` (OpenHands names each call's file so)."""
    head, sep, tail = stem.rpartition("-")
    return head if sep and tail.replace(".", "", 1).isdigit() and len(tail) >= 9 else stem


def _call_time(path: Path) -> float | None:
    """The unix time in a call file's name (`<model>-<unix time>.json`), None without one."""
    stem = file_stem(path)
    if without_timestamp(stem) == stem:
        return None
    return float(stem.rpartition("-")[2])  # digits with at most one ".": `without_timestamp`


def in_time_order(folder: Path) -> list[Path] | None:
    """The folder's call files, oldest first by the time in their names; None when some file
    has no time in its name (then no order of the calls is known)."""
    files = call_files(folder)
    times = [_call_time(p) for p in files]
    if not files or any(t is None for t in times):
        return None
    return [p for _t, _n, p in sorted((t, p.name, p) for t, p in zip(times, files, strict=True))]


def latest(folder: Path) -> Path:
    """The run's latest call file: by the time in its name when every file has one (a crashed
    attempt's files stay beside a rerun's, so the longest conversation may be the old run's),
    else the file with the longest conversation (within one run each call's conversation
    extends the one before)."""
    ordered = in_time_order(folder)
    if ordered:
        return ordered[-1]
    files = call_files(folder)
    if not files:
        raise TranscriptError(folder, "no OpenHands completion files (*.json) in this folder")
    return max(files, key=lambda p: (len(read_bytes(p)), p.name))
