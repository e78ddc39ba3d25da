"""The steps of an OpenHands completion log (one LLM call's `messages` and `response`), message
by message: what monitor.formats.openhands_completions reads from each call file. See that
module for the format and its sources of truth.
"""

from __future__ import annotations

import json
import re
from typing import Any

from monitor.formats._fields import (
    action_text,
    as_dict,
    as_list,
    as_str,
    content_text,
)
from monitor.types import Step

_RESULT = re.compile(r"^EXECUTION RESULT of \[([\w.-]+)\]:\n?")
_EXIT = re.compile(r"\[Command finished with exit code (-?\d+)\]")
_TIMEOUT = re.compile(r"\[Command timed out|command timed out", re.I)
_TASK_START = "NEW TASK DESCRIPTION"
_CONTINUE = "Please continue working on the task"


def message_text(message: dict[str, Any]) -> str:
    return content_text(message.get("content"))


def task_index(messages: list[dict[str, Any]]) -> int:
    """Index of the user message that carries the task (after any in-context example)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    for i in users:
        if _TASK_START in message_text(messages[i]):
            return i
    for i in users:
        if "<issue_description>" in message_text(messages[i]) or "<uploaded_files>" in message_text(
            messages[i]
        ):
            return i
    return users[0] if users else 0


def _between(text: str, start: str, end: str, pos: int = 0) -> tuple[str, int] | None:
    """The text between `start` (searched from `pos`) and the next `end` (or the end of the
    text), and the index after it; None without `start`. str.find only: linear time."""
    i = text.find(start, pos)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i)
    if j < 0:
        return text[i:], len(text)
    return text[i:j], j + len(end)


def task_text(text: str) -> str:
    issue = _between(text, "<issue_description>", "</issue_description>")
    if issue is not None:
        return issue[0].strip()
    if _TASK_START in text:
        text = text.split(_TASK_START, 1)[1].lstrip("-").lstrip()
    return text.strip()


def _call(message: dict[str, Any]) -> tuple[str, dict[str, Any], str, int]:
    """(tool, args, thought, number of calls) of an assistant turn (text or native form)."""
    calls = as_list(message.get("tool_calls"))
    text = message_text(message)
    if calls:
        fn = as_dict(as_dict(calls[0]).get("function"))
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else as_dict(raw)
        except ValueError:
            args = {"raw": raw}
        return as_str(fn.get("name")), as_dict(args) or {"raw": raw}, text.strip(), len(calls)
    start = text.find("<function=")
    call = _between(text, "<function=", "</function>")
    if call is None:
        return "", {}, text.strip(), 0
    name, _, body = call[0].partition(">")
    params: dict[str, Any] = {}
    pos = 0
    while (param := _between(body, "<parameter=", "</parameter>", pos)) is not None:
        key, _, value = param[0].partition(">")
        params[key.strip()] = value.strip("\n")
        pos = param[1]
    return name.strip(), params, text[:start].strip(), text.count("<function=")


def _result(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        text = message_text(m)
        parts.append(_RESULT.sub("", text, count=1))
    return "\n".join(p for p in parts if p)


def _is_error(tool: str, observation: str) -> bool:
    code = _EXIT.search(observation[-400:])
    if code is not None:
        return int(code.group(1)) != 0
    if _TIMEOUT.search(observation[:400]):
        return True
    return observation.lstrip().startswith("ERROR")


def _step(message: dict[str, Any], results: list[dict[str, Any]], index: int) -> Step:
    tool, args, thought, n_calls = _call(message)
    observation = _result(results)
    step = Step(index=index, tool=tool, thought=thought, args=args or None)
    step.action = action_text(tool, args) if tool else ""
    step.observation = observation
    if not tool:
        step.kind = "message"
    elif tool == "finish":
        step.kind = "submit"
    else:
        step.is_error = _is_error(tool, observation)
    step.raw = [message, *results]
    return step


def read_steps(
    messages: list[dict[str, Any]], response: dict[str, Any] | None
) -> tuple[list[Step], list[int], list[int]]:
    start = task_index(messages)
    seen = sum(len(message_text(m)) for m in messages[: start + 1])
    steps: list[Step] = []
    ctx: list[int] = []
    out: list[int] = []
    i = start + 1
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "assistant":
            seen += len(message_text(m))
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") in ("user", "tool"):
            j += 1
        steps.append(_step(m, messages[i + 1 : j], len(steps)))
        ctx.append(seen)
        out.append(len(message_text(m)))
        seen += sum(len(message_text(x)) for x in messages[i:j])
        i = j
    if response is not None:
        steps.append(_step(response, [], len(steps)))
        ctx.append(seen)
        out.append(len(message_text(response)))
    return steps, ctx, out


def response_message(data: dict[str, Any]) -> dict[str, Any] | None:
    """The answer to the logged call (`response.choices[0].message`), None when absent."""
    choices = as_list(as_dict(data.get("response")).get("choices"))
    message = as_dict(as_dict(choices[0]).get("message")) if choices else {}
    if not message or not (message_text(message) or message.get("tool_calls")):
        return None
    return {**message, "role": "assistant"}
