"""Claude Code command hook: score the session transcript and stop the session on a stop.

Claude Code runs `failfast hook claude-code --bundle DIR` (or `--url URL`) for the configured
events with a JSON event on stdin (`session_id`, `transcript_path` (the session's JSONL log), `hook_event_name`,
and for PreToolUse `tool_name` / `tool_input`). The hook answers on stdout, exit code 0:

- stop: `{"continue": false, "stopReason": ...}` (Claude stops and shows the reason once:
  the headline, then what the run tried and its last error), plus for PreToolUse
  `hookSpecificOutput{hookEventName, permissionDecision: "deny", permissionDecisionReason}` (the
  headline only) so the pending tool call does not run. The restart packet is written
  beside the transcript (`<transcript>.failfast-restart.json`).
- warn: `{"systemMessage": ...}` (shown to the user; the run goes on).
- continue, or any failure of the monitor itself: no output (never blocks the session).
  A bundle that cannot be loaded still leaves the model-free halts (stuck loops, and the
  budgets of its monitor.json when that can be read): a stop from them is answered as above.

`--agent` / `--source` name the agent the model reads and the threshold group (a source-keyed
bundle finds a Claude Code run only under the name it was calibrated with: `--source NAME`).

The transcript must be a regular file (a FIFO or /dev/zero is refused) of at most `--max-bytes`
bytes and `--max-steps` steps; past that the hook logs monitor_error and says nothing.

The event and its transcript are read in serving.hooks.claude_code_event, the answer is built in
serving.hooks.claude_code_answer and the `--url` call made in serving.service_http; their
names import from here too.

settings.json:
    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
      "command": "failfast hook claude-code --bundle /path/to/bundle"}]}]}}

Claude Code starts a new process per event, so with `--bundle` every event verifies the bundle
(sha256 of every file), starts an ONNX Runtime session and scores the whole transcript. With
`--url` the hook reads the transcript and sends its steps to a running `failfast serve`
(`POST /v1/score`, standard library only): one HTTP call, no model load. `--timeout` (default 5 s)
is an overall deadline for the whole call (connect, send, answer): a service that trickles its
answer byte by byte cannot hold the hook. Answers and restart packets are the same as with `--bundle` on the same bundle (non-finite
numbers are written as null in both). A service that is down, slow or answers badly gives no
output, exit 0 and a `monitor_error` log line on stderr. A service with API keys
(`serve --api-key-file`) gets `Authorization: Bearer $FAILFAST_API_KEY`; without the variable, or
with a key it does not know, it answers 401, which is such a `monitor_error` too.

    failfast serve --bundle /path/to/bundle --port 8000     # once, kept running
    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
      "command": "failfast hook claude-code --url http://127.0.0.1:8000 --timeout 5"}]}]}}

Per-event wall time of the CLI (median of 10 subprocess runs, PreToolUse on the 7-step
tests/fixtures/claude_code_constructed_loop.jsonl, 2-core CPU shared with a training job):
tiny test bundle (random Llama, hidden 16, 2 layers; 0.6 MB) 427 ms with --bundle, 338 ms with
--url; SmolLM2-135M bundle (4 layers, fp32, 329 MB) 1359 ms vs 397 ms. What remains with --url
is the interpreter and the `failfast` CLI's imports (`import training.cli`: 280-380 ms); the
service still rescores the whole transcript on each call.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from typing import Any

from monitor.errors import Cancelled, TranscriptError
from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from monitor.textio import json_safe
from monitor.types import Decision
from serving.hooks.claude_code_answer import answer, restart_path
from serving.hooks.claude_code_event import AGENT, read_event, read_run
from serving.hooks.minisweagent import write_restart
from serving.service_http import ServiceError, _post_within, decision_from_dict
from serving.transcripts import MAX_STEPS, MAX_TRANSCRIPT_BYTES

__all__ = [
    "AGENT",
    "ServiceError",
    "answer",
    "decide",
    "decide_remote",
    "decision_from_dict",
    "read_event",
    "read_run",
    "restart_path",
    "run_hook",
]

log = logging.getLogger(__name__)


def decide(
    event: dict[str, Any],
    scorer: Scorer | None,
    *,
    policy: PolicyConfig | None = None,
    max_bytes: int = MAX_TRANSCRIPT_BYTES,
    max_steps: int = MAX_STEPS,
    deadline: float | None = None,
    agent: str | None = None,
    source: str | None = None,
    instance_id: str | None = None,
) -> Decision:
    """Score the event's transcript and replay the policy; the first stop, else the last decision.

    `scorer` None: the model-free halts only, under `policy` (a PolicyConfig; None: defaults).
    `deadline`: a time.monotonic() past which scoring stops (monitor.errors.Cancelled).
    """
    from serving.runs import score_transcript

    traj = read_run(
        event,
        max_bytes=max_bytes,
        max_steps=max_steps,
        agent=agent,
        source=source,
        instance_id=instance_id,
    )
    cancelled = None if deadline is None else (lambda: time.monotonic() > deadline)
    return score_transcript(scorer, traj, policy=policy, cancelled=cancelled).final


def decide_remote(
    event: dict[str, Any],
    url: str,
    *,
    timeout: float = 5.0,
    max_bytes: int = MAX_TRANSCRIPT_BYTES,
    max_steps: int = MAX_STEPS,
    agent: str | None = None,
    source: str | None = None,
    instance_id: str | None = None,
) -> Decision:
    """Like `decide`, but a running `failfast serve` at `url` scores the steps (POST /v1/score).

    Raises:
        ServiceError: the service is down, has not answered in full within `timeout` seconds
            (one deadline for connect, send and the whole answer), answers with an error
            status, or its answer has no usable decision.
    """
    traj = read_run(
        event,
        max_bytes=max_bytes,
        max_steps=max_steps,
        agent=agent,
        source=source,
        instance_id=instance_id,
    )
    body = {
        "steps": [s.to_dict() for s in traj.steps],
        "task": traj.task,
        "agent": traj.agent or AGENT,
        "submission": traj.submission,
    }
    if traj.source:
        body["source"] = traj.source
    if instance_id:  # only when named: a transcript's own id (a session uuid) is no task id
        body["instance_id"] = instance_id
    endpoint = url.rstrip("/") + "/v1/score"
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    raw = _post_within(request, timeout)  # looked up here: tests replace claude_code._post_within
    try:
        return decision_from_dict(json.loads(raw)["decision"])
    except (ValueError, KeyError, TypeError) as e:
        raise ServiceError(f"{endpoint} gave no usable decision: {e!r}") from e


def run_hook(
    event: dict[str, Any],
    scorer: Scorer | None = None,
    *,
    url: str | None = None,
    timeout: float = 5.0,
    policy: PolicyConfig | None = None,
    max_bytes: int = MAX_TRANSCRIPT_BYTES,
    max_steps: int = MAX_STEPS,
    deadline: float | None = None,
    agent: str | None = None,
    source: str | None = None,
    instance_id: str | None = None,
) -> dict[str, Any]:
    """Handle one hook event; never raises (a failing monitor must not block the session).

    Args:
        event: the hook event from stdin.
        scorer: a loaded serving.Scorer (`--bundle`); unused when `url` is given; None without
            `url`: the model-free halts only, under `policy` (the bundle failed to load).
        url: base URL of a running `failfast serve` (`--url`): one HTTP call, no model load.
        timeout: overall deadline (seconds) of the call to the service.
        policy: the PolicyConfig for the model-free halts when `scorer` is None.
        max_bytes, max_steps: limits of the transcript (past them: monitor_error, no output).
        deadline: time.monotonic() by which a `scorer` must have decided (`--timeout` with
            `--bundle`); past it: monitor_error, no output.
        agent, source, instance_id: `--agent`, `--source`, `--instance-id` (see `read_run`).
    """
    limits: dict[str, Any] = {"max_bytes": max_bytes, "max_steps": max_steps}
    limits |= {"agent": agent, "source": source, "instance_id": instance_id}
    try:
        path = event.get("transcript_path")
        if not path:
            raise ValueError("hook event has no transcript_path")
        if not isinstance(path, str):
            raise ValueError(f"hook event's transcript_path is {type(path).__name__}, not a path")
        if url:
            decision = decide_remote(event, url, timeout=timeout, **limits)
        else:
            found = decide(event, scorer, policy=policy, deadline=deadline, **limits)
            decision = decision_from_dict(json_safe(found.to_dict()))
    except Cancelled:
        log.error(
            "failfast hook: monitor_error: no decision within the deadline (--timeout); "
            "letting the session continue"
        )
        return {}
    except (ServiceError, TranscriptError, ValueError) as e:
        log.error("failfast hook: monitor_error: %s; letting the session continue", e)
        return {}
    except Exception as e:
        log.exception("failfast hook: monitor_error: %r; letting the session continue", e)
        return {}
    if url and decision.reason == "monitor_error":
        log.error("failfast hook: monitor_error reported by %s; letting the session continue", url)
    if decision.stop:
        try:
            task = decision.restart.task if decision.restart else ""
            write_restart(
                restart_path(event["transcript_path"]), decision, agent=agent or AGENT, task=task
            )
        except OSError:
            log.exception("failfast hook: could not write the restart packet")
    return answer(event, decision)
