"""Claude Code command hook: score the session transcript and stop the session on a stop.

Claude Code runs `failfast hook claude-code --bundle DIR` for the configured events with a JSON
event on stdin (`session_id`, `transcript_path` (the session's JSONL log), `hook_event_name`,
and for PreToolUse `tool_name` / `tool_input`). The hook answers on stdout, exit code 0:

- stop: `{"continue": false, "stopReason": ..., "systemMessage": ...}` (Claude stops), plus for
  PreToolUse `hookSpecificOutput{hookEventName, permissionDecision: "deny",
  permissionDecisionReason}` so the pending tool call does not run. The restart packet is written
  beside the transcript (`<transcript>.failfast-restart.json`).
- warn: `{"systemMessage": ...}` (shown to the user; the run goes on).
- continue, or any failure of the monitor itself: no output (never blocks the session).

settings.json:
    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
      "command": "failfast hook claude-code --bundle /path/to/bundle"}]}]}}
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from monitor.types import Decision
from serving.hooks.minisweagent import write_restart

log = logging.getLogger(__name__)

AGENT = "claude-code"


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
        reason = f"failfast monitor: stop ({decision.reason}) after {decision.step} steps{score}. {summary}".strip()
        out: dict[str, Any] = {"continue": False, "stopReason": reason, "systemMessage": reason}
        if name == "PreToolUse":
            out["hookSpecificOutput"] = {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        return out
    if decision.action == "warn":
        return {
            "systemMessage": f"failfast monitor: warning ({decision.reason}) after {decision.step} steps{score}."
        }
    return {}


def decide(event: dict[str, Any], scorer: Any) -> Decision:
    """Score the event's transcript and replay the policy; the first stop, else the last decision."""
    from serving.runs import score_transcript
    from serving.transcripts import read_transcript

    traj = read_transcript(event["transcript_path"], "claude-code")
    traj.agent = traj.agent or AGENT
    return score_transcript(scorer, traj).final


def run_hook(event: dict[str, Any], scorer: Any) -> dict[str, Any]:
    """Handle one hook event; never raises (a failing monitor must not block the session)."""
    try:
        if not event.get("transcript_path"):
            raise ValueError("hook event has no transcript_path")
        decision = decide(event, scorer)
    except Exception:
        log.exception("failfast hook: monitor_error, letting the session continue")
        return {}
    if decision.stop:
        try:
            write_restart(restart_path(event["transcript_path"]), decision, agent=AGENT, task="")
        except OSError:
            log.exception("failfast hook: could not write the restart packet")
    return answer(event, decision)


def read_event(text: str) -> dict[str, Any]:
    """Parse the hook event JSON from stdin (a ValueError names what is wrong)."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"hook event on stdin is not JSON: {e}") from e
    if not isinstance(event, dict):
        raise ValueError("hook event on stdin must be a JSON object")
    return event
