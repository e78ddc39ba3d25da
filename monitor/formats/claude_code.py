"""Claude Code transcripts: `--output-format stream-json --verbose` and the session JSONL log.

Sources of truth: the Claude Code CLI reference (headless mode, `--output-format stream-json`),
the Agent SDK message types (SDKSystemMessage `init`, SDKAssistantMessage / SDKUserMessage with
`parent_tool_use_id`, SDKResultMessage with `total_cost_usd` and `usage`, SDKCompactBoundaryMessage
`{"type": "system", "subtype": "compact_boundary", "compact_metadata": {...}}`) and the hooks
reference (`transcript_path`: the session log `~/.claude/projects/<project>/<session>.jsonl`, one
record per line with `uuid`, `parentUuid`, `isSidechain`, `sessionId`, `message`, `timestamp`).

Both shapes carry Anthropic Messages API content blocks: assistant `text`, `thinking` and
`tool_use{id, name, input}`; user `tool_result{tool_use_id, content, is_error}`. One API response
may be split over several lines that share `message.id` (and repeat its `usage`): tokens are
counted once per `message.id`, on the first step that response produced.

Main turns only: records with a non-null `parent_tool_use_id` (stream-json) or `isSidechain: true`
(session log) are subagent traffic and are skipped; the `Task` call that started the subagent and
its final tool_result are main turns. Compact boundaries become steps of kind "compaction".
A live transcript may end in a cut line; what is complete is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    NO_OUTPUT,
    action_text,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    content_text,
    file_stem,
    head_records,
    parse_time,
)
from monitor.textio import load_jsonl
from monitor.types import Step, Totals, Trajectory

NAME = "claude-code"

_TYPES = {"system", "assistant", "user", "result", "summary", "stream_event"}
_HEAD_RE = re.compile(rb'"type"\s*:\s*"(assistant|user|system|result)"')


def sniff(path: Path, head: bytes) -> bool:
    """True for stream-json lines (`type` + `session_id`) or session-log lines (`sessionId`)."""
    recs = head_records(head)
    for r in recs:
        kind = as_str(r.get("type"))
        if kind not in _TYPES:
            continue
        if "session_id" in r or "sessionId" in r or "parent_tool_use_id" in r:
            return True
        if kind == "summary" and "leafUuid" in r:
            return True
    if recs:
        return False
    # A first line longer than the 64 KiB window: decide on its text.
    return (
        head.lstrip()[:1] == b"{"
        and _HEAD_RE.search(head) is not None
        and (b'"session_id"' in head or b'"sessionId"' in head)
        and b'"message"' in head
    )


def _usage_tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens incl. cache reads and writes, completion tokens) of an Anthropic usage."""
    tin = (
        as_int(usage.get("input_tokens"))
        + as_int(usage.get("cache_creation_input_tokens"))
        + as_int(usage.get("cache_read_input_tokens"))
    )
    return tin, as_int(usage.get("output_tokens"))


