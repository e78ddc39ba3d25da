"""Read a hook's JSON event from stdin with a bounded wait.

`sys.stdin.read()` waits for end-of-file; a harness (or a wrapper) that writes the event and
keeps the pipe open held the hook forever. `read_event_within` returns as soon as what arrived
parses as one JSON object, at end-of-file, or at the deadline, and never reads more than
`max_bytes`.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any, BinaryIO

STDIN_SECONDS = 5.0
"""Longest wait for the event on stdin (Claude Code writes it at once and closes the pipe)."""
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Largest event read (a PreToolUse event carries the tool input, e.g. a file being written)."""


def read_event_within(
    stream: BinaryIO, timeout: float, *, max_bytes: int = MAX_EVENT_BYTES
) -> dict[str, Any]:
    """The JSON object on `stream`; ValueError (saying what is wrong) when none arrives in time.

    Args:
        stream: stdin's binary buffer (a pipe, a file or a terminal).
        timeout: seconds to wait for the whole event.
        max_bytes: most bytes read.
    """
    deadline = time.monotonic() + timeout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (e.g. io.BytesIO in tests)
        return parse_event(stream.read(max_bytes + 1), max_bytes)
    data = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return parse_event(bytes(data), max_bytes)  # end of file
        data += chunk
        if len(data) > max_bytes:
            break
        if chunk.rstrip().endswith(b"}"):  # cheap test first: only a closing brace can end it
            try:
                return parse_event(bytes(data), max_bytes)
            except ValueError:
                continue  # not complete yet
    if len(data) > max_bytes:
        raise ValueError(f"hook event on stdin is over {max_bytes} bytes")
    if not data:
        raise ValueError(f"no hook event on stdin within {timeout:g} s")
    return parse_event(bytes(data), max_bytes, late=timeout)


def parse_event(data: bytes, max_bytes: int, *, late: float | None = None) -> dict[str, Any]:
    """The event object of `data` (ValueError naming what is wrong)."""
    if len(data) > max_bytes:
        raise ValueError(f"hook event on stdin is over {max_bytes} bytes")
    try:
        event = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        when = f" (stdin still open after {late:g} s)" if late is not None else ""
        raise ValueError(f"hook event on stdin is not JSON{when}: {e}") from e
    if not isinstance(event, dict):
        raise ValueError("hook event on stdin must be a JSON object")
    return event
