"""What a warm restart is told of the stopped run: a short account of what it tried, the line
of an error output that names the error (a Session keeps the latter per run,
monitor.monitored_run), and the stop each step after the stop is told again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from monitor.normalise import short_call
from monitor.types import Decision, Flag


def restart_summary(
    reason: str,
    values: Mapping[str, float],
    *,
    top_call: str,
    last_error: str,
    touched: Mapping[str, object],
) -> str:
    """A short account of what the run tried (steps, tool calls, edits, tests, the most repeated
    call, the last error, the files it touched), for the restart packet."""
    v = values
    parts = [f"Stopped after {int(v['steps'])} steps ({reason})."]
    parts.append(
        f"Tried {int(v['tool_calls'])} tool calls, {int(v['edits'])} edits, "
        f"{int(v['test_runs'])} test runs"
        + (f" (last {'failed' if v['last_test_failed'] else 'passed'})." if v["test_runs"] else ".")
    )
    if v["max_repeat"] > 1:
        parts.append(f"Most repeated call ({int(v['max_repeat'])}x): {short_call(top_call, 100)}")
    if last_error:
        parts.append(f"Last error: {last_error}")
    if touched:
        files = sorted(touched)
        parts.append("Files touched: " + ", ".join(files[:8]) + (" ..." if len(files) > 8 else ""))
    return " ".join(parts)


def after_stop(first: Decision, k: int, score: float | None, flags: list[Flag]) -> Decision:
    """A step after the stop `first`: still "stop" (same reason, threshold and restart packet: the
    run should have ended), but this step's number `k` and `score`, and `stopped_at_step` in the
    evidence, so a harness that goes on (a shadow run) sees the scores go on too."""
    ev = {**first.evidence, "stopped_at_step": first.step}
    return Decision("stop", first.reason, score, first.threshold, k, ev, flags, first.restart)


# An exception line ("ValueError: ...", pytest's "E   KeyError: 'x'", a bare "Error: ..." or
# git's "fatal: ..."), then a failed test id.
_EXCEPTION = re.compile(
    r"^(?:E\s+)?(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b"
    r"|^(?:error|fatal)\s*:",
    re.IGNORECASE,
)
_FAILED = re.compile(r"^(?:FAILED|ERROR)\b")
# A harness's wrapper around a command's output (mini-swe-agent's `<returncode>1</returncode>`,
# `<output>`, `</output>`): never the error itself.
_WRAPPER = re.compile(r"</?[a-z_]+>(?:[^<]*</[a-z_]+>)?")


def error_line(text: str, limit: int = 160) -> str:
    """The line of an error output that names the error: the last exception line, else the last
    FAILED/ERROR line (pytest), else the last non-empty line ("1 failed in 0.12s" says less).
    Output a harness wrapped in `<output>...</output>` is read inside the wrapper only (the
    text after it is the harness's instructions to the agent)."""
    start, end = text.rfind("<output>"), text.rfind("</output>")
    if 0 <= start < end:
        text = text[start + len("<output>") : end]
    lines = [ln.strip() for ln in text[-4000:].splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _WRAPPER.fullmatch(ln)]
    pick = next((ln for ln in reversed(lines) if _EXCEPTION.match(ln)), None)
    pick = pick or next((ln for ln in reversed(lines) if _FAILED.match(ln)), None)
    pick = pick or (lines[-1] if lines else "")
    pick = pick.removeprefix("E ").strip() if pick.startswith("E ") else pick
    return pick if len(pick) <= limit else pick[: limit - 1] + "…"
