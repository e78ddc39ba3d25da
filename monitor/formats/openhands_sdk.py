"""OpenHands SDK conversations (OpenHands 1.x: the CLI, the agent server, the SDK's benchmarks).

Source of truth: `openhands-sdk` (OpenHands/software-agent-sdk), `conversation/persistence_const.py`
and `conversation/event_store.py`: a conversation persisted under `persistence_dir` is a folder
`<conversation id>/` with `base_state.json` (the state: `agent.llm.model`, `execution_status`,
`stats.usage_to_metrics{<usage id>: {accumulated_cost, accumulated_token_usage,
token_usages[]{response_id, prompt_tokens, completion_tokens}}}`) and `events/`, one file per
event named `event-<index, 5+ digits>-<event id>.json` (the OpenHands CLI keeps them under
`~/.openhands/conversations/`). Each event is the pydantic dump of an `event/` class, told apart
by `kind`: `SystemPromptEvent`, `MessageEvent{source, llm_message{role, content[]}}`,
`ActionEvent{thought[], action{..., kind}, tool_name, tool_call{arguments}, llm_response_id}`,
`ObservationEvent{observation{content[], is_error, ...}, action_id, tool_call_id}`,
`AgentErrorEvent{error, tool_call_id}`, `UserRejectObservation{rejection_reason, action_id}`,
`ConversationStateUpdateEvent{key, value}`, `Condensation`, ... The same events as a JSONL file
(one event per line, as exported) are read too.

Steps are those serving.hooks.openhands scores live (it builds them with this module's
functions): an action paired with the event that answers it (by `action_id`, else its
`tool_call_id`) is one step (a shell tool's `command`, else `tool(args)`; `finish` -> kind
"submit"; an error: `is_error`, a non-zero exit code, a timeout, an agent error or a
rejection), an agent message is a message step; user messages
(the first is the task), the system prompt, state updates and condensations are not steps. An
action not answered yet is a step with no observation (a watch holds it back until its answer
is written). Tokens: the usage of the call that chose the step (`llm_response_id`; the first
step of a call with parallel tool calls carries it), else estimated from characters
(monitor.ledger).
"""

from __future__ import annotations

import json
import os
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
    head_records,
    malformed,
    parse_time,
)
from monitor.formats._layout import place_file, run_id
from monitor.ledger import fill_estimates
from monitor.textio import load_json, load_jsonl
from monitor.types import Step, Totals, Trajectory

NAME = "openhands-sdk"

_EVENT_FILE = re.compile(r"^event-(\d{5,})-[0-9a-fA-F-]{8,}\.json$")
_KINDS = {
    "SystemPromptEvent",
    "MessageEvent",
    "ActionEvent",
    "ObservationEvent",
    "AgentErrorEvent",
    "UserRejectObservation",
    "ConversationStateUpdateEvent",
    "Condensation",
    "CondensationRequest",
    "PauseEvent",
}
ANSWERS = ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation")


def _event_files(folder: Path) -> list[Path]:
    """`folder`'s event files in index order (`folder` is a conversation or its `events/`)."""
    events = folder / "events" if (folder / "events").is_dir() else folder
    try:
        names = os.listdir(events)
    except OSError:
        return []
    found = [(int(m.group(1)), n) for n in names if (m := _EVENT_FILE.match(n))]
    return [events / n for _, n in sorted(found)]


def sniff(path: Path, head: bytes) -> bool:
    """A folder: a conversation (`events/event-*.json`, `base_state.json`) or its `events/`.
    A file: JSONL whose first record is an SDK event (`kind` + `source` + `id`)."""
    if head:
        recs = head_records(head, limit=1)
        return bool(recs) and recs[0].get("kind") in _KINDS and "source" in recs[0]
    path = Path(path)
    if not path.is_dir():
        return False
    return bool(_event_files(path)) and (
        (path / "base_state.json").is_file() or path.name == "events" or (path / "events").is_dir()
    )


