"""Reading a transcript for scoring: by path (format sniffed) or from request bytes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from monitor.errors import TranscriptError
from monitor.formats import FORMATS
from monitor.textio import read_bytes
from monitor.types import Trajectory

HEAD_BYTES = 64 * 1024


def read_transcript(path: str | Path, fmt: str | None = None) -> Trajectory:
    """Read a run with the named reader, or the first reader whose `sniff` accepts it.

    Raises:
        TranscriptError: unknown format name, no reader recognises the file, or it is malformed.
    """
    p = Path(path)
    if fmt is not None:
        if fmt not in FORMATS:
            raise TranscriptError(p, f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
        return FORMATS[fmt].read(p)
    if not p.exists():
        raise TranscriptError(p, "no such file or directory")
    head = b"" if p.is_dir() else read_bytes(p)[:HEAD_BYTES]
    for reader in FORMATS.values():
        if reader.sniff(p, head):
            return reader.read(p)
    raise TranscriptError(p, f"not a supported transcript format ({', '.join(FORMATS)})")


def read_transcript_bytes(
    data: bytes, *, fmt: str | None = None, filename: str = "transcript"
) -> Trajectory:
    """Parse transcript content sent over the wire (single-file formats only).

    The bytes go to a temporary file named like `filename` (some readers use the file name,
    e.g. `.traj`), which is deleted afterwards.
    """
    name = Path(filename).name or "transcript"
    with tempfile.TemporaryDirectory(prefix="failfast-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        traj = read_transcript(path, fmt)
    traj.path = filename
    return traj
