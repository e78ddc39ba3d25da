"""Text rendering of a run for the monitor model: the task header and one piece per step.

Layout (each piece is encoded separately by the featuriser, see monitor/featurise.py)::

    ### agent: {agent}                  <- header (agent line omitted when unknown)
    ### task:
    {task, cut to task_chars}

    ### step {k} [{role}] <{kind}> {tool}: {action}      <- one piece per step
    thought: {thought, cut}                               (only when thought_chars > 0)
    {observation head}[... N chars cut ...]{observation tail}
    [error exit=N]                                        (only for failed steps)

`[{role}]` appears only in multi-agent runs, `<{kind}>` only when the step is not a plain
action ("message", "format_error", "submit", ...), `{tool}:` only when the tool is known and
the action does not already start with it. A message step with no action shows its prose
(`thought`) in the action's place. A failed step ends with `[error exit=N]` when the
observation starts with mini-swe-agent's `<returncode>N</returncode>` (the tag itself is then
dropped from the observation), else with `[error]` when the step's is_error is set.
Every piece starts with a newline and ends with one, so pieces join into readable text.

With `pin_edit_chars` > 0 a re-rendered window (monitor/featurise.py) also shows the run's
latest edit when it is no longer among the recent steps kept, after the signals line::

    ### latest edit (step {k}) {tool}:
    {the edit's action text, newlines kept, cut to pin_edit_chars}

Text is cleaned before it is cut: ANSI escapes and control characters are removed, CR LF
becomes LF, runs of spaces/tabs become one space, three or more newlines become two, and lone
surrogates (invalid UTF-8) become "?". Actions and thoughts are folded onto one line.
All functions are pure and deterministic.
"""

from __future__ import annotations

import re

from monitor.types import Step

# CSI sequences (colours, cursor moves), OSC sequences (titles, links), and lone ESC pairs.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# C0/C1 control characters except \t and \n (\r is handled first).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_HSPACE = re.compile(r"[ \t\u00a0\u2000-\u200b\u3000]+")
# Spaces before a newline, tried only where a run of spaces starts (from every space of a long
# run not followed by a newline, ` +\n` would rescan the run: quadratic).
_TRAILING = re.compile(r"(?<! ) +\n")
_BLANKS = re.compile(r"\n{3,}")
_ANY_SPACE = re.compile(r"\s+")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")

# Raw text longer than this is trimmed (keeping both ends) before cleaning, so a 1 MB
# observation costs no more than a few KB of regex work. The "N chars cut" count then refers
# to raw characters for the trimmed middle plus cleaned characters for the rest.
_PRETRIM_FACTOR = 8


def clean(text: str, *, one_line: bool = False) -> str:
    """Remove ANSI escapes and control characters and normalise whitespace.

    Args:
        text: any string (arbitrary unicode, lone surrogates included).
        one_line: fold every whitespace run, newlines included, into one space.

    Returns:
        The cleaned text, stripped at both ends, always encodable as UTF-8.
    """
    if not text:
        return ""
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    text = _ANSI.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    if one_line:
        return _ANY_SPACE.sub(" ", text).strip()
    text = _HSPACE.sub(" ", text)
    text = _TRAILING.sub("\n", text)
    return _BLANKS.sub("\n\n", text).strip()


def cut_marker(n: int) -> str:
    """The marker that stands for `n` removed characters."""
    return f"[... {n} chars cut ...]"


def cut_head(text: str, limit: int) -> str:
    """Keep the first `limit` characters of `text`, then a cut marker when anything was cut."""
    if len(text) - limit <= len(cut_marker(len(text) - limit)):
        return text  # the marker would be longer than what it replaces
    return text[:limit] + cut_marker(len(text) - limit)


def cut_head_tail(text: str, head: int, tail: int) -> str:
    """Keep `head` characters from the start and `tail` from the end, a cut marker between."""
    if len(text) - head - tail <= len(cut_marker(len(text) - head - tail)):
        return text
    end = text[len(text) - tail :] if tail > 0 else ""
    return text[:head] + cut_marker(len(text) - head - tail) + end


