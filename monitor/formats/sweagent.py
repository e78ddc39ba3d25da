"""SWE-agent `.traj` files, 2024 `history`-based ones and newer ones (CodeR's fork included).

Source of truth: SWE-agent/SWE-agent, `sweagent/agent/agents.py` (`trajectory` steps
`{action, observation, response, thought, state, execution_time, query, extra_info}`, `history`
messages `{role, content, agent, thought, action, message_type, tool_calls}`, `info{exit_status,
submission, model_stats{instance_cost, tokens_sent, tokens_received, api_calls}}`); CodeR
(NL2Code/CodeR) writes the same shape with one `agent` role per history message (Manager,
Reproducer, Debugger, Programmer, Tester) and `model_stats` sometimes as a Python-literal string.

Steps: one per `trajectory[]` entry (= one assistant message of `history`, whose `agent` gives
Step.role). Harness-made entries (`exit_cost` etc. with "Exit due to ..." as the response) are not
model calls and are skipped. Step.tool is the first word of the action when it is a command the
system prompt documents (open, edit, search_dir, ...) or a tool call name; otherwise "bash".
`submit` -> kind "submit"; an empty action -> kind "message".

is_error (2024 files carry no exit code): the observation shows a Python traceback, an exception
line (`^Name(Error|Exception): `), SWE-agent's edit linter rejection ("Your proposed edit has
introduced new syntax error"), "command not found", "No such file or directory", or a usage
message (`^usage: ` / `^Usage: `). Newer files with an exit code in `extra_info` use it.

Tokens: only run totals exist (`tokens_sent` / `tokens_received`); per-step figures are
estimated from the growing context of the step's agent role and scaled to them (monitor.ledger).
The agent is "coder" when the history names more than one agent role, else "swe-agent".
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    as_dict,
    as_float,
    as_int,
    as_list,
    as_str,
    content_text,
    malformed,
)
from monitor.formats._layout import place_file, run_id
from monitor.ledger import fill_estimates
from monitor.textio import between, load_json, strip_gz
from monitor.types import Step, Totals, Trajectory

NAME = "swe-agent"

# SWE-agent's default commands (2024 and 1.x tool bundles); the system prompt may add more.
_COMMANDS = frozenset(
    "open goto scroll_up scroll_down create edit search_dir search_file find_file submit "
    "str_replace_editor insert filemap view_image exit_forfeit plan succeed fail".split()
)
_DOC_COMMAND = re.compile(r"^([a-z_][a-z0-9_]*)(?::\s*$| \S.* - | - )", re.M)
_ERROR = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^[\w.]*(?:Error|Exception): "
    r"|Your proposed edit has introduced new syntax error"
    r"|command not found"
    r"|No such file or directory"
    r"|^[Uu]sage: ",
    re.M,
)
# Where the issue text sits in the first user message: (start, end) markers, found with str.find
# (as regexes `start(.*?)end` they are quadratic without an end, cubic on long runs of spaces).
# "INSTRUCTION" ends SWE-agent's "INSTRUCTIONS:" and CodeR's Manager's "INSTRUCTION:".
_ISSUE = (
    ("ISSUE:\n", "\n\nINSTRUCTION"),
    ("<pr_description>", "</pr_description>"),
    ("<issue>", "</issue>"),
)
_HARNESS_EXIT = re.compile(r"^exit_\w+$")


def sniff(path: Path, head: bytes) -> bool:
    """True for a JSON object with SWE-agent's `trajectory` list (and history/info/environment)."""
    if not head.lstrip().startswith(b"{"):
        return False
    if b'"trajectory":' not in head and b'"trajectory": [' not in head:
        return strip_gz(Path(path).name).endswith(".traj") and b'"history"' in head
    return any(k in head for k in (b'"history"', b'"environment"', b'"info"', b'"action"'))


def _task(history: list[dict[str, Any]], data: dict[str, Any]) -> str:
    for msg in history:
        if msg.get("role") != "user":
            continue
        text = content_text(msg.get("content"))
        for start, end in _ISSUE:
            issue = between(text, start, end)
            if issue is not None:
                return issue.strip()
    ps = as_dict(_replay(data).get("problem_statement"))
    if as_str(ps.get("text")):
        return as_str(ps.get("text"))
    first = next((m for m in history if m.get("role") == "user"), {})
    return content_text(first.get("content")).strip()


def _replay(data: dict[str, Any]) -> dict[str, Any]:
    """The run's `replay_config` (newer SWE-agent; a JSON string or an object)."""
    replay = data.get("replay_config")
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except (ValueError, RecursionError):
            replay = {}
    return as_dict(replay)


def _model(data: dict[str, Any]) -> str:
    model = as_dict(_replay(data).get("agent")).get("model")
    if isinstance(model, dict):
        return as_str(model.get("name")) or as_str(model.get("model_name"))
    return as_str(model)


def _commands(history: list[dict[str, Any]]) -> set[str]:
    names = set(_COMMANDS)
    for msg in history:
        if msg.get("role") == "system":
            text = content_text(msg.get("content"))
            _, _, doc = text.partition("COMMANDS:")
            names.update(_DOC_COMMAND.findall(doc[:20000]))
    return names


