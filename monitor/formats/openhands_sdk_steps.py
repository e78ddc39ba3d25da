"""The steps of an OpenHands SDK conversation, event by event: what monitor.formats.openhands_sdk
reads from a persisted conversation and serving.hooks.openhands scores live, so the two agree
(kind, call, answer, error and tokens).

Events are the SDK's JSON dumps (`kind` = the event class). An `ActionEvent` starts a step
(a shell tool's `command`, else `tool(args)`; a `finish` whose arguments validated -> kind
"submit", one refused or answered by an error stays an action: the run goes on); the
`ObservationEvent` / `AgentErrorEvent` / `UserRejectObservation` that answers it (by `action_id`,
else its `tool_call_id`: an agent error names only that) completes it; an agent `MessageEvent`
is a message step, a `Condensation` a compaction step (the summary its observation). An answer
is an error when the SDK says so, a command exits non-zero, it timed out, or it is an agent error
or a rejection. Tokens: the usage of the call that chose the step (by `llm_response_id`, from the
conversation's stats; the first step of a response with parallel calls carries it), else
estimated from the characters the model had been sent before the step and wrote for it.
"""

from __future__ import annotations

import json
from typing import Any

from monitor.formats._fields import (
    action_text,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    content_text,
    parse_time,
)
from monitor.ledger import StepLedger
from monitor.types import Step

_ANSWERS = ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation")


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


def _action_step(ev: dict[str, Any]) -> Step:
    """The step an `ActionEvent` (as its JSON dump) starts, nothing answered yet."""
    line, args = _action_line(ev)
    tool = as_str(ev.get("tool_name"))
    # a finish the SDK could not validate (`action` is null) ended nothing
    finished = tool == "finish" and isinstance(ev.get("action"), dict)
    return Step(
        index=0,
        kind="submit" if finished else "action",
        tool=tool,
        action=line,
        args=args or None,
        thought=content_text(ev.get("thought")),
        timestamp=parse_time(ev.get("timestamp")),
        role="assistant",
        raw=ev,
    )


def _message_step(ev: dict[str, Any]) -> Step:
    """The step an agent `MessageEvent` is: prose, no call."""
    text = content_text(as_dict(ev.get("llm_message")).get("content"))
    timestamp = parse_time(ev.get("timestamp"))
    return Step(
        index=0, kind="message", thought=text, timestamp=timestamp, role="assistant", raw=ev
    )


def _answer(ev: dict[str, Any]) -> tuple[str, bool]:
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


class Steps(StepLedger):
    """A conversation's steps, built one event at a time, with what the estimates need."""

    def __init__(self) -> None:
        super().__init__()
        self.by_action: dict[str, Step] = {}  # ActionEvent id -> its step
        self.by_call: dict[str, Step] = {}  # tool call id -> its step
        self.task = ""
        self.status = ""
        self.charged: set[str] = set()  # response ids whose usage a step carries

    def add(self, ev: dict[str, Any]) -> Step | None:
        """Take the next event; the step it completes (an answered call, an agent message, a
        condensation), None when it completes none."""
        kind, source = ev.get("kind"), ev.get("source")
        if kind == "MessageEvent":
            if source == "agent":
                step = _message_step(ev)
                self.append(step, len(step.thought))
                return step
            text = content_text(as_dict(ev.get("llm_message")).get("content"))
            self.task = self.task or (text if source == "user" else "")
            self.seen += len(text)
        elif kind == "ActionEvent":
            step = _action_step(ev)
            self.append(step, len(step.thought) + len(step.action))
            self.by_action[as_str(ev.get("id"))] = step
            self.by_call[as_str(ev.get("tool_call_id"))] = step
        elif kind in _ANSWERS:
            # by its ActionEvent's id, else the tool call's: an AgentErrorEvent names only that
            asked = self.by_action.get(as_str(ev.get("action_id"))) or self.by_call.get(
                as_str(ev.get("tool_call_id"))
            )
            text, is_error = _answer(ev)
            self.seen += len(text)
            if asked is not None and not asked.observation:
                asked.observation, asked.is_error = text, is_error
                if is_error and asked.kind == "submit":  # a finish refused: not an end
                    asked.kind = "action"
                return asked
            if asked is None:  # an answer to no call read (a conversation resumed mid-call)
                step = Step(index=0, tool=as_str(ev.get("tool_name")), observation=text)
                step.is_error, step.role, step.raw = is_error, "assistant", ev
                self.append(step, 0)
                return step
        elif kind == "Condensation":
            summary = as_str(ev.get("summary"))
            step = Step(index=0, kind="compaction", action="condensation", observation=summary)
            step.timestamp, step.raw = parse_time(ev.get("timestamp")), ev
            self.append(step, 0)
            return step
        elif kind == "SystemPromptEvent":
            self.seen += len(as_str(as_dict(ev.get("system_prompt")).get("text")))
        elif kind == "ConversationStateUpdateEvent" and ev.get("key") == "execution_status":
            self.status = as_str(ev.get("value"))
        return None

    def tokens(self, step: Step, calls: dict[str, tuple[int, int]]) -> None:
        """Set `step`'s tokens: its call's recorded usage (`calls`: response id -> prompt and
        completion tokens; once per response), else the estimate."""
        rid = as_str(as_dict(step.raw).get("llm_response_id"))
        if rid and rid in calls:
            step.tokens_in, step.tokens_out = calls[rid] if rid not in self.charged else (0, 0)
            step.tokens_estimated = False
            self.charged.add(rid)
            return
        self.estimate_step(step)


def usage(state: dict[str, Any]) -> tuple[dict[str, tuple[int, int]], int, int, float]:
    """Per call (response id) its (prompt, completion) tokens, the run's totals and cost, from a
    conversation state's `stats` (`{"stats": {"usage_to_metrics": ...}}`)."""
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
