"""Gemini CLI headless output: `gemini -p ... --output-format stream-json` (JSONL on stdout).

Source of truth: google-gemini/gemini-cli `packages/core/src/output/types.ts` and
`output/stream-json-formatter.ts`, emitted by `packages/cli/src/nonInteractiveCli.ts`: events
`init{session_id, model}`, `message{role: user | assistant, content, delta}` (the assistant's
text in chunks), `tool_use{tool_name, tool_id, parameters}`, `tool_result{tool_id, status:
success | error, output, error{type, message}}`, `error{severity, message}` and
`result{status, error, stats{input_tokens, output_tokens, total_tokens, tool_calls, models}}`.

What a harness captures when it runs Gemini CLI headless, at a path it chooses (what `failfast
supervise --transcript` needs). It carries less than the session file Gemini CLI records
(monitor.formats.gemini_cli, which a harness can read instead): a tool result is the text shown
to the user, not always what the model got (often absent: the step's observation is then its
status), a shell command's exit code is not in it, and usage comes only at the end, for the
whole run (helper models included), so each step's tokens are estimated from characters and
scaled to those totals once the `result` is written.

Steps: each `tool_use` with its `tool_result` (by `tool_id`); the assistant's text before a call
is that call's thought, text with no call after it a prose step. The task is the first user
message; the model the one with the most tokens in `result.stats.models`, else `init.model`
(which may be an alias, `auto-gemini-3`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    NO_OUTPUT,
    action_text,
    as_dict,
    as_int,
    as_str,
    file_stem,
    head_records,
    malformed,
    parse_time,
)
from monitor.ledger import StepLedger
from monitor.textio import load_jsonl
from monitor.types import Step, Totals, Trajectory

NAME = "gemini-stream"

_EVENTS = {"init", "message", "tool_use", "tool_result", "error", "result"}


def sniff(path: Path, head: bytes) -> bool:
    """The stream starts with Gemini's `init` event: a top-level `type: "init"` with a
    `session_id` (Claude Code's is `type: "system", subtype: "init"`)."""
    recs = head_records(head, limit=1)
    return bool(recs) and recs[0].get("type") == "init" and "session_id" in recs[0]


def _model(init_model: str, stats: dict[str, Any]) -> str:
    models = as_dict(stats.get("models"))
    if not models:
        return init_model
    return max(models, key=lambda m: as_int(as_dict(models[m]).get("total_tokens")))


def read(path: Path) -> Trajectory:
    """Parse a Gemini CLI stream-json capture into steps."""
    path = Path(path)
    with malformed(path, "Gemini CLI stream-json"):
        events = [e for e in load_jsonl(path) if isinstance(e, dict)]
    if not any(as_str(e.get("type")) in _EVENTS - {"init"} for e in events):
        raise TranscriptError(path, "no Gemini CLI stream events (message, tool_use, result)")
    ledger = StepLedger()
    by_id: dict[str, Step] = {}
    text: list[str] = []  # the assistant's text since the last call
    session, model, task, status = "", "", "", ""
    stats: dict[str, Any] = {}
    for e in events:
        kind, when = as_str(e.get("type")), parse_time(e.get("timestamp"))
        if kind == "init":
            session, model = session or as_str(e.get("session_id")), as_str(e.get("model"))
        elif kind == "message" and e.get("role") == "user":
            task = task or as_str(e.get("content"))
            ledger.seen += len(as_str(e.get("content")))
        elif kind == "message":
            text.append(as_str(e.get("content")))
        elif kind == "tool_use":
            name, args = as_str(e.get("tool_name")), as_dict(e.get("parameters"))
            step = Step(index=0, tool=name, action=action_text(name, args), args=args or None)
            step.thought, step.timestamp, step.raw = "".join(text).strip(), when, e
            text = []
            ledger.append(step, len(step.thought) + len(step.action))
            by_id[as_str(e.get("tool_id"))] = step
        elif kind == "tool_result":
            asked = by_id.get(as_str(e.get("tool_id")))
            error = as_str(as_dict(e.get("error")).get("message"))
            answer = as_str(e.get("output")) or error or as_str(e.get("status")) or NO_OUTPUT
            ledger.seen += len(answer)
            if asked is not None:
                asked.observation = answer
                asked.is_error = e.get("status") == "error" or bool(error)
        elif kind == "result":
            status, stats = as_str(e.get("status")), as_dict(e.get("stats"))
        elif kind == "error" and e.get("severity") == "error":
            status = f"error: {as_str(e.get('message'))}"
    reply = "".join(text).strip()
    if reply:  # the last reply: prose with no call after it
        ledger.append(Step(index=0, kind="message", thought=reply), len(reply))
    tin, tout = as_int(stats.get("input_tokens")), as_int(stats.get("output_tokens"))
    steps = ledger.estimate(total_in=tin or None, total_out=tout or None)
    return Trajectory(
        id=session or file_stem(path),
        instance_id=file_stem(path),
        agent="gemini-cli",
        model=_model(model, stats),
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        exit_status=status,
        totals=Totals(tokens_in=tin or None, tokens_out=tout or None),
    )