def _action_line(ev: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call as one line (a shell tool's command, else `tool(args)`) and its arguments."""
    action = ev.get("action")
    if isinstance(action, dict):
        # unset fields: None in a live event, left out of a persisted one (exclude_none)
        args = {k: v for k, v in action.items() if k != "kind" and v is not None}
    else:  # not executable (its arguments did not validate): the raw call
        raw = as_str(as_dict(ev.get("tool_call")).get("arguments"))
        try:
            parsed = json.loads(raw or "{}")
        except ValueError:
            parsed = {"arguments": raw}
        args = parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return action_text(as_str(ev.get("tool_name")), args), args


def action_step(ev: dict[str, Any]) -> Step:
    """The step an `ActionEvent` (as its JSON dump) starts, nothing answered yet."""
    line, args = _action_line(ev)
    tool = as_str(ev.get("tool_name"))
    return Step(
        index=0,
        kind="submit" if tool == "finish" else "action",
        tool=tool,
        action=line,
        args=args or None,
        thought=content_text(ev.get("thought")),
        timestamp=parse_time(ev.get("timestamp")),
        role="assistant",
        raw=ev,
    )


def message_step(ev: dict[str, Any]) -> Step:
    """The step an agent `MessageEvent` is: prose, no call."""
    text = content_text(as_dict(ev.get("llm_message")).get("content"))
    timestamp = parse_time(ev.get("timestamp"))
    return Step(
        index=0, kind="message", thought=text, timestamp=timestamp, role="assistant", raw=ev
    )


def answers(ev: dict[str, Any]) -> tuple[str, str]:
    """Which call an answer event answers: (its ActionEvent's id, the tool call's id); an
    `AgentErrorEvent` names only the tool call."""
    return as_str(ev.get("action_id")), as_str(ev.get("tool_call_id"))


def answer(ev: dict[str, Any]) -> tuple[str, bool]:
    """An answer event's text and whether it is an error (`is_error`, a command's non-zero
    exit code, a timeout, an agent error, a rejection)."""
    kind = ev.get("kind")
    if kind == "ObservationEvent":
        obs = as_dict(ev.get("observation"))
        code = obs.get("exit_code")
        failed = isinstance(code, int) and not isinstance(code, bool) and code not in (0, -1)
        error = bool(obs.get("is_error")) or failed or obs.get("timeout") is True
        return content_text(obs.get("content")), error
    if kind == "AgentErrorEvent":
        return as_str(ev.get("error")), True
    return f"rejected: {as_str(ev.get('rejection_reason'))}", True


class _Builder:
    """Steps from the events in order, with what the estimates need."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.ctx: list[int] = []  # characters the model had seen before each step's call
        self.out: list[int] = []  # characters of the step's call
        self.by_action: dict[str, Step] = {}  # ActionEvent id -> its step
        self.by_call: dict[str, Step] = {}  # tool call id -> its step
        self.seen = 0
        self.task = ""
        self.status = ""

    def add(self, ev: dict[str, Any]) -> None:
        kind, source = ev.get("kind"), ev.get("source")
        if kind == "MessageEvent":
            if source == "agent":
                step = message_step(ev)
                self._step(step, len(step.thought))
            elif source == "user" and not self.task:
                self.task = content_text(as_dict(ev.get("llm_message")).get("content"))
                self.seen += len(self.task)
        elif kind == "ActionEvent":
            step = action_step(ev)
            self._step(step, len(step.thought) + len(step.action))
            self.by_action[as_str(ev.get("id"))] = step
            self.by_call[as_str(ev.get("tool_call_id"))] = step
        elif kind in ANSWERS:
            action_id, call_id = answers(ev)
            asked = self.by_action.get(action_id) or self.by_call.get(call_id)
            text, is_error = answer(ev)
            if asked is not None and not asked.observation:
                asked.observation, asked.is_error = text, is_error
            self.seen += len(text)
        elif kind == "SystemPromptEvent":
            self.seen += len(as_str(as_dict(ev.get("system_prompt")).get("text")))
        elif kind == "ConversationStateUpdateEvent" and ev.get("key") == "execution_status":
            self.status = as_str(ev.get("value"))

    def _step(self, step: Step, out: int) -> None:
        step.index = len(self.steps)
        self.steps.append(step)
        self.ctx.append(self.seen)
        self.out.append(out)
        self.seen += out


def _usage(state: dict[str, Any]) -> tuple[dict[str, tuple[int, int]], int, int, float]:
    """Per call (response id) its (prompt, completion) tokens; the run's totals and cost."""
    calls: dict[str, tuple[int, int]] = {}
    tokens_in = tokens_out = 0
    cost = 0.0
    for metrics in as_dict(as_dict(state.get("stats")).get("usage_to_metrics")).values():
        m = as_dict(metrics)
        for u in as_list(m.get("token_usages")):
            u = as_dict(u)
            rid = as_str(u.get("response_id"))
            if rid:
                calls[rid] = (
                    as_int(u.get("prompt_tokens")) or 0,
                    as_int(u.get("completion_tokens")) or 0,
                )
        acc = as_dict(m.get("accumulated_token_usage"))
        tokens_in += as_int(acc.get("prompt_tokens")) or 0
        tokens_out += as_int(acc.get("completion_tokens")) or 0
        cost += as_float(m.get("accumulated_cost")) or 0.0
    return calls, tokens_in, tokens_out, cost


def _events(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """The events, the persisted state ({} without one) and the conversation's folder."""
    if not path.is_dir():
        with malformed(path, "OpenHands SDK events (JSONL)"):
            events = [e for e in load_jsonl(path) if isinstance(e, dict)]
        return events, {}, path
    files = _event_files(path)
    if not files:
        raise TranscriptError(path, "no OpenHands event files (events/event-*.json) in this folder")
    events = []
    for f in files:
        with malformed(f, "OpenHands SDK event"):
            ev = load_json(f)
        if isinstance(ev, dict):
            events.append(ev)
    folder = path.parent if path.name == "events" and not (path / "events").is_dir() else path
    state: dict[str, Any] = {}
    if (folder / "base_state.json").is_file():
        try:  # rewritten while the run goes on: a half-written state only loses the usage
            state = as_dict(load_json(folder / "base_state.json"))
        except TranscriptError:
            state = {}
    return events, state, folder


def read(path: Path) -> Trajectory:
    """Parse a persisted OpenHands SDK conversation (its folder, its `events/`, or a JSONL)."""
    path = Path(path)
    events, state, folder = _events(path)
    build = _Builder()
    for ev in events:
        build.add(ev)
    if not build.task and not build.steps:
        raise TranscriptError(path, "no OpenHands SDK events (no user message, no action)")
    calls, tokens_in, tokens_out, cost = _usage(state)
    charged: set[str] = set()
    for step in build.steps:
        rid = as_str(as_dict(step.raw).get("llm_response_id"))
        if rid in calls:
            step.tokens_in, step.tokens_out = calls[rid] if rid not in charged else (0, 0)
            step.tokens_estimated = False
            charged.add(rid)
    fill_estimates(build.steps, build.ctx, build.out)
    instance_id = folder.stem if not path.is_dir() else folder.name
    source, run = place_file(folder / "base_state.json" if path.is_dir() else path, instance_id)
    last = build.steps[-1] if build.steps else None
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="openhands",
        source=source,
        run=run,
        model=as_str(as_dict(as_dict(state.get("agent")).get("llm")).get("model")),
        format=NAME,
        path=str(path),
        task=build.task,
        steps=build.steps,
        exit_status=as_str(state.get("execution_status"))
        or build.status
        or ("finish" if last is not None and last.tool == "finish" else ""),
        totals=Totals(
            tokens_in=tokens_in or None,
            tokens_out=tokens_out or None,
            cost_usd=cost or None,
            api_calls=len(calls) or None,
        ),
    )
