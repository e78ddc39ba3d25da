"""OpenHands evaluation output (`output.jsonl`): one EvalOutput per line.

Sources of truth: OpenHands `evaluation/utils/shared.py` (EvalOutput: `instance_id`,
`test_result` (`git_patch` for SWE-bench; `report.resolved` once evaluated), `instruction`,
`metadata` (EvalMetadata: `agent_class`, `llm_config.model`, `max_iterations`, ...), `history`,
`metrics`, `error`, `instance`) and `openhands/events/serialization/event.py` (event_to_dict:
`id`, `timestamp`, `source`, `message`, `cause`, then either `action` + `args` or `observation` +
`content` + `extras` (+ `success`), plus `tool_call_metadata{function_name, tool_call_id}` and
`llm_metrics`, the LLM's *accumulated* Metrics at that event: `accumulated_cost`,
`accumulated_token_usage{prompt_tokens, completion_tokens}`, `costs[]`, `token_usages[]`).

Steps: agent actions `run`, `run_ipython`, `read`, `edit`, `write`, `browse*`, MCP calls
(action), `message`/`think` (message), `finish` (submit), `condensation` (compaction). An
observation is attached to the action named by its `cause` (or the latest step); it is an error
when it is an `error` observation, a command with a non-zero exit code, or starts with "ERROR".
Per-step tokens and cost are the differences of the accumulated metrics between actions.
The old history format (a list of `[action, observation]` pairs) is read too.

A file may hold many runs: `read_all` yields each; `read` accepts a file with one run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
    head_records,
    parse_time,
)
from monitor.textio import load_jsonl
from monitor.types import Step, Totals, Trajectory

NAME = "openhands"

_TOOL_OF_ACTION = {
    "run": "execute_bash",
    "run_ipython": "execute_ipython_cell",
    "read": "str_replace_editor",
    "edit": "str_replace_editor",
    "write": "str_replace_editor",
    "browse": "browser",
    "browse_interactive": "browser",
    "call_tool_mcp": "mcp",
}
_PROSE_ACTIONS = {"message", "think"}
_SKIP_ACTIONS = {
    "system",
    "recall",
    "change_agent_state",
    "null",
    "pause",
    "resume",
    "stop",
    "condensation_request",
}
# Bookkeeping args that say nothing about what the action does.
_NOISE_ARGS = {
    "thought",
    "impl_source",
    "security_risk",
    "confirmation_state",
    "blocking",
    "hidden",
    "is_input",
    "is_confirmed",
    "include_extra",
    "kernel_init_code",
    "translated_ipython_code",
    "image_urls",
    "wait_for_response",
}
_HEAD_RE = re.compile(rb'^\s*\{\s*"instance_id"\s*:')


def sniff(path: Path, head: bytes) -> bool:
    """True when the first line is an EvalOutput (`instance_id` + `test_result` / `history`)."""
    recs = head_records(head, limit=1)
    if recs:
        r = recs[0]
        return "instance_id" in r and ("history" in r or "test_result" in r)
    # One EvalOutput line is often longer than the 64 KiB window.
    return _HEAD_RE.match(head) is not None and b'"test_result"' in head


def _events(history: Any) -> list[dict[str, Any]]:
    """Flatten the history: a list of events, or (old format) of [action, observation] pairs."""
    out: list[dict[str, Any]] = []
    for item in as_list(history):
        if isinstance(item, dict):
            out.append(item)
        elif isinstance(item, list):
            out.extend(e for e in item if isinstance(e, dict))
    return out


def _is_error(obs: dict[str, Any], content: str) -> bool:
    kind = obs.get("observation")
    if kind == "error":
        return True
    extras = as_dict(obs.get("extras"))
    code = as_dict(extras.get("metadata")).get("exit_code", extras.get("exit_code"))
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return True
    if obs.get("success") is False:
        return True
    return kind in ("read", "edit", "write") and content.lstrip().startswith("ERROR")


class _Metrics:
    """Turns accumulated llm_metrics into per-action deltas."""

    def __init__(self) -> None:
        self.prompt = 0
        self.completion = 0
        self.cost = 0.0
        self.seen = False

    def delta(self, m: Any) -> tuple[int, int, float | None] | None:
        m = as_dict(m)
        acc = as_dict(m.get("accumulated_token_usage"))
        if not acc and not as_list(m.get("token_usages")):
            return None
        if acc:
            p, c = as_int(acc.get("prompt_tokens")), as_int(acc.get("completion_tokens"))
        else:  # no accumulated usage: sum the per-call list
            calls = [as_dict(u) for u in as_list(m.get("token_usages"))]
            p = sum(as_int(u.get("prompt_tokens")) for u in calls)
            c = sum(as_int(u.get("completion_tokens")) for u in calls)
        cost = as_float(m.get("accumulated_cost"))
        cost_delta = None if cost is None else round(max(cost - self.cost, 0.0), 10)
        out = (max(p - self.prompt, 0), max(c - self.completion, 0), cost_delta)
        self.prompt, self.completion = max(p, self.prompt), max(c, self.completion)
        self.cost = max(cost or 0.0, self.cost)
        self.seen = True
        return out


def _step_for_action(ev: dict[str, Any], index: int) -> Step | None:
    kind = as_str(ev.get("action"))
    if not kind or kind in _SKIP_ACTIONS:
        return None
    args = as_dict(ev.get("args"))
    thought = as_str(args.get("thought"))
    ts = parse_time(ev.get("timestamp"))
    if kind == "condensation":
        return Step(
            index=index,
            kind="compaction",
            action="condensation",
            args=args or None,
            observation=as_str(args.get("summary")),
            timestamp=ts,
            raw=ev,
        )
    if kind in _PROSE_ACTIONS:
        text = as_str(args.get("content")) or thought or as_str(ev.get("message"))
        return Step(
            index=index,
            kind="message",
            thought=text,
            tool=kind if kind == "think" else "",
            timestamp=ts,
            raw=ev,
        )
    if kind == "finish":
        final = as_str(args.get("final_thought")) or thought
        return Step(
            index=index,
            kind="submit",
            thought=final,
            tool="finish",
            action="finish",
            timestamp=ts,
            raw=ev,
        )
    meta = as_dict(ev.get("tool_call_metadata"))
    tool = as_str(meta.get("function_name")) or _TOOL_OF_ACTION.get(kind, kind)
    if kind == "run_ipython":
        action = as_str(args.get("code"))
    elif kind == "run":
        action = as_str(args.get("command"))
    else:
        clean = {k: v for k, v in args.items() if k not in _NOISE_ARGS and v not in (None, "")}
        action = action_text(tool, clean)
    return Step(
        index=index,
        kind="action",
        thought=thought,
        tool=tool,
        action=action,
        args=args or None,
        timestamp=ts,
        raw=ev,
    )


def _trajectory(path: Path, rec: dict[str, Any]) -> Trajectory:
    instance_id = rec.get("instance_id")
    if not isinstance(instance_id, (str, int)) or isinstance(instance_id, bool):
        raise TranscriptError(path, "EvalOutput line has no instance_id")
    instance_id = str(instance_id)
    steps: list[Step] = []
    by_event: dict[int, Step] = {}
    metrics = _Metrics()
    task = as_str(rec.get("instruction"))
    exit_status = ""
    for ev in _events(rec.get("history")):
        if "action" in ev:
            if ev.get("source") != "agent":
                if not task and ev.get("action") == "message" and ev.get("source") == "user":
                    task = as_str(as_dict(ev.get("args")).get("content"))
                continue
            step = _step_for_action(ev, len(steps))
            if step is None:
                continue
            d = metrics.delta(ev.get("llm_metrics"))
            if d is not None:
                step.tokens_in, step.tokens_out, step.cost_usd = d
            steps.append(step)
            ev_id = ev.get("id")
            if isinstance(ev_id, int) and not isinstance(ev_id, bool):
                by_event[ev_id] = step
        elif "observation" in ev:
            kind = ev.get("observation")
            if kind == "agent_state_changed":
                exit_status = as_str(as_dict(ev.get("extras")).get("agent_state")) or exit_status
                continue
            if kind in ("recall", "null", "agent_condensation"):
                continue
            cause = ev.get("cause")
            target = by_event.get(cause) if isinstance(cause, int) else None
            if target is None:
                if kind != "error" or not steps:
                    continue
                target = steps[-1]  # an error with no cause answers the latest action
            content = as_str(ev.get("content"))
            target.observation = (
                f"{target.observation}\n{content}" if target.observation else content
            )
            target.is_error = target.is_error or _is_error(ev, content)
    if metrics.seen:
        for s in steps:
            s.tokens_estimated = False
    test_result = as_dict(rec.get("test_result"))
    report = as_dict(test_result.get("report"))
    resolved = report.get("resolved") if isinstance(report.get("resolved"), bool) else None
    metadata = as_dict(rec.get("metadata"))
    run_metrics = as_dict(rec.get("metrics"))
    acc = as_dict(run_metrics.get("accumulated_token_usage"))
    if not task:
        task = as_str(as_dict(rec.get("instance")).get("problem_statement"))
    return Trajectory(
        id=instance_id,
        instance_id=instance_id,
        agent="openhands",
        model=as_str(as_dict(metadata.get("llm_config")).get("model")),
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        resolved=resolved,
        submission=as_str(test_result.get("git_patch")),
        exit_status=as_str(rec.get("error")) or exit_status,
        totals=Totals(
            tokens_in=as_int(acc.get("prompt_tokens")) if acc else None,
            tokens_out=as_int(acc.get("completion_tokens")) if acc else None,
            cost_usd=as_float(run_metrics.get("accumulated_cost")),
            api_calls=len(as_list(run_metrics.get("costs"))) or None,
        ),
    )


def read_all(path: Path) -> Iterator[Trajectory]:
    """Yield one Trajectory per EvalOutput line of an `output.jsonl` (plain or gzip)."""
    path = Path(path)
    records = load_jsonl(path)
    found = False
    for i, rec in enumerate(records, 1):
        if not isinstance(rec, dict) or "instance_id" not in rec:
            raise TranscriptError(path, f"line {i} is not an OpenHands EvalOutput (no instance_id)")
        found = True
        yield _trajectory(path, rec)
    if not found:
        raise TranscriptError(path, "no EvalOutput lines")


def read(path: Path) -> Trajectory:
    """Parse an `output.jsonl` holding one run; more than one is an error (use `read_all`)."""
    runs = list(read_all(path))
    if len(runs) > 1:
        raise TranscriptError(path, f"holds {len(runs)} OpenHands runs; read them with read_all")
    return runs[0]
