"""Opening transcripts and label files: plain or gzip, strict or lenient JSON."""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
"""How much of a file sniffing reads (decompressed)."""


def read_bytes(path: str | Path) -> bytes:
    """Return the decompressed bytes of `path` (gzip detected by magic number, not by name)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TranscriptError(p, f"cannot read file: {e.strerror or e}") from e
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise TranscriptError(p, f"corrupt gzip data: {e}") from e
    return data


def head_bytes(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first `n` bytes of the (decompressed) file; TranscriptError when unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
            if raw[:2] != GZIP_MAGIC:
                return raw
        with gzip.open(path, "rb") as g:
            return g.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise TranscriptError(path, f"cannot read: {e}") from e


def read_text(path: str | Path) -> str:
    """Return the text of `path` (plain or gzip), as UTF-8; binary content is an error."""
    data = read_bytes(path)
    if b"\x00" in data[:4096]:
        raise TranscriptError(path, "binary content (NUL bytes), not a text transcript")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TranscriptError(path, f"not UTF-8 text (byte {e.start})") from e


_TRAILING_COMMA = re.compile(r",(\s*[\]}])")


def load_json(path: str | Path, *, lenient: bool = False) -> Any:
    """Parse a JSON file (plain or gzip).

    With `lenient=True`, trailing commas before `]` or `}` (as in CodeR's published
    results.json) are removed and a warning names the file.
    """
    text = read_text(path)
    if not text.strip():
        raise TranscriptError(path, "empty file")
    try:
        return json.loads(text)
    except RecursionError as e:
        raise TranscriptError(path, "JSON nested too deeply to parse") from e
    except json.JSONDecodeError as e:
        if lenient:
            fixed = _TRAILING_COMMA.sub(r"\1", text)
            try:
                obj = json.loads(fixed)
            except (json.JSONDecodeError, RecursionError):
                pass
            else:
                warnings.warn(
                    f"{path}: not strict JSON (trailing commas); read leniently", stacklevel=2
                )
                return obj
        raise TranscriptError(
            path, f"invalid JSON at line {e.lineno} col {e.colno}: {e.msg}"
        ) from e


def load_jsonl(path: str | Path) -> list[Any]:
    """Parse a JSON-lines file; a bad line is an error naming its line number.

    A last line cut short (a live transcript being written) is dropped silently.
    """
    text = read_text(path)
    if not text.strip():
        raise TranscriptError(path, "empty file")
    # Split on "\n" only: str.splitlines() also breaks at U+2028, \x0c, ... which JSON strings
    # may hold unescaped (Node's JSON.stringify leaves U+2028 as is).
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except RecursionError as e:
            raise TranscriptError(path, f"JSON on line {i} nested too deeply to parse") from e
        except json.JSONDecodeError as e:
            if i == len(lines) and not text.endswith("\n"):
                break  # partial last line of a growing file
            raise TranscriptError(path, f"invalid JSON on line {i}: {e.msg}") from e
    return out


def between(text: str, start: str, end: str) -> str | None:
    """The text between the first `start` and the first `end` after it; None when either is absent.

    What `re.search(re.escape(start) + "(.*?)" + re.escape(end), text, re.S)` finds, in linear time:
    that regex rescans the rest of the text from every `start` when no `end` follows (quadratic),
    and with `\\s*` around the group it is cubic on a long run of spaces (31 s at 4,000 spaces).
    """
    i = text.find(start)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i)
    return None if j < 0 else text[i:j]


def strip_gz(name: str) -> str:
    """`x.traj.gz` -> `x.traj`."""
    return name[:-3] if name.endswith(".gz") else name


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_safe(x: Any) -> Any:
    """A copy that strict JSON can hold: non-finite floats -> None (an infinite threshold means
    "no stop"), tuples -> lists, unpaired surrogates in strings -> U+FFFD (UTF-8 cannot encode
    them: a diff holding one made the service answer 500); what a round trip through the HTTP
    service gives."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, str):
        return x if x.isascii() else _SURROGATE.sub("\ufffd", x)
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x
