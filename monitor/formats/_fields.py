"""Defensive field access shared by the JSON-based readers.

Transcripts come from many tool versions and may be cut short or damaged; every value read from
one is checked for its type here, so that a reader meets odd input with a TranscriptError (raised
by the reader) and never with a TypeError or KeyError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.textio import strip_gz

# Tools whose `command` argument is the action itself (the shell command line).
SHELL_TOOLS = frozenset(
    {
        "bash",
        "shell",
        "shell_command",
        "execute_bash",
        "run",
        "local_shell",
        "exec_command",
        "terminal",
        "run_shell_command",
    }
)

NO_OUTPUT = "(no output)"
"""The observation of a call that was answered with nothing: never empty, so that an answered
call is not taken for one still waiting (serving.run_identity.ANSWERED_BY_ID)."""


def as_dict(x: Any) -> dict[str, Any]:
    """`x` if it is a dict, else an empty dict."""
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    """`x` if it is a list, else an empty list."""
    return x if isinstance(x, list) else []


def as_str(x: Any) -> str:
    """`x` if it is a string, else ""."""
    return x if isinstance(x, str) else ""


def as_int(x: Any) -> int:
    """`x` as a non-negative int when it is a finite number (bools excluded), else 0."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return 0
    if x != x or x in (float("inf"), float("-inf")):  # NaN / infinity
        return 0
    return max(int(x), 0)


def as_float(x: Any) -> float | None:
    """`x` as a float when it is a finite number (bools excluded), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    f = float(x)
    if f != f or f in (float("inf"), float("-inf")):
        return None
    return f


def compact_json(x: Any) -> str:
    """One-line JSON with sorted keys (stable text for identical calls)."""
    try:
        return json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(x)


def action_text(tool: str, args: Any) -> str:
    """The action as one string: the command line for shell tools, else `tool(args-json)`."""
    d = as_dict(args)
    cmd = d.get("command", d.get("cmd"))
    if tool.lower() in SHELL_TOOLS and isinstance(cmd, str):
        return cmd
    if (
        isinstance(cmd, list)
        and all(isinstance(c, str) for c in cmd)
        and tool.lower() in SHELL_TOOLS
    ):
        return " ".join(cmd)
    return f"{tool}({compact_json(args if args is not None else {})})"


def content_text(content: Any) -> str:
    """Text of a message/tool-result content: a string, or a list of content blocks."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in as_list(content):
        if isinstance(block, str):
            parts.append(block)
            continue
        b = as_dict(block)
        kind = as_str(b.get("type"))
        if kind == "text" or "text" in b:
            parts.append(as_str(b.get("text")))
        elif kind == "image":
            parts.append("[image]")
        elif kind == "tool_result":
            parts.append(content_text(b.get("content")))
    return "\n".join(p for p in parts if p)


def parse_time(x: Any) -> float | None:
    """Seconds since epoch from an ISO 8601 string or a number (seconds or milliseconds)."""
    f = as_float(x)
    if f is not None:
        return f / 1000.0 if f > 1e11 else f
    s = as_str(x).strip()
    if not s:
        return None
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    try:
        return dt.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


def head_records(head: bytes, limit: int = 20) -> list[dict[str, Any]]:
    """JSON objects on the complete lines at the start of `head` (at most `limit`)."""
    text = head.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # the last line may be cut by the 64 KiB window
    out: list[dict[str, Any]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return out
        if not isinstance(obj, dict):
            return out
        out.append(obj)
        if len(out) >= limit:
            break
    return out


def file_stem(path: Path) -> str:
    """`run-1.jsonl.gz` -> `run-1`."""
    name = strip_gz(Path(path).name)
    for ext in (".jsonl", ".json", ".ndjson", ".traj", ".log"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


@contextmanager
def malformed(path: Path, what: str) -> Iterator[None]:
    """Turn a parser's stray KeyError/TypeError/ValueError/... into a TranscriptError.

    Args:
        path: the transcript being parsed (named in the error).
        what: what it should have been, e.g. "SWE-agent trajectory".

    Raises:
        TranscriptError: "malformed {what}: {the original error}" (TranscriptErrors pass through).
    """
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        raise TranscriptError(path, f"malformed {what}: {e!r}") from e
