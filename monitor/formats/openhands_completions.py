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

import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    as_dict,
    as_float,
    as_str,
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
from monitor.formats.openhands_completions_steps import (
    message_text,
    read_steps,
    response_message,
    task_index,
    task_text,
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
from monitor.types import Totals, Trajectory

NAME = "openhands-completions"

_HEAD = re.compile(rb'^\s*\{\s*"messages"\s*:\s*\[')
_MARKERS = (b"<function=", b"EXECUTION RESULT of [", b'"fncall_messages"', b"OpenHands agent")


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
    steps, ctx, out = read_steps(messages, response_message(data))
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
        task=task_text(message_text(messages[task_index(messages)])),
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
        mark = marked(messages, task_index(messages))
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
    # the latest file is read already: joined() reads the others (those not kept from before)
    return joined(folder, files, lambda p: last if p == files[-1] else _load(p))


def read(path: Path) -> Trajectory:
    """Parse an OpenHands completion log (a file, or a folder of per-call files) into steps."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    with malformed(path, "OpenHands completion log"):
        return _parse(path, load_json(path))