def _model_stats(info: dict[str, Any]) -> dict[str, Any]:
    stats = info.get("model_stats")
    if isinstance(stats, str):  # CodeR: str(dict)
        try:
            stats = ast.literal_eval(stats)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            stats = {}
    return as_dict(stats)


def _is_error(observation: str, extra: dict[str, Any]) -> bool:
    code = extra.get("exit_code", extra.get("returncode"))
    if isinstance(code, int) and not isinstance(code, bool):
        return code != 0
    return bool(_ERROR.search(observation))


def _parse(path: Path, data: Any) -> Trajectory:
    """The Trajectory of a parsed .traj file (long: steps, task, submission, tokens and cost come
    from different parts of the file, each read once here in the order the format nests them)."""
    if not isinstance(data, dict) or not isinstance(data.get("trajectory"), list):
        raise TranscriptError(path, "not a SWE-agent trajectory (no `trajectory` list)")
    entries = [t for t in data["trajectory"] if isinstance(t, dict)]
    history = [m for m in as_list(data.get("history")) if isinstance(m, dict)]
    info = as_dict(data.get("info"))
    stats = _model_stats(info)
    commands = _commands(history)
    assistants = [i for i, m in enumerate(history) if m.get("role") == "assistant"]
    aligned = len(assistants) == len(entries)
    roles = {as_str(m.get("agent")) for m in history} - {"", "primary", "main"}

    # Characters each agent role has been sent so far (CodeR roles keep separate contexts).
    ctx_at: list[int] = []
    if aligned:
        seen: dict[str, int] = {}
        for i, m in enumerate(history):
            agent = as_str(m.get("agent"))
            if i in assistants:
                ctx_at.append(seen.get(agent, 0))
            seen[agent] = seen.get(agent, 0) + len(content_text(m.get("content")))

    steps: list[Step] = []
    ctx_chars: list[int] = []
    out_chars: list[int] = []
    running = sum(len(content_text(m.get("content"))) for m in history[: (assistants or [0])[0]])
    for k, entry in enumerate(entries):
        hmsg = history[assistants[k]] if aligned else {}
        action = as_str(entry.get("action")).strip()
        response = as_str(entry.get("response")) or content_text(hmsg.get("content"))
        thought = as_str(entry.get("thought")) or as_str(hmsg.get("thought"))
        observation = as_str(entry.get("observation"))
        if _HARNESS_EXIT.match(action) and thought.startswith("Exit due to"):
            continue
        calls = as_list(hmsg.get("tool_calls"))
        args = None
        if calls:
            fn = as_dict(as_dict(calls[0]).get("function"))
            tool = as_str(fn.get("name")) or "bash"
            raw_args = fn.get("arguments")
            try:
                args = as_dict(json.loads(raw_args) if isinstance(raw_args, str) else raw_args)
            except ValueError:
                args = None
        else:
            first = action.split(maxsplit=1)[0] if action else ""
            tool = first if first in commands else ("bash" if action else "")
        step = Step(
            index=len(steps),
            thought=thought.strip(),
            tool=tool,
            action=action,
            args=args,
            observation=observation,
            role=as_str(hmsg.get("agent")) if roles else "",
        )
        if not action:
            step.kind = "message"
        elif tool == "submit":
            step.kind = "submit"
        else:
            step.is_error = _is_error(observation, as_dict(entry.get("extra_info")))
        step.raw = entry
        query = entry.get("query")
        if isinstance(query, list) and query:
            context = sum(len(content_text(as_dict(q).get("content"))) for q in query)
        elif aligned:
            context = ctx_at[k]
        else:
            context = running
        steps.append(step)
        ctx_chars.append(context)
        out_chars.append(len(response))
        running += len(response) + len(observation)

    sent = stats.get("tokens_sent")
    received = stats.get("tokens_received")
    total_in = as_int(sent) if isinstance(sent, (int, float)) else None
    total_out = as_int(received) if isinstance(received, (int, float)) else None
    fill_estimates(steps, ctx_chars, out_chars, total_in=total_in, total_out=total_out)

    name = strip_gz(Path(path).name)
    instance_id = as_str(data.get("instance_id")) or name.split(".traj", 1)[0]
    source, run = place_file(path, instance_id)
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="coder" if len(roles) > 1 else "swe-agent",
        source=source,
        run=run,
        model=_model(data),
        format=NAME,
        path=str(path),
        task=_task(history, data),
        steps=steps,
        submission=as_str(info.get("submission")),
        exit_status=as_str(info.get("exit_status")),
        totals=Totals(
            tokens_in=total_in,
            tokens_out=total_out,
            cost_usd=as_float(stats.get("instance_cost")),
            api_calls=as_int(stats["api_calls"]) if "api_calls" in stats else None,
        ),
    )


def read(path: Path) -> Trajectory:
    """Parse a SWE-agent `.traj` (plain or gzip) into the main agent's steps."""
    path = Path(path)
    with malformed(path, "SWE-agent trajectory"):
        return _parse(path, load_json(path))
