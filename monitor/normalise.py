"""Command normalisation, so that "identical call" means identical to a human reader.

Two shell commands count as the same call when they differ only in whitespace, quoting, or
flags that change how much a tool prints but not what it does (`-v`, `-q`, `--verbose`, ...).
Tool calls with structured arguments are keyed by their canonical arguments; for shell tools
only the command counts (Claude Code's `description` argument changes from call to call).

Speed matters (the monitor sees every step): normalisation is regex-based, not `shlex`, and
results are cached by the raw command text.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Output-only flags of test runners, grep, curl, pip, ...: they never change what is run.
HARMLESS_FLAGS = frozenset(
    {
        "-v",
        "-vv",
        "-vvv",
        "-q",
        "-qq",
        "-s",
        "--verbose",
        "--quiet",
        "--no-header",
        "--no-summary",
        "--color=yes",
        "--color=no",
        "--color=auto",
        "--no-color",
        "--disable-warnings",
    }
)
_HARMLESS_PREFIXES = ("--tb=", "--color=", "--capture=")

# Tools whose call is a shell command: their key is the normalised command.
SHELL_TOOLS = frozenset(
    {
        "",
        "bash",
        "execute_bash",
        "shell",
        "sh",
        "run",
        "cmd",
        "terminal",
        "run_command",
        "command_execution",
        "exec_command",
        "local_shell",
    }
)

# A shell word: runs of quoted or unquoted text with no unquoted whitespace; a stray quote
# (unbalanced) falls back to the rest of the non-space run.
_WORD = re.compile(r"""(?:'[^']*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)+|['"]\S*""")
_QUOTED = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)\"""")
_CACHE: dict[str, str] = {}
_CACHE_MAX = 50_000
# Commands longer than this are keyed on their collapsed text only (heredocs with whole files).
_LONG = 4000


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word:
        return word
    out = _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), word)
    # A word with inner whitespace is re-quoted one canonical way, so `'a b'` != `a b`.
    return f"'{' '.join(out.split())}'" if any(c.isspace() for c in out) else out


def normalise_command(command: str) -> str:
    """Normalise a shell command for identical-call counting.

    Collapses whitespace, removes quoting (`'a b'` and `"a b"` and `a\\ b` stay one word but
    lose their quotes; a word with inner whitespace gets canonical single quotes) and drops harmless output flags such as `-v`, `-q`, `--verbose`.

    Args:
        command: the raw command text.

    Returns:
        The canonical command, words joined by single spaces.
    """
    hit = _CACHE.get(command)
    if hit is not None:
        return hit
    if len(command) > _LONG:
        out = " ".join(command.split())
    else:
        words = [_unquote(w) for w in _WORD.findall(command)]
        out = " ".join(
            w for w in words if w not in HARMLESS_FLAGS and not w.startswith(_HARMLESS_PREFIXES)
        )
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[command] = out
    return out


def _canonical_args(args: dict[str, Any]) -> str:
    parts = []
    for key in sorted(args):
        value = args[key]
        if isinstance(value, str):
            text = " ".join(value.split())
        else:
            text = json.dumps(value, sort_keys=True, default=str)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def call_key(tool: str, action: str = "", args: Any = None) -> str:
    """The identity of a tool call, as used for repeat counting.

    Shell tools (and an empty tool name with a command) are keyed by the normalised command,
    taken from `args["command"]` / `args["cmd"]` when present, else from `action`. Other tools
    are keyed by their canonical arguments when they have any, else by `action`.

    Args:
        tool: tool name (case-insensitive).
        action: the action text (shell command or `tool(args)` string).
        args: parsed arguments (dict) or a raw command string.

    Returns:
        A string key; equal keys mean the same call.
    """
    name = tool.lower()
    if isinstance(args, str):
        action, args = args, None
    if name in SHELL_TOOLS:
        command = action
        if isinstance(args, dict):
            raw = args.get("command", args.get("cmd"))
            if isinstance(raw, list):
                raw = " ".join(str(x) for x in raw)
            if isinstance(raw, str):
                command = raw
        return "sh\x1f" + normalise_command(command)
    if isinstance(args, dict) and args:
        return f"{name}\x1f{_canonical_args(args)}"
    return f"{name}\x1f{normalise_command(action)}"


def short_call(key: str, limit: int = 120) -> str:
    """A call key as readable text (tool prefix dropped for shell), cut to `limit` characters."""
    tool, _, body = key.partition("\x1f")
    text = body if tool == "sh" else f"{tool} {body}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
