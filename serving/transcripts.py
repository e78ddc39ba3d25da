"""Reading a transcript for scoring: by path (format sniffed) or from request bytes, with limits.

Both paths take `max_bytes`: the most bytes a transcript may hold once decompressed. A gzip
transcript is inflated in a stream and abandoned as soon as it passes the limit, before any
reader or sniffer sees it (a 5.6 MB gzip body used to inflate to gigabytes); a plain file over
the limit is refused from its size, before it is read. Only regular files and run folders are
read: a FIFO or a device (/dev/zero) would block or never end.
"""

from __future__ import annotations

import os
import stat
import tempfile
import zlib
from pathlib import Path

from monitor.errors import TranscriptError, TranscriptTooLarge
from monitor.formats import FORMATS
from monitor.reading import folder_source
from monitor.textio import GZIP_MAGIC, read_bytes
from monitor.types import Trajectory
from serving.limits import MAX_STEPS, MAX_TRANSCRIPT_BYTES

__all__ = ["MAX_STEPS", "MAX_TRANSCRIPT_BYTES", "read_transcript", "read_transcript_bytes"]

HEAD_BYTES = 64 * 1024


def gunzip_capped(data: bytes, limit: int, *, name: object = "transcript") -> bytes:
    """Inflate gzip `data` (concatenated members too), stopping as soon as it passes `limit` bytes.

    Raises:
        TranscriptTooLarge: the content is over `limit` bytes once decompressed.
        TranscriptError: the gzip data is corrupt or cut short.
    """
    out = bytearray()
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip header and trailer
            while True:
                out += inflater.decompress(rest, limit + 1 - len(out))
                if len(out) > limit:
                    raise TranscriptTooLarge(
                        name,
                        f"over {limit} bytes once decompressed (gzip; the limit is --max-bytes)",
                    )
                rest = inflater.unconsumed_tail
                if inflater.eof:
                    rest = inflater.unused_data.lstrip(b"\x00")  # padding after a member
                    break
                if not rest:
                    raise TranscriptError(name, "corrupt gzip data: cut short")
            if rest and rest[:2] != GZIP_MAGIC:
                raise TranscriptError(name, "corrupt gzip data: trailing garbage")
    except zlib.error as e:
        raise TranscriptError(name, f"corrupt gzip data: {e}") from e
    return bytes(out)


def check_readable(path: Path, max_bytes: int | None = None) -> None:
    """Refuse what is not a regular file or a folder, and plain files over `max_bytes`.

    Raises:
        TranscriptError: no such path, or a FIFO, socket or device.
        TranscriptTooLarge: a file larger than `max_bytes` (a gzip file can only be measured
            while it is inflated: see `gunzip_capped`).
    """
    try:
        st = os.stat(path)
    except OSError as e:
        raise TranscriptError(path, f"cannot read: {e.strerror or e}") from e
    if stat.S_ISDIR(st.st_mode):
        return
    if not stat.S_ISREG(st.st_mode):
        raise TranscriptError(path, "not a regular file (a FIFO, socket or device is not read)")
    if max_bytes is not None and st.st_size > max_bytes:
        raise TranscriptTooLarge(
            path, f"{st.st_size} bytes, over the limit of {max_bytes} (--max-bytes)"
        )


def read_transcript(
    path: str | Path, fmt: str | None = None, *, max_bytes: int | None = None
) -> Trajectory:
    """Read a run with the named reader, or the first reader whose `sniff` accepts it.

    Args:
        path: a transcript file (plain or gzip) or a run folder.
        fmt: reader name; None sniffs it.
        max_bytes: most bytes of the (decompressed) file; None: no limit.

    Raises:
        TranscriptError: unknown format name, not a regular file, no reader recognises the
            file, or it is malformed; TranscriptTooLarge past `max_bytes`.
    """
    p = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise TranscriptError(p, f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    check_readable(p, max_bytes)
    if max_bytes is not None and p.is_file():
        with open(p, "rb") as f:
            gzipped = f.read(2) == GZIP_MAGIC
        if gzipped:  # measured under the limit first; then read in place (readers take X.gz)
            # so the run keeps the source and id its folders give it (not the temporary folder's)
            gunzip_capped(p.read_bytes(), max_bytes, name=p)
    if fmt is not None:
        return _placed(FORMATS[fmt].read(p), p)
    head = b"" if p.is_dir() else read_bytes(p)[:HEAD_BYTES]
    for reader in FORMATS.values():
        if reader.sniff(p, head):
            return _placed(reader.read(p), p)
    raise TranscriptError(p, f"not a supported transcript format ({', '.join(FORMATS)})")


def _placed(traj: Trajectory, path: Path) -> Trajectory:
    """A run whose reader does not know its layout (Claude Code, Codex, ...) gets the source
    `failfast ingest` gives it, its folder's name, so scoring it live finds the group it was
    calibrated under from the same files."""
    if not traj.source:
        traj.source = folder_source(path)
    return traj


def read_transcript_bytes(
    data: bytes,
    *,
    fmt: str | None = None,
    filename: str = "transcript",
    max_bytes: int | None = None,
) -> Trajectory:
    """Parse transcript content sent over the wire (single-file formats only).

    Gzip content is inflated first, under `max_bytes`. The bytes go to a temporary file named
    `filename` (some readers use the file name, e.g. `.traj`; it must be a plain file name, see
    `safe_filename`), which is deleted afterwards.

    Raises:
        TranscriptError: unreadable content; TranscriptTooLarge past `max_bytes`.
    """
    if max_bytes is not None:
        if data[:2] == GZIP_MAGIC:
            data = gunzip_capped(data, max_bytes, name=filename)
        elif len(data) > max_bytes:
            raise TranscriptTooLarge(filename, f"{len(data)} bytes, over the limit of {max_bytes}")
    name = Path(filename).name or "transcript"
    with tempfile.TemporaryDirectory(prefix="failfast-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        traj = read_transcript(path, fmt)
    # Names the reader took from the temporary folder are not the run's: a source named after
    # it would pick no calibrated group, the default file name no task.
    here = {Path(tmp).name, Path(tmp).parent.name, Path(tmp).parent.parent.name}
    if traj.source in here:
        traj.source = ""
    if traj.run in here:
        traj.run = ""
    if tmp in traj.id or any(part in here for part in traj.id.split("/")):
        traj.id = name if traj.id else ""
    default = name.split(".")[0] == "transcript"  # the client named no file: no task in it
    if traj.instance_id in here or (default and traj.instance_id.split(".")[0] == "transcript"):
        traj.instance_id = ""
    traj.path = filename
    return traj


def safe_filename(filename: str) -> str:
    """`filename` reduced to a plain file name that can be created in a temporary folder.

    The folder part is dropped (`runs/x.traj` -> `x.traj`); "" becomes "transcript".

    Raises:
        ValueError: `.` or `..`, a NUL or other control character, or a name over 255 bytes.
    """
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    if name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    if any(ord(c) < 32 or c == "\x7f" for c in name):
        raise ValueError("a file name may not hold NUL or control characters")
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        raise ValueError("a file name may be at most 255 bytes long")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise ValueError("a file name may not hold unpaired surrogates")
    return name or "transcript"
