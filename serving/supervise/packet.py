"""The restart packet (JSON, for programs) and the restart prompt (text, for the next attempt).

The prompt holds the task again, two lines on what the stopped attempt tried, and its diff
offered as optional: the restart is fresh (the transcript is never fed back), and a diff the
agent may ignore keeps the gain of a warm restart without forcing a failing approach on it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from monitor.types import Decision


def two_lines(attempt: int, decision: Decision) -> str:
    """What the stopped attempt did, in two lines (the monitor's summary, cut to fit)."""
    first = f"Attempt {attempt} was stopped by the failfast monitor after {decision.step} steps ({decision.reason})."
    summary = decision.restart.summary if decision.restart else ""
    rest = (
        summary.split(". ", 1)[1]
        if summary.startswith("Stopped after") and ". " in summary
        else summary
    )
    rest = " ".join(rest.split())
    if len(rest) > 300:
        rest = rest[:299] + "…"
    return first + "\n" + (rest or "No summary of its steps was available.")


def prompt(task: str, attempt: int, decision: Decision | None, diff: str) -> str:
    """The prompt of the next attempt (`{restart}` in the command's arguments)."""
    parts = [task.strip() or "(the task is the one given to the previous attempt)"]
    if decision is not None:
        parts.append("Note from the supervisor:\n" + two_lines(attempt, decision))
        if diff.strip():
            parts.append(
                "The stopped attempt left this diff; the repository has been reset. It is offered "
                "as optional: you may apply it if it helps (`git apply`), or ignore it.\n\n"
                "```diff\n" + diff.rstrip("\n") + "\n```"
            )
        else:
            parts.append("The stopped attempt changed no files; the repository is as it started.")
    return "\n\n".join(parts) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write beside `path` and rename into place (a kill mid-write leaves the old file whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_packet(
    path: Path, decision: Decision, *, attempt: int, task: str, diff: str, extra: dict[str, Any]
) -> None:
    """The restart packet: the stop decision, the task, the summary and the diff."""
    data = {
        "exit_status": "MonitorStopped",
        "attempt": attempt,
        "task": task,
        "reason": decision.reason,
        "step": decision.step,
        "score": decision.score,
        "threshold": decision.threshold,
        "summary": two_lines(attempt, decision),
        "diff": diff,
        "decision": decision.to_dict(),
        **extra,
    }
    from monitor.textio import json_safe

    write_atomic(path, json.dumps(json_safe(data), indent=1, default=str) + "\n")
