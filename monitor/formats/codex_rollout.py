"""Codex CLI session rollouts: the JSONL file Codex writes for every session, interactive or
`codex exec` (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl`).

Source of truth: openai/codex `codex-rs/protocol/src/protocol.rs` (RolloutLine, RolloutItem,
SessionMeta, TurnContextItem, CompactedItem, EventMsg, TokenUsageInfo) and `protocol/src/models.rs`
(ResponseItem); which events are kept: `core/src/rollout/policy.rs`. Each line is
`{"timestamp", "type", "payload"}` with `type` one of `session_meta` (`id`, `cwd`, `cli_version`,
`originator`), `turn_context` (`model`), `response_item` (what the model saw and wrote: `message`,
`reasoning`, `function_call{name, arguments, call_id}`, `function_call_output{call_id, output}`,
`custom_tool_call{name, input}` (apply_patch), `local_shell_call`, `web_search_call`, ...),
`event_msg` (`user_message`, `token_count{info{last_token_usage, total_token_usage}}`,
`task_complete`, `turn_aborted`, newer `exec_command_end` / `patch_apply_end` /
`mcp_tool_call_end`, ...) or `compacted`; newer Codex adds types this reader skips. The oldest
files (mid-2025) have no envelope: a bare session meta line, then bare response items and
`{"record_type": "state"}` lines; they are read too (no token counts in them).

Steps are built by monitor.formats.codex_rollout_steps. The task is the first `user_message`
(else the first user message that is not injected context: `<environment_context>`, AGENTS.md
instructions). The run id is the session id; a rollout in Codex's own `sessions/YYYY/MM/DD/`
folders has source "codex" (elsewhere its folder names the source). A live file may end in a call not answered yet (a
step with no observation, which a watch holds back) or in a cut line (dropped). Known limit: the
outputs of parallel calls are taken to be written in the order of the calls (as the model gets
them back); an output written before an earlier call's would let a watch score that earlier
call before its output.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import as_int, as_str, file_stem, head_records, malformed
from monitor.formats.codex_rollout_steps import CALLS, OUTPUTS, Steps, end_failed, time_of
from monitor.textio import load_jsonl
from monitor.types import Totals, Trajectory

NAME = "codex-rollout"

_LINES = {"session_meta", "response_item", "compacted", "turn_context", "event_msg"}
_ITEMS = {*CALLS, *OUTPUTS, "message", "reasoning", "web_search_call", "ghost_snapshot"}
_ENDS = {"exec_command_end", "patch_apply_end", "mcp_tool_call_end"}
_DAY = re.compile(r"^\d{4}/\d{2}/\d{2}$")


def _source(path: Path) -> str:
    """ "codex" for a rollout where Codex keeps it (`sessions/YYYY/MM/DD/`: a day's folder names
    no source), else "" (the folder holding it names the source, as for other readers)."""
    parts = Path(os.path.abspath(path)).parts
    return "codex" if len(parts) > 4 and _DAY.match("/".join(parts[-4:-1])) else ""


def sniff(path: Path, head: bytes) -> bool:
    """A rollout: `{"timestamp", "type": <a rollout line type>, "payload"}` lines, or (oldest
    files) a bare session meta line (`id`, `timestamp`, no `type`) before bare response items."""
    recs = head_records(head)
    if not recs:
        return False
    first = recs[0]
    if as_str(first.get("type")) in _LINES and isinstance(first.get("payload"), dict):
        return "timestamp" in first
    return (
        "type" not in first
        and "id" in first
        and "timestamp" in first
        and any(
            as_str(r.get("type")) in _ITEMS or r.get("record_type") == "state" for r in recs[1:]
        )
    )


def _lines(records: list[Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(type, payload, the line) for each line; the oldest files' bare lines put in the same
    shape (the first a session meta, the rest response items; `record_type` lines skipped)."""
    out = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            continue
        kind = as_str(rec.get("type"))
        if kind in _LINES and isinstance(rec.get("payload"), dict):
            out.append((kind, rec["payload"], rec))
        elif i == 0 and not kind and "id" in rec:
            out.append(("session_meta", rec, rec))
        elif kind in _ITEMS and "record_type" not in rec:
            out.append(("response_item", rec, rec))
    return out


def read(path: Path) -> Trajectory:
    """Parse a Codex session rollout into steps, with each model response's recorded usage."""
    path = Path(path)
    with malformed(path, "Codex session rollout"):
        lines = _lines(load_jsonl(path))
    if not any(kind in ("response_item", "event_msg") for kind, _, _ in lines):
        raise TranscriptError(path, "no Codex rollout lines (response_item, event_msg)")
    build = Steps()
    session, model, status, asked = "", "", "", ""
    for kind, payload, line in lines:
        when = time_of(line)
        if kind == "session_meta":
            session = session or as_str(payload.get("id"))
            model = model or as_str(payload.get("model"))
        elif kind == "turn_context":
            model = as_str(payload.get("model")) or model
        elif kind == "response_item":
            build.item(payload, when)
        elif kind == "compacted":
            build.compaction(as_str(payload.get("message")), when)
        else:
            event = as_str(payload.get("type"))
            if event == "user_message":
                asked = asked or as_str(payload.get("message"))
            elif event == "token_count" and isinstance(payload.get("info"), dict):
                build.usage(payload["info"])
            elif event in _ENDS and as_str(payload.get("call_id")) in build.by_call:
                build.by_call[as_str(payload.get("call_id"))].is_error |= end_failed(payload)
            elif event in ("task_started", "turn_started"):
                status = "in_progress"
            elif event in ("task_complete", "turn_complete"):
                status = "completed"
            elif event == "turn_aborted":
                status = f"turn_aborted: {as_str(payload.get('reason'))}".rstrip(": ")
            elif event == "error":
                status = f"error: {as_str(payload.get('message'))}".rstrip(": ")
    steps = build.estimate()
    total = build.totals  # the session's running total at its last token count
    return Trajectory(
        id=session or file_stem(path),
        instance_id=file_stem(path),
        agent="codex",
        source=_source(path),
        model=model,
        format=NAME,
        path=str(path),
        task=asked or build.task,
        steps=steps,
        exit_status=status,
        totals=Totals(
            tokens_in=as_int(total.get("input_tokens")) or None,
            tokens_out=as_int(total.get("output_tokens")) or None,
            api_calls=None,
        ),
    )
