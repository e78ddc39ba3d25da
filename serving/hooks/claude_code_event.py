"""Claude Code's hook event in: the JSON object on stdin and the session transcript it names.

The event carries `session_id`, `transcript_path` (the session's JSONL log), `hook_event_name`,
and for PreToolUse `tool_name` / `tool_input`. `read_run` reads the transcript (a regular file of
at most `max_bytes` bytes and `max_steps` steps) as the Trajectory the hook scores
(serving.hooks.claude_code).
"""

from __future__ import annotations

import json
from typing import Any

from monitor.types import Trajectory
from serving.transcripts import MAX_STEPS, MAX_TRANSCRIPT_BYTES

AGENT = "claude-code"


def read_event(text: str) -> dict[str, Any]:
    """Parse the hook event JSON from stdin (a ValueError names what is wrong)."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"hook event on stdin is not JSON: {e}") from e
    if not isinstance(event, dict):
        raise ValueError("hook event on stdin must be a JSON object")
    return event


def read_run(
    event: dict[str, Any],
    *,
    max_bytes: int = MAX_TRANSCRIPT_BYTES,
    max_steps: int = MAX_STEPS,
    agent: str | None = None,
    source: str | None = None,
    instance_id: str | None = None,
) -> Trajectory:
    """The event's transcript (a regular file within the limits); TranscriptError otherwise.

    `agent` (default "claude-code") is the name the model reads in its header; `source` the
    threshold group of a source-keyed bundle (default: the transcript's folder name, which no
    bundle is calibrated for: pass the name given to `failfast calibrate --agent`);
    `instance_id` the task's id a bundle with known tasks looks up (default: the transcript's)."""
    from monitor.errors import TranscriptTooLarge
    from serving.transcripts import read_transcript

    traj = read_transcript(event["transcript_path"], "claude-code", max_bytes=max_bytes)
    if len(traj.steps) > max_steps:
        raise TranscriptTooLarge(
            traj.path, f"{len(traj.steps)} steps, over the limit of {max_steps} (--max-steps)"
        )
    traj.agent = agent or traj.agent or AGENT
    if source:
        traj.source = source
    if instance_id:
        traj.instance_id = instance_id
    return traj
