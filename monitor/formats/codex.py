"""Codex CLI `codex exec --json` event streams (JSONL).

Source of truth: openai/codex `codex-rs/exec/src/exec_events.rs` (ThreadEvent, tagged by `type`:
`thread.started{thread_id}`, `turn.started`, `turn.completed{usage{input_tokens,
cached_input_tokens, output_tokens}}`, `turn.failed{error{message}}`,
`item.started|item.updated|item.completed{item}`, `error{message}`; ThreadItem `{id, type, ...}`
with types `agent_message{text}`, `reasoning{text}`, `command_execution{command,
aggregated_output, exit_code, status}`, `file_change{changes[{path, kind}], status}`,
`mcp_tool_call{server, tool, arguments, result{content}, error{message}, status}`,
`web_search{query}`, `todo_list`, `plan`, `collab_tool_call`, `error{message}`).

Each item becomes one step in order of first appearance, with its latest state (a live stream may
end with an item still in progress). Reasoning text is the thought of the next action.
Usage is reported per turn, not per model call: a turn's tokens are split evenly over its steps
and marked estimated unless the turn has a single step. `input_tokens` already counts the cached
ones. The stream carries neither the prompt nor the model name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    action_text,
    as_dict,
    as_int,
    as_list,
    as_str,
    compact_json,
    content_text,
    file_stem,
    head_records,
)
from monitor.textio import load_jsonl
from monitor.types import Step, Totals, Trajectory

NAME = "codex"

_EVENTS = {
    "thread.started",
    "turn.started",
    "turn.completed",
    "turn.failed",
    "item.started",
    "item.updated",
    "item.completed",
    "item.plan.delta",
    "request_user_input",
    "error",
}
_HEAD_RE = re.compile(rb'"type"\s*:\s*"(thread\.started|turn\.started|item\.(started|completed))"')
_SKIP_ITEMS = {"todo_list", "plan"}


def sniff(path: Path, head: bytes) -> bool:
    """True when the lines are codex ThreadEvents (`thread.started`, `turn.*`, `item.*`)."""
    recs = head_records(head)
    if recs:
        kinds = [as_str(r.get("type")) for r in recs]
        return all(k in _EVENTS for k in kinds) and any(k != "error" for k in kinds)
    return head.lstrip()[:1] == b"{" and _HEAD_RE.search(head[:4096]) is not None


def _step(item: dict[str, Any], index: int, thought: str) -> Step | None:
    """One step from an item's latest state (None for items that are not steps); long: one
    branch per Codex item type, each small, in the order of the format's documentation."""
    kind = as_str(item.get("type"))
    status = as_str(item.get("status"))
    failed = status in ("failed", "declined")
    if kind == "command_execution":
        code = item.get("exit_code")
        bad_code = isinstance(code, int) and not isinstance(code, bool) and code != 0
        return Step(
            index=index,
            kind="action",
            thought=thought,
            tool="shell",
            action=as_str(item.get("command")),
            args={"command": item.get("command")},
            observation=as_str(item.get("aggregated_output")),
            is_error=bad_code or failed,
            raw=item,
        )
    if kind == "file_change":
        changes = [as_dict(c) for c in as_list(item.get("changes"))]
        desc = ", ".join(f"{as_str(c.get('kind'))} {as_str(c.get('path'))}" for c in changes)
        return Step(
            index=index,
            kind="action",
            thought=thought,
            tool="apply_patch",
            action=f"apply_patch({desc})",
            args={"changes": changes},
            observation=status,
            is_error=failed,
            raw=item,
        )
    if kind == "mcp_tool_call":
        tool = f"{as_str(item.get('server'))}.{as_str(item.get('tool'))}"
        err = as_str(as_dict(item.get("error")).get("message"))
        result = as_dict(item.get("result"))
        structured = result.get("structured_content")
        obs = (  # "" while the call runs (item.started: no result yet), so a watch holds it
            err
            or content_text(result.get("content"))
            or (compact_json(structured) if structured not in (None, "") else "")
        )
        args = item.get("arguments")
        return Step(
            index=index,
            kind="action",
            thought=thought,
            tool=tool,
            action=action_text(tool, args),
            args=args if isinstance(args, dict) else None,
            observation=obs,
            is_error=bool(err) or failed,
            raw=item,
        )
    if kind == "web_search":
        return Step(
            index=index,
            kind="action",
            thought=thought,
            tool="web_search",
            action=f"web_search({as_str(item.get('query'))})",
            raw=item,
        )
    if kind == "collab_tool_call":
        tool = f"collab.{as_str(item.get('tool'))}"
        return Step(
            index=index,
            kind="action",
            thought=thought,
            tool=tool,
            action=f"{tool}({as_str(item.get('prompt'))})",
            is_error=failed,
            raw=item,
        )
    if kind == "agent_message":
        text = as_str(item.get("text"))
        return Step(
            index=index,
            kind="message",
            thought="\n".join(t for t in (thought, text) if t),
            raw=item,
        )
    if kind == "error":
        return Step(
            index=index,
            kind="message",
            thought=thought,
            observation=as_str(item.get("message")),
            is_error=True,
            raw=item,
        )
    return None


