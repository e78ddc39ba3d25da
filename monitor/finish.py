"""The `finish` tool: how an agent ends a run, with a status the monitor can check.

A run that ends by calling `finish` says whether it completed the task, is blocked, or found it
impossible, with a summary and evidence (e.g. the test command and its passing output line).
`blocker` is required unless the status is completed. A model that answers in prose without
calling the tool gets NUDGE_TEXT back as the next user message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FINISH_STATUSES = ("completed", "blocked", "impossible")

FINISH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": (
            "End the run. Call this exactly once, when the task is done or cannot be done. "
            "Give the status, a short summary of what changed, and the evidence that supports it "
            "(for example the test command you ran and its result line)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "status": {
                    "type": "string",
                    "enum": list(FINISH_STATUSES),
                    "description": "completed: the task is solved; blocked: something outside "
                    "your control stops you; impossible: the task cannot be done as stated.",
                },
                "summary": {"type": "string", "description": "What you did, in a few sentences."},
                "evidence": {
                    "type": "string",
                    "description": "What shows the status is true: commands run and their output.",
                },
                "blocker": {
                    "type": "string",
                    "description": "Required unless status is completed: what stops you.",
                },
            },
            "required": ["status", "summary", "evidence"],
            "additionalProperties": False,
        },
    },
}

NUDGE_TEXT = (
    "You answered in prose without calling a tool. If the task is finished or cannot be finished, "
    "call the `finish` tool with status (completed, blocked or impossible), a summary, the "
    "evidence (commands you ran and their result), and a blocker unless the status is completed. "
    "Otherwise, continue with your next tool call."
)


@dataclass
class FinishCall:
    """A validated call of the finish tool."""

    status: str
    summary: str
    evidence: str
    blocker: str = ""


class FinishError(ValueError):
    """A finish call that does not match the schema; the message lists every problem."""


def validate_finish(args: Any) -> FinishCall:
    """Check the arguments of a finish call against FINISH_TOOL's schema and its rule.

    Args:
        args: the parsed arguments (a dict).

    Returns:
        The call as a FinishCall.

    Raises:
        FinishError: listing every problem (unknown status, missing or empty fields, extra
            fields, blocker missing for a status other than completed).
    """
    if not isinstance(args, dict):
        raise FinishError(f"finish arguments must be an object, got {type(args).__name__}")
    problems = []
    allowed = set(FINISH_TOOL["function"]["parameters"]["properties"])
    extra = sorted(set(args) - allowed)
    if extra:
        problems.append(f"unknown fields: {', '.join(extra)}")
    for name in ("status", "summary", "evidence", "blocker"):
        if name in args and not isinstance(args[name], str):
            problems.append(f"{name} must be a string")
    status = args.get("status")
    if status not in FINISH_STATUSES:
        problems.append(f"status must be one of {', '.join(FINISH_STATUSES)}, got {status!r}")
    for name in ("summary", "evidence"):
        if not str(args.get(name) or "").strip():
            problems.append(f"{name} is required and must not be empty")
    if (
        status in FINISH_STATUSES
        and status != "completed"
        and not str(args.get("blocker") or "").strip()
    ):
        problems.append(f"blocker is required when status is {status}")
    if problems:
        raise FinishError("invalid finish call: " + "; ".join(problems))
    return FinishCall(
        status=str(status),
        summary=args["summary"].strip(),
        evidence=args["evidence"].strip(),
        blocker=str(args.get("blocker") or "").strip(),
    )
