"""mini-swe-agent trajectory JSON (`trajectory_format` "mini-swe-agent-1" / "mini-swe-agent-1.1").

Source of truth: SWE-agent/mini-swe-agent, `src/minisweagent/agents/default.py` (`serialize`,
`parse_action`, `get_observation`, the `Submitted` flow exception) and `src/minisweagent/run/`
(batch layout `<output>/<instance>/<instance>.traj.json`, `preds.json`).

Top level: `info{exit_status, submission, model_stats{instance_cost, api_calls}, mini_version,
config{agent, model{model_name}, ...}}`, `messages[]`, `trajectory_format`, `instance_id`.

Steps: one per assistant message (one model call each).
- Text mode: the action is the single ```bash block of the content; a reply with zero or several
  blocks is answered with a "Please always provide EXACTLY ONE action" message -> kind
  "format_error", is_error True. A command that prints `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
  (or the older `MINI_SWE_AGENT_FINAL_OUTPUT`) -> kind "submit".
- Tool-call mode: `tool_calls[]` on the assistant message (or `extra.actions`), observations are
  `role: "tool"` messages.
- Observation = the user / tool messages up to the next assistant message. is_error when its
  `<returncode>` is non-zero, when the command timed out, or for format errors.
- Tokens: `extra.response.usage{prompt_tokens, completion_tokens, cost}` per call (actual);
  a call without usage is estimated from the context (monitor.ledger).
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
    as_int,
    as_list,
    as_str,
    malformed,
)
from monitor.formats._layout import place_file, run_id
from monitor.ledger import fill_estimates
from monitor.textio import between, load_json, strip_gz
from monitor.types import Step, Totals, Trajectory

NAME = "mini-swe-agent"

_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.S)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_FORMAT_ERROR = "Please always provide EXACTLY ONE action"
_TIMEOUT = re.compile(r"The last command .{0,200}timed out", re.S)
_INFO_FIRST = re.compile(rb'\{\s*"info"\s*:\s*\{\s*"exit_status"\s*:')
_PR_LEAD = "Consider the following PR description:"


def sniff(path: Path, head: bytes) -> bool:
    """True for a JSON object carrying mini-swe-agent's `mini_version` or trajectory format."""
    if not head.lstrip().startswith(b"{"):
        return False
    if b'"trajectory": [' in head:
        return False  # SWE-agent
    if b'"mini_version"' in head or b'"trajectory_format": "mini-swe-agent' in head:
        return True
    if _INFO_FIRST.match(head):  # serialize() order; a long submission can push the rest out
        return True
    name = strip_gz(Path(path).name)
    return name.endswith(".traj.json") and b'"messages"' in head and b'"history"' not in head


