"""ATIF, the Agent Trajectory Interchange Format (v1.x), one JSON object per file.

Source of truth: Harbor RFC 0001 "Agent Trajectory Interchange Format (ATIF) Specification"
(laude-institute/harbor, docs/rfcs/0001-trajectory-format.md; v1.4 described, v1.5+ add optional
fields). Root: `schema_version` ("ATIF-v1.x"), `session_id`, `agent{name, version, model_name}`,
`steps[]`, `notes`, `final_metrics{total_prompt_tokens, total_completion_tokens,
total_cached_tokens, total_cost_usd, total_steps}`, `extra`. Step: `step_id`, `timestamp`,
`source` (system/user/agent), `model_name`, `message`, `reasoning_content`,
`tool_calls[]{tool_call_id, function_name, arguments}`, `observation{results[]{source_call_id,
content}}`, `metrics{prompt_tokens (incl. cached), completion_tokens, cached_tokens, cost_usd}`,
`extra`.

Each tool call of an agent step is one step (the step's metrics go on its first call); an agent
step with no tool call is a message. The spec has no error flag: a result is an error when it
carries `is_error: true` or a non-zero `exit_code` (directly or in its `extra`), as some writers
add. Context management is a compaction step: a step whose `extra` names a condensation
(`extra.event` / `action` / `type` / `kind` in condensation, compaction, compact_boundary), or an
OpenHands CondensationAction as Harbor converts it (message "Condenser is dropping the events").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    action_text,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    content_text,
    file_stem,
    parse_time,
)
from monitor.textio import load_json
from monitor.types import Step, Totals, Trajectory

NAME = "atif"

_VERSION_RE = re.compile(rb'"schema_version"\s*:\s*"ATIF-v1')
_COMPACTION = {"condensation", "compaction", "compact_boundary", "context_compaction", "compact"}


def sniff(path: Path, head: bytes) -> bool:
    """True for a JSON object whose `schema_version` is "ATIF-v1.x"."""
    return head.lstrip()[:1] == b"{" and _VERSION_RE.search(head) is not None


def _is_compaction(step: dict[str, Any]) -> bool:
    extra = as_dict(step.get("extra"))
    for key in ("event", "action", "type", "kind", "event_type"):
        if as_str(extra.get(key)).lower() in _COMPACTION:
            return True
    return as_str(step.get("message")).startswith("Condenser is dropping the events")


def _result_error(r: dict[str, Any]) -> bool:
    extra = as_dict(r.get("extra"))
    if r.get("is_error") is True or extra.get("is_error") is True:
        return True
    code = r.get("exit_code", extra.get("exit_code"))
    return isinstance(code, int) and not isinstance(code, bool) and code != 0


def _results(step: dict[str, Any]) -> list[dict[str, Any]]:
    return [as_dict(r) for r in as_list(as_dict(step.get("observation")).get("results"))]


def _agent_steps(raw: dict[str, Any], start: int) -> list[Step]:
    """Steps of one ATIF agent step: one per tool call, or one message."""
    ts = parse_time(raw.get("timestamp"))
    thought = "\n".join(
        t for t in (as_str(raw.get("reasoning_content")), as_str(raw.get("message"))) if t
    )
    results = _results(raw)
    by_call: dict[str, list[dict[str, Any]]] = {}
    unlinked: list[dict[str, Any]] = []
    for r in results:
        cid = as_str(r.get("source_call_id"))
        (by_call.setdefault(cid, []) if cid else unlinked).append(r)
    out: list[Step] = []
    for call in (as_dict(c) for c in as_list(raw.get("tool_calls"))):
        tool = as_str(call.get("function_name")) or "tool"
        args = call.get("arguments")
        mine = by_call.get(as_str(call.get("tool_call_id")), [])
        out.append(
            Step(
                index=start + len(out),
                kind="action",
                thought=thought if not out else "",
                tool=tool,
                action=action_text(tool, args),
                args=args if isinstance(args, dict) else None,
                observation="\n".join(content_text(r.get("content")) for r in mine),
                is_error=any(_result_error(r) for r in mine),
                timestamp=ts,
                raw=raw,
            )
        )
    if not out:
        out.append(Step(index=start, kind="message", thought=thought, timestamp=ts, raw=raw))
    if unlinked:  # results with no call id answer the step's last call
        last = out[-1]
        text = "\n".join(content_text(r.get("content")) for r in unlinked)
        last.observation = f"{last.observation}\n{text}" if last.observation else text
        last.is_error = last.is_error or any(_result_error(r) for r in unlinked)
    metrics = as_dict(raw.get("metrics"))
    if metrics:
        first = out[0]
        first.tokens_in = as_int(metrics.get("prompt_tokens"))
        first.tokens_out = as_int(metrics.get("completion_tokens"))
        first.cost_usd = as_float(metrics.get("cost_usd"))
    return out


def read(path: Path) -> Trajectory:
    """Parse an ATIF trajectory file (plain or gzip) into the agent's steps."""
    path = Path(path)
    doc = load_json(path)
    if not isinstance(doc, dict) or not as_str(doc.get("schema_version")).startswith("ATIF-"):
        raise TranscriptError(path, "not an ATIF trajectory (no schema_version 'ATIF-v1.x')")
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list):
        raise TranscriptError(path, "ATIF trajectory has no steps[] list")
    agent = as_dict(doc.get("agent"))
    steps: list[Step] = []
    task = ""
    has_metrics = False
    for raw in (as_dict(s) for s in raw_steps):
        source = raw.get("source")
        if _is_compaction(raw):
            summary = "\n".join(content_text(r.get("content")) for r in _results(raw))
            steps.append(
                Step(
                    index=len(steps),
                    kind="compaction",
                    action="condensation",
                    observation=summary or as_str(raw.get("message")),
                    args=as_dict(raw.get("extra")) or None,
                    timestamp=parse_time(raw.get("timestamp")),
                    raw=raw,
                )
            )
        elif source == "agent":
            has_metrics = has_metrics or bool(as_dict(raw.get("metrics")))
            steps.extend(_agent_steps(raw, len(steps)))
        elif source == "user" and not task:
            task = as_str(raw.get("message"))
    if has_metrics:
        for s in steps:
            s.tokens_estimated = False
    fm = as_dict(doc.get("final_metrics"))
    extra = as_dict(doc.get("extra"))
    session = as_str(doc.get("session_id"))
    instance = as_str(extra.get("instance_id")) or as_str(extra.get("task_id")) or file_stem(path)
    resolved = extra.get("resolved") if isinstance(extra.get("resolved"), bool) else None
    return Trajectory(
        id=session or file_stem(path),
        instance_id=instance,
        agent=as_str(agent.get("name")) or "atif",
        model=as_str(agent.get("model_name")),
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        resolved=resolved,
        exit_status=as_str(extra.get("exit_status")),
        totals=Totals(
            tokens_in=as_int(fm.get("total_prompt_tokens"))
            if "total_prompt_tokens" in fm
            else None,
            tokens_out=(
                as_int(fm.get("total_completion_tokens"))
                if "total_completion_tokens" in fm
                else None
            ),
            cost_usd=as_float(fm.get("total_cost_usd")),
            api_calls=None,
        ),
    )