def _spread(total: int, n: int) -> list[int]:
    """`total` split over `n` parts, the remainder on the last."""
    base = total // n
    return [base] * (n - 1) + [total - base * (n - 1)]


def read(path: Path) -> Trajectory:
    """Parse a `codex exec --json` stream into steps, with per-turn usage spread over them."""
    path = Path(path)
    events = [e for e in load_jsonl(path) if isinstance(e, dict)]
    if not any(as_str(e.get("type")) in _EVENTS for e in events):
        raise TranscriptError(path, "no codex exec events (thread.started, turn.*, item.*)")
    thread = ""
    order: list[str] = []  # item ids in order of first appearance
    latest: dict[str, dict[str, Any]] = {}
    turn_of: dict[str, int] = {}
    turn = 0
    usage: dict[int, tuple[int, int]] = {}
    exit_status = ""
    for e in events:
        kind = e.get("type")
        if kind == "thread.started":
            thread = thread or as_str(e.get("thread_id"))
        elif kind == "turn.started":
            turn += 1
            exit_status = "in_progress"
        elif kind == "turn.completed":
            u = as_dict(e.get("usage"))
            usage[turn] = (as_int(u.get("input_tokens")), as_int(u.get("output_tokens")))
            exit_status = "completed"
        elif kind == "turn.failed":
            msg = as_str(as_dict(e.get("error")).get("message"))
            exit_status = f"turn.failed: {msg}" if msg else "turn.failed"
        elif kind == "error":
            msg = as_str(e.get("message"))
            exit_status = f"error: {msg}" if msg else "error"
        elif kind in ("item.started", "item.updated", "item.completed"):
            item = as_dict(e.get("item"))
            item_id = as_str(item.get("id")) or f"#anon-{len(order)}"
            if item_id not in latest:
                order.append(item_id)
                turn_of[item_id] = turn
            latest[item_id] = item
    steps: list[Step] = []
    step_turn: list[int] = []
    thought: list[str] = []
    for item_id in order:
        item = latest[item_id]
        kind = as_str(item.get("type"))
        if kind == "reasoning":
            thought.append(as_str(item.get("text")))
            continue
        if kind in _SKIP_ITEMS:
            continue
        step = _step(item, len(steps), "\n".join(t for t in thought if t))
        if step is None:
            continue
        thought = []
        steps.append(step)
        step_turn.append(turn_of[item_id])
    for t, (tin, tout) in usage.items():
        idx = [i for i, st in enumerate(step_turn) if st == t]
        if not idx:
            continue
        for i, a, b in zip(idx, _spread(tin, len(idx)), _spread(tout, len(idx)), strict=True):
            steps[i].tokens_in, steps[i].tokens_out = a, b
            steps[i].tokens_estimated = len(idx) > 1
    return Trajectory(
        id=thread or file_stem(path),
        instance_id=file_stem(path),
        agent="codex",
        format=NAME,
        path=str(path),
        steps=steps,
        exit_status=exit_status,
        totals=Totals(
            tokens_in=sum(u[0] for u in usage.values()) if usage else None,
            tokens_out=sum(u[1] for u in usage.values()) if usage else None,
            api_calls=None,
        ),
    )
