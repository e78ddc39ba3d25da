"""Claude Code's hook answer out: the JSON the hook prints for a decision, and where the
restart packet of a stop goes (`<transcript>.failfast-restart.json`, beside the transcript).

The protocol is described in serving.hooks.claude_code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.types import Decision


def restart_path(transcript_path: str | Path) -> Path:
    """`<transcript>.failfast-restart.json` beside the transcript."""
    p = Path(transcript_path)
    return p.with_name(p.name + ".failfast-restart.json")


def answer(event: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The hook-protocol JSON for a decision (empty dict: say nothing, go on)."""
    name = str(event.get("hook_event_name") or "")
    score = (
        f", score {decision.score:.2f} >= {decision.threshold:.2f}"
        if decision.score is not None
        and decision.threshold is not None
        and decision.reason == "predicted_failure"
        else ""
    )
    if decision.stop:
        summary = decision.restart.summary if decision.restart else ""
        summary = summary.removeprefix(  # the headline already says it
            f"Stopped after {decision.step} steps ({decision.reason})."
        ).strip()
        head = f"failfast monitor: stop ({decision.reason}) after {decision.step} steps{score}."
        # Claude Code shows stopReason to the user; a systemMessage would show it a second time,
        # and the denied tool call's reason (read by the model) only needs the headline.
        out: dict[str, Any] = {"continue": False, "stopReason": f"{head} {summary}".strip()}
        if name == "PreToolUse":
            out["hookSpecificOutput"] = {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": head,
            }
        return out
    if decision.action == "warn":
        return {
            "systemMessage": f"failfast monitor: warning ({decision.reason}) after {decision.step} steps{score}."
        }
    return {}