class _Builder:
    """Accumulates main-agent steps from records in file order."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.by_call: dict[str, Step] = {}
        self.pending: list[str] = []  # text/thinking not yet attached to a step
        self.pending_msg: str | None = None
        self.pending_ts: float | None = None
        self.msg_usage: dict[str, tuple[int, int]] = {}
        self.msg_first_step: dict[str, int] = {}
        self.anon = 0

    def _new_step(self, msg_id: str, **kw: Any) -> Step:
        step = Step(index=len(self.steps), tokens_estimated=True, **kw)
        self.steps.append(step)
        self.msg_first_step.setdefault(msg_id, step.index)
        return step

    def flush(self) -> None:
        """Turn leftover prose of the last response into a message step."""
        text = "\n".join(t for t in self.pending if t)
        if self.pending_msg is not None and text:
            self._new_step(
                self.pending_msg, kind="message", thought=text, timestamp=self.pending_ts
            )
        self.pending = []
        self.pending_msg = None

    def assistant(self, rec: dict[str, Any]) -> None:
        msg = as_dict(rec.get("message"))
        msg_id = as_str(msg.get("id"))
        if not msg_id:
            self.anon += 1
            msg_id = f"#anon-{self.anon}"
        if self.pending_msg is not None and self.pending_msg != msg_id:
            self.flush()
        self.pending_msg = msg_id
        ts = parse_time(rec.get("timestamp"))
        self.pending_ts = ts
        usage = as_dict(msg.get("usage"))
        if usage:
            tin, tout = _usage_tokens(usage)
            old_in, old_out = self.msg_usage.get(msg_id, (0, 0))
            # Split lines repeat the usage; a streamed line may carry a partial output count.
            self.msg_usage[msg_id] = (max(old_in, tin), max(old_out, tout))
        content = msg.get("content")
        if isinstance(content, str):
            self.pending.append(content)
            return
        for block in as_list(content):
            b = as_dict(block)
            kind = b.get("type")
            if kind == "text":
                self.pending.append(as_str(b.get("text")))
            elif kind == "thinking":
                self.pending.append(as_str(b.get("thinking")))
            elif kind in ("tool_use", "server_tool_use"):
                tool = as_str(b.get("name")) or "tool"
                args = b.get("input")
                step = self._new_step(
                    msg_id,
                    kind="action",
                    thought="\n".join(t for t in self.pending if t),
                    tool=tool,
                    action=action_text(tool, args),
                    args=args if isinstance(args, dict) else None,
                    timestamp=ts,
                    raw=b,
                )
                self.pending = []
                call_id = as_str(b.get("id"))
                if call_id:
                    self.by_call[call_id] = step

    def user(self, rec: dict[str, Any]) -> str:
        """Attach tool results; return the user's prose (the task, when it is the first)."""
        msg = as_dict(rec.get("message"))
        content = msg.get("content")
        if isinstance(content, str):
            return content
        prose: list[str] = []
        for block in as_list(content):
            b = as_dict(block)
            if b.get("type") != "tool_result":
                if b.get("type") == "text":
                    prose.append(as_str(b.get("text")))
                continue
            self.flush()
            step = self.by_call.get(as_str(b.get("tool_use_id")))
            if step is None:
                continue
            # Claude Code answers a command that printed nothing with content "" (seen in real
            # session logs and streams)
            step.observation = content_text(b.get("content")) or NO_OUTPUT
            step.is_error = b.get("is_error") is True
        return "\n".join(prose)

    def compaction(self, rec: dict[str, Any]) -> None:
        self.flush()
        meta = as_dict(rec.get("compact_metadata")) or as_dict(rec.get("compactMetadata"))
        trigger = as_str(meta.get("trigger"))
        self._new_step(
            f"#compact-{len(self.steps)}",
            kind="compaction",
            action=f"compact({trigger})" if trigger else "compact",
            args=meta or None,
            observation=as_str(rec.get("content")),
            timestamp=parse_time(rec.get("timestamp")),
            raw=rec,
        )

    def finish(self) -> list[Step]:
        self.flush()
        for msg_id, idx in self.msg_first_step.items():
            if msg_id in self.msg_usage:
                tin, tout = self.msg_usage[msg_id]
                step = self.steps[idx]
                step.tokens_in, step.tokens_out = tin, tout
        # With usage in the transcript, every step's tokens are actual (a later tool call of
        # one response, or a compaction, made no model call of its own: 0).
        if self.msg_usage:
            for s in self.steps:
                s.tokens_estimated = False
        return self.steps


def _is_subagent(rec: dict[str, Any]) -> bool:
    return rec.get("parent_tool_use_id") is not None or rec.get("isSidechain") is True


def read(path: Path) -> Trajectory:
    """Parse a Claude Code stream-json transcript or session log into the main agent's steps."""
    path = Path(path)
    records = [r for r in load_jsonl(path) if isinstance(r, dict)]
    if not any(as_str(r.get("type")) in _TYPES for r in records):
        raise TranscriptError(path, "no Claude Code records (type system/assistant/user/result)")
    b = _Builder()
    task = ""
    session = ""
    model = ""
    result: dict[str, Any] = {}
    for rec in records:
        kind = rec.get("type")
        session = session or as_str(rec.get("session_id")) or as_str(rec.get("sessionId"))
        if kind == "system":
            sub = rec.get("subtype")
            if sub == "init":
                model = model or as_str(rec.get("model"))
            elif sub == "compact_boundary":
                b.compaction(rec)
            continue
        if kind == "result":
            result = rec
            continue
        if kind not in ("assistant", "user") or _is_subagent(rec):
            continue
        if kind == "assistant":
            model = model or as_str(as_dict(rec.get("message")).get("model"))
            b.assistant(rec)
        elif rec.get("isMeta") is not True and rec.get("isCompactSummary") is not True:
            prose = b.user(rec)
            if not task and prose.strip():
                task = prose
    steps = b.finish()
    usage = as_dict(result.get("usage"))
    tin, tout = _usage_tokens(usage)
    ms = as_float(result.get("duration_ms"))
    totals = Totals(
        tokens_in=tin if usage else None,
        tokens_out=tout if usage else None,
        cost_usd=as_float(result.get("total_cost_usd")),
        api_calls=as_int(result.get("num_turns")) if "num_turns" in result else None,
        wall_seconds=None if ms is None else ms / 1000.0,
    )
    stem = file_stem(path)
    return Trajectory(
        id=session or stem,
        instance_id=stem,
        agent="claude-code",
        model=model,
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        exit_status=as_str(result.get("subtype")),
        totals=totals,
    )
