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
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from monitor.errors import Cancelled, TranscriptError
from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from monitor.textio import json_safe
from monitor.types import Decision, Flag, RestartPacket, Trajectory
from serving.hooks.minisweagent import write_restart
from serving.keys import client_headers
from serving.transcripts import MAX_STEPS, MAX_TRANSCRIPT_BYTES

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


class ServiceError(RuntimeError):
    """The scoring service could not be reached or gave an unusable answer."""


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
    raw = _post_within(request, timeout)
    try:
        return decision_from_dict(json.loads(raw)["decision"])
    except (ValueError, KeyError, TypeError) as e:
        raise ServiceError(f"{endpoint} gave no usable decision: {e!r}") from e


def _post_within(request: urllib.request.Request, timeout: float) -> bytes:
    """The answer's body, or ServiceError; the whole exchange must end within `timeout` seconds.

    The request carries `Authorization: Bearer $FAILFAST_API_KEY` when the variable is set (a
    service with `--api-key-file`); a 401 or 403 is a ServiceError like any other.

    urllib's timeout bounds each socket operation, so a service that sends a byte every few
    seconds would hold the hook forever; the call runs in a daemon thread and is abandoned at
    the deadline (the process exits right after the hook answers).
    """
    endpoint = request.full_url
    for name, value in client_headers().items():  # FAILFAST_API_KEY, on every call made here
        if not request.has_header(name):
            request.add_header(name, value)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            # No proxy from the environment: the transcript goes to the monitor service named by
            # --url and nowhere else (an http_proxy would otherwise receive loopback requests too).
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=timeout) as response:
                box["raw"] = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            hint = (
                " (set FAILFAST_API_KEY to a key of the service with the score scope)"
                if e.code in (401, 403)
                else ""
            )
            box["error"] = ServiceError(f"{endpoint} answered HTTP {e.code}: {detail}{hint}")
        except (urllib.error.URLError, OSError) as e:  # refused, DNS, timeout
            box["error"] = ServiceError(f"{endpoint} unreachable: {getattr(e, 'reason', e)}")
        except Exception as e:  # noqa: BLE001 - reported to the caller like any other failure
            box["error"] = ServiceError(f"{endpoint}: {e!r}")

    worker = threading.Thread(target=call, name="failfast-hook-post", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ServiceError(f"{endpoint} timed out: no full answer within {timeout:g} s (--timeout)")
    if "error" in box:
        raise box["error"]
    return box["raw"]


def decision_from_dict(d: dict[str, Any]) -> Decision:
    """A Decision from its `to_dict()` JSON (as /v1/score returns it); ValueError when malformed."""
    if not isinstance(d, dict) or d.get("action") not in ("continue", "warn", "stop"):
        raise ValueError(f"not a decision: {str(d)[:200]}")
    restart = d.get("restart")
    return Decision(
        action=d["action"],
        reason=str(d.get("reason", "ok")),
        score=None if d.get("score") is None else float(d["score"]),
        threshold=None if d.get("threshold") is None else float(d["threshold"]),
        step=int(d.get("step", 0)),
        evidence=dict(d.get("evidence") or {}),
        flags=[Flag(**f) for f in d.get("flags") or []],
        restart=RestartPacket(**restart) if restart else None,
    )


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


def read_event(text: str) -> dict[str, Any]:
    """Parse the hook event JSON from stdin (a ValueError names what is wrong)."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"hook event on stdin is not JSON: {e}") from e
    if not isinstance(event, dict):
        raise ValueError("hook event on stdin must be a JSON object")
    return event
