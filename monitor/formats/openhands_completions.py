"""OpenHands LLM-completion logs: one JSON per LLM call, the last call's file gives the run.

Source of truth: OpenHands `openhands/llm/llm.py` (with `log_completions` on, each call writes
`{messages, response, args, kwargs, timestamp, cost, fncall_messages, fncall_response}` to
`<eval_output_dir>/llm_completions/<instance>/<model>-<timestamp>.json`) and
`openhands/llm/fn_call_converter.py` (the non-native function-calling form: an in-context
example exchange before the task, tool calls written as `<function=NAME>` +
`<parameter=KEY>VALUE</parameter>` + `</function>`, results sent back as
`EXECUTION RESULT of [NAME]:` user turns). Multi-SWE-bench and SWE-bench experiments copies keep
the same files under `trajs/<instance>/`.

`messages` is the whole conversation sent on that call: the system prompt, the task (after an
in-context example when the converter added one), then one assistant turn per earlier call and
its result. `response` is the answer to this call: the run's last action, whose result the log
never shows. Native function-calling logs (assistant `tool_calls`, `role: "tool"` results) are
read too.

Steps: one per assistant turn after the task (each one LLM call), then the response. A turn's
action is its first tool call (`execute_bash` -> its command; other tools -> `tool(args)`), its
thought the text before it; `finish` -> kind "submit"; a turn without a tool call -> kind
"message" (the harness answers it with "Please continue working on the task ..."). In-context
example turns and the example text before the task are not steps. is_error: the command's
`[Command finished with exit code N]` with N != 0, a timeout notice, or a tool result that starts
with "ERROR". Tokens: these logs carry no usage (and cost 0 for this proxy), so every call is
estimated from the characters it was sent and answered (monitor.ledger).

A file is one run (its instance is the folder it sits in, or the file name). A folder of such
files, one per call, is the same run seen at every call: `read` takes the folder and gives the
run its latest call belongs to. When that file holds one step per call file it is the whole run
(the common case: one file parsed). Otherwise the files are read in the order of the times in
their names and each is joined onto the run so far (`openhands_condensed.continuation`): a
call whose history grew, or that a condenser shortened (OpenHands' `[condenser]`, off in its
SWE-bench evaluation by default, on in the app; the controller also halves the history on a
context-window error), goes on with the steps after those already known; a call that does not
go on from the run starts another attempt (a rerun beside a crashed attempt's files), and the
last attempt is the run. A condenser's own LLM calls in the folder are skipped; what cannot be
told is said in monitor.formats.openhands_condensed. Without times in every file name the
latest is the longest conversation, read alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    action_text,
    as_dict,
    as_float,
    as_list,
    as_str,
    content_text,
    file_stem,
    malformed,
)
from monitor.formats._layout import CONTAINERS, place_file, run_id
from monitor.formats.openhands_call_files import (
    call_files,
    in_time_order,
    latest,
    without_timestamp,
)
from monitor.formats.openhands_condensed import (
    Call,
    is_condenser_call,
    joined,
    marked,
    session_id,
)
from monitor.ledger import fill_estimates
from monitor.textio import head_bytes, load_json
from monitor.types import Step, Totals, Trajectory

NAME = "openhands-completions"

_HEAD = re.compile(rb'^\s*\{\s*"messages"\s*:\s*\[')
_MARKERS = (b"<function=", b"EXECUTION RESULT of [", b'"fncall_messages"', b"OpenHands agent")
_RESULT = re.compile(r"^EXECUTION RESULT of \[([\w.-]+)\]:\n?")
_EXIT = re.compile(r"\[Command finished with exit code (-?\d+)\]")
_TIMEOUT = re.compile(r"\[Command timed out|command timed out", re.I)
_TASK_START = "NEW TASK DESCRIPTION"
_CONTINUE = "Please continue working on the task"


def _looks_like_log(head: bytes) -> bool:
    return _HEAD.match(head) is not None and any(m in head for m in _MARKERS)


def sniff(path: Path, head: bytes) -> bool:
    """A file: JSON starting with `messages` and OpenHands' tool-call text or keys. A folder:
    every JSON file in it is such a log (one per call of one run)."""
    if head:
        return _looks_like_log(head)
    if not Path(path).is_dir():
        return False
    files = call_files(Path(path))
    if not files:
        return False
    try:
        return _looks_like_log(head_bytes(files[0]))
    except TranscriptError:
        return False


def _text(message: dict[str, Any]) -> str:
    return content_text(message.get("content"))


def _task_index(messages: list[dict[str, Any]]) -> int:
    """Index of the user message that carries the task (after any in-context example)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    for i in users:
        if _TASK_START in _text(messages[i]):
            return i
    for i in users:
        if "<issue_description>" in _text(messages[i]) or "<uploaded_files>" in _text(messages[i]):
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