def _task(messages: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """The problem statement, cut out of the first user message."""
    first = next((m for m in messages if m.get("role") == "user"), {})
    text = _content(first.get("content"))
    pr = between(text, "<pr_description>", "</pr_description>")
    if pr is not None:  # not a regex: `\s*(.*?)\s*` is cubic on a long run of spaces
        return pr.strip().removeprefix(_PR_LEAD).strip()
    template = as_str(as_dict(config.get("agent")).get("instance_template"))
    if "{{task}}" in template:
        pre, _, post = template.partition("{{task}}")
        pre, post = pre.strip(), post.strip()
        if pre and "{" not in pre and text.startswith(pre):
            text = text[len(pre) :]
        cut = post.split("{", 1)[0][:40].strip()
        if cut and cut in text:
            text = text[: text.index(cut)]
    return text.strip()


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in as_list(content):
        b = as_dict(block)
        parts.append(as_str(b.get("text")) if b else as_str(block))
    return "\n".join(p for p in parts if p)


def _action(msg: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None, int]:
    """(tool, action, args, number of actions found) of an assistant message."""
    calls = as_list(msg.get("tool_calls"))
    if calls:
        fn = as_dict(as_dict(calls[0]).get("function"))
        tool = as_str(fn.get("name")) or "bash"
        raw_args = fn.get("arguments")
        try:
            args = json.loads(raw_args) if isinstance(raw_args, str) else as_dict(raw_args)
        except ValueError:
            args = {"raw": raw_args}
        args = as_dict(args) or {"raw": raw_args}
        return tool, action_text(tool, args), args, len(calls)
    actions = as_list(as_dict(msg.get("extra")).get("actions"))
    if actions and isinstance(as_dict(actions[0]).get("command"), str):
        return "bash", as_dict(actions[0])["command"], None, len(actions)
    blocks = _bash_blocks(_content(msg.get("content")))
    if len(blocks) == 1:
        return "bash", blocks[0].strip(), None, 1
    return "", "", None, len(blocks)


def _bash_blocks(text: str) -> list[str]:
    """The ```bash blocks of a message. The search ends at the last closing fence: past it no
    block can close, and the lazy `(.*?)` would rescan the rest from every opening (quadratic)."""
    end = text.rfind("\n```")
    return _BASH_BLOCK.findall(text, 0, end + 4) if end >= 0 else []


def _thought(msg: dict[str, Any]) -> str:
    text = _content(msg.get("content"))
    end = text.rfind("\n```") + 4  # see _bash_blocks
    m = _BASH_BLOCK.search(text, 0, end) if end >= 4 else None
    text = text[: m.start()] if m else text
    return re.sub(r"^\s*THOUGHT:\s*", "", text).strip()


def _steps(messages: list[dict[str, Any]]) -> tuple[list[Step], list[int], list[int]]:
    steps: list[Step] = []
    ctx_chars: list[int] = []
    out_chars: list[int] = []
    seen = 0  # characters of all messages before the current one
    i = 0
    while i < len(messages):
        msg = messages[i]
        text = _content(msg.get("content"))
        if msg.get("role") != "assistant":
            seen += len(text)
            i += 1
            continue
        obs_msgs = []
        j = i + 1
        while j < len(messages) and messages[j].get("role") in ("user", "tool"):
            obs_msgs.append(messages[j])
            j += 1
        observation = "\n".join(_content(m.get("content")) for m in obs_msgs)
        tool, action, args, n_actions = _action(msg)
        extra = as_dict(msg.get("extra"))
        response = as_dict(extra.get("response"))
        usage = as_dict(response.get("usage"))
        step = Step(index=len(steps), tool=tool, action=action, args=args, thought=_thought(msg))
        step.observation = observation
        if observation.lstrip().startswith(_FORMAT_ERROR) or (not action and n_actions != 1):
            step.kind, step.is_error = "format_error", True
        elif any(m in action for m in _SUBMIT_MARKERS) and not _RETURNCODE.search(
            observation[:200]
        ):
            # Submitted: the harness answers with the diff itself, not a command result.
            step.kind = "submit"
        else:
            rc = _RETURNCODE.search(observation[:200])
            step.is_error = bool(rc and int(rc.group(1)) != 0) or bool(
                _TIMEOUT.search(observation[:400])
            )
        if "prompt_tokens" in usage or "completion_tokens" in usage:
            step.tokens_in = as_int(usage.get("prompt_tokens"))
            step.tokens_out = as_int(usage.get("completion_tokens"))
            step.tokens_estimated = False
        cost = as_float(usage.get("cost"))
        step.cost_usd = cost if cost is not None else as_float(extra.get("cost"))
        ts = as_float(extra.get("timestamp")) or as_float(response.get("created"))
        step.timestamp = ts
        step.raw = [msg, *obs_msgs]
        steps.append(step)
        ctx_chars.append(seen)
        out_chars.append(len(text))
        seen += len(text)
        i += 1
    return steps, ctx_chars, out_chars


def _parse(path: Path, data: Any) -> Trajectory:
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise TranscriptError(path, "not a mini-swe-agent trajectory (no `messages` list)")
    messages = [m for m in data["messages"] if isinstance(m, dict)]
    info = as_dict(data.get("info"))
    config = as_dict(info.get("config"))
    stats = as_dict(info.get("model_stats"))
    exit_msg = next((m for m in reversed(messages) if m.get("role") == "exit"), {})
    exit_extra = as_dict(exit_msg.get("extra"))
    name = strip_gz(Path(path).name)
    instance_id = as_str(data.get("instance_id")) or name.split(".traj", 1)[0].split(".json")[0]
    steps, ctx, out = _steps(messages)
    fill_estimates(steps, ctx, out)  # only steps without recorded usage; no totals to scale to
    source, run = place_file(path, instance_id)
    totals = Totals(
        tokens_in=sum(s.tokens_in for s in steps),
        tokens_out=sum(s.tokens_out for s in steps),
        cost_usd=as_float(stats.get("instance_cost")),
        api_calls=as_int(stats.get("api_calls")) if "api_calls" in stats else None,
    )
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="mini-swe-agent",
        source=source,
        run=run,
        model=as_str(as_dict(config.get("model")).get("model_name")),
        format=NAME,
        path=str(path),
        task=_task(messages, config),
        steps=steps,
        submission=as_str(info.get("submission")) or as_str(exit_extra.get("submission")),
        exit_status=as_str(info.get("exit_status")) or as_str(exit_extra.get("exit_status")),
        totals=totals,
    )


def read(path: Path) -> Trajectory:
    """Parse a mini-swe-agent `.traj.json` (plain or gzip) into its steps."""
    path = Path(path)
    with malformed(path, "mini-swe-agent trajectory"):
        return _parse(path, load_json(path))