def clean_head_tail(text: str, head: int, tail: int) -> str:
    """Clean then cut `text` to head + tail characters, cheaply even for megabyte inputs."""
    keep = _PRETRIM_FACTOR * (head + tail) + 64
    if len(text) <= 2 * keep:
        return cut_head_tail(clean(text), head, tail)
    # Clean only both ends of a huge text; count the dropped middle as cut too.
    first = clean(text[:keep])
    last = clean(text[-keep:]) if tail > 0 else ""
    dropped = len(text) - 2 * keep
    first_cut = max(len(first) - head, 0)
    last_cut = max(len(last) - tail, 0)
    end = last[len(last) - tail :] if tail > 0 else ""
    return first[:head] + cut_marker(dropped + first_cut + last_cut) + end


def clean_head(text: str, limit: int, *, one_line: bool = False) -> str:
    """Clean then cut `text` to its first `limit` characters, cheaply for huge inputs."""
    keep = _PRETRIM_FACTOR * limit + 64
    if len(text) <= keep:
        return cut_head(clean(text, one_line=one_line), limit)
    cleaned = clean(text[:keep], one_line=one_line)
    return cleaned[:limit] + cut_marker(len(text) - keep + max(len(cleaned) - limit, 0))


def exit_code(observation: str) -> int | None:
    """The exit code a mini-swe-agent style observation starts with (`<returncode>N</...>`)."""
    m = _RETURNCODE.search(observation, 0, 256)
    return int(m.group(1)) if m else None


def render_header(task: str, agent: str = "", *, task_chars: int = 1500) -> str:
    """Render the window header: agent line (when known) and the task cut to `task_chars`."""
    lines = []
    agent = clean(agent, one_line=True)
    if agent:
        lines.append(f"### agent: {agent}\n")
    lines.append(f"### task:\n{clean_head(task, task_chars)}\n")
    return "".join(lines)


def render_step(
    step: Step,
    k: int,
    *,
    action_chars: int = 400,
    obs_head_chars: int = 300,
    obs_tail_chars: int = 200,
    thought_chars: int = 0,
) -> str:
    """Render step number `k` (1-based) as one piece of text (see the module docstring)."""
    title = [f"### step {k}"]
    role = clean(step.role, one_line=True)
    if role:
        title.append(f"[{role}]")
    if step.kind and step.kind != "action":
        title.append(f"<{clean(step.kind, one_line=True)}>")
    tool = clean(step.tool, one_line=True)
    # A message step's prose is its action (readers put it in `thought`, action empty).
    prose = step.kind == "message" and not step.action
    action = clean_head(step.thought if prose else step.action, action_chars, one_line=True)
    if tool and not action.startswith(tool):  # "edit 1:1 ...", "search_class(...)": no repeat
        title.append(f"{tool}:")
    if action:
        title.append(action)
    parts = ["\n", " ".join(title), "\n"]
    if thought_chars > 0 and step.thought and not prose:
        thought = clean_head(step.thought, thought_chars, one_line=True)
        if thought:
            parts.append(f"thought: {thought}\n")
    code = exit_code(step.observation)
    observation = step.observation
    if code is not None:  # shown in the error marker instead
        observation = _RETURNCODE.sub("", observation, count=1)
    obs = clean_head_tail(observation, obs_head_chars, obs_tail_chars)
    if obs:
        parts.append(obs + "\n")
    if step.is_error or (code is not None and code != 0):
        parts.append("[error]\n" if code is None else f"[error exit={code}]\n")
    return "".join(parts)


def render_pinned_edit(step: Step, k: int, *, chars: int) -> str:
    """The pinned block of the run's latest edit, step `k` (see the module docstring)."""
    tool = clean(step.tool, one_line=True)
    title = f"### latest edit (step {k})" + (f" {tool}:" if tool else ":")
    return f"\n{title}\n{clean_head(step.action, chars)}\n"