def _task(text: str) -> str:
    issue = _between(text, "<issue_description>", "</issue_description>")
    if issue is not None:
        return issue[0].strip()
    if _TASK_START in text:
        text = text.split(_TASK_START, 1)[1].lstrip("-").lstrip()
    return text.strip()


def _call(message: dict[str, Any]) -> tuple[str, dict[str, Any], str, int]:
    """(tool, args, thought, number of calls) of an assistant turn (text or native form)."""
    calls = as_list(message.get("tool_calls"))
    text = _text(message)
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
        text = _text(m)
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


def _steps(
    messages: list[dict[str, Any]], response: dict[str, Any] | None
) -> tuple[list[Step], list[int], list[int]]:
    start = _task_index(messages)
    seen = sum(len(_text(m)) for m in messages[: start + 1])
    steps: list[Step] = []
    ctx: list[int] = []
    out: list[int] = []
    i = start + 1
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "assistant":
            seen += len(_text(m))
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") in ("user", "tool"):
            j += 1
        steps.append(_step(m, messages[i + 1 : j], len(steps)))
        ctx.append(seen)
        out.append(len(_text(m)))
        seen += sum(len(_text(x)) for x in messages[i:j])
        i = j
    if response is not None:
        steps.append(_step(response, [], len(steps)))
        ctx.append(seen)
        out.append(len(_text(response)))
    return steps, ctx, out


def _response_message(data: dict[str, Any]) -> dict[str, Any] | None:
    """The answer to the logged call (`response.choices[0].message`), None when absent."""
    choices = as_list(as_dict(data.get("response")).get("choices"))
    message = as_dict(as_dict(choices[0]).get("message")) if choices else {}
    if not message or not (_text(message) or message.get("tool_calls")):
        return None
    return {**message, "role": "assistant"}


def _instance_id(path: Path) -> str:
    parent = path.parent.name
    if parent and parent not in CONTAINERS:
        return parent
    return without_timestamp(file_stem(path))


def _messages(path: Path, data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TranscriptError(path, "not an OpenHands completion log (no `messages` list)")
    return [m for m in data["messages"] if isinstance(m, dict)]


def _parse(path: Path, data: Any) -> Trajectory:
    messages = _messages(path, data)
    if not any(m.get("role") == "user" for m in messages):
        raise TranscriptError(path, "OpenHands completion log without a task (no user message)")
    steps, ctx, out = _steps(messages, _response_message(data))
    fill_estimates(steps, ctx, out)
    instance_id = _instance_id(path)
    source, run = place_file(path, instance_id)
    model = (
        as_str(as_dict(data.get("response")).get("model"))
        or as_str(as_dict(data.get("kwargs")).get("model"))
        or (without_timestamp(file_stem(path)) if path.parent.name == instance_id else "")
    )
    cost = as_float(data.get("cost"))
    last = steps[-1] if steps else None
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="openhands",
        source=source,
        run=run,
        model=model,
        format=NAME,
        path=str(path),
        task=_task(_text(messages[_task_index(messages)])),
        steps=steps,
        exit_status="finish" if last is not None and last.tool == "finish" else "",
        totals=Totals(
            tokens_in=sum(s.tokens_in for s in steps),
            tokens_out=sum(s.tokens_out for s in steps),
            cost_usd=cost if cost else None,
            api_calls=len(steps),
        ),
    )


def _load(path: Path) -> Call | None:
    """One call file as read (openhands_condensed.Call); None for a condenser's own LLM call."""
    with malformed(path, "OpenHands completion log"):
        data = load_json(path)
        messages = _messages(path, data)
        if is_condenser_call(messages):
            return None
        mark = marked(messages, _task_index(messages))
        return Call(_parse(path, data), mark, session_id(data))


def _read_folder(folder: Path) -> Trajectory:
    """The run of a folder of call files: its latest call's file when that holds a step per
    call file (nothing condensed, no other attempt, no call left out), else the files joined."""
    files = in_time_order(folder)
    if files is None:
        path = latest(folder)
        with malformed(path, "OpenHands completion log"):
            return _parse(path, load_json(path))
    last = _load(files[-1])
    if last is not None and len(last.run.steps) == len(files):
        return last.run
    return joined(folder, files, _load)


def read(path: Path) -> Trajectory:
    """Parse an OpenHands completion log (a file, or a folder of per-call files) into steps."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    with malformed(path, "OpenHands completion log"):
        return _parse(path, load_json(path))
