"""The steps of a Codex session rollout, line by line (monitor.formats.codex_rollout reads the
file; this module holds what a line means).

A step is one call the model made (`function_call`, `custom_tool_call`, `local_shell_call`,
`web_search_call`) with its output (joined by `call_id`: parallel calls interleave), or an
assistant `message` (prose). Reasoning summaries are the thought of the next step. Tokens: the
`token_count` event written after each model response (`info.last_token_usage`, else the growth
of `info.total_token_usage`) goes to the first step of that response (the others of it get 0,
as for parallel calls elsewhere; a response that made no step, a plan update, adds its usage
to the next one); steps no usage covers are estimated from characters.

Errors (Codex writes no success flag with an output; codex-rs `core/src/tools/mod.rs`,
`tools/events.rs`): a `shell` output is JSON `{"output", "metadata": {"exit_code"}}`, a
`shell_command` / `apply_patch` output starts `Exit code: N`, a unified-exec output says `Process
exited with code N`; a timeout, an execution error, a rejection by the user or a failed patch
verification have fixed prefixes; newer files add `exec_command_end{exit_code}`,
`patch_apply_end{success}` and `mcp_tool_call_end{result: {Err}}` events by the same call id.
"""

from __future__ import annotations

import json
import re
from typing import Any

from monitor.formats._fields import (
    NO_OUTPUT,
    action_text,
    as_dict,
    as_int,
    as_list,
    as_str,
    content_text,
    parse_time,
)
from monitor.ledger import StepLedger, charge
from monitor.types import Step

CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
# User messages Codex injects before the task: not the task.
CONTEXT = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<turn_aborted>",
    "<permissions instructions>",
)
_SKIP_TOOLS = {"update_plan"}
# The tools whose output starts with an exit-code header (`Exit code: N`, `Process exited with
# code N`): shell commands, unified exec, apply_patch.
_HEADED = {
    "shell",
    "shell_command",
    "exec_command",
    "write_stdin",
    "local_shell",
    "apply_patch",
}  # the plan tool: bookkeeping, as `todo_list` in `codex exec --json`
_CODE = re.compile(r"^(?:Exit code: |.*?Process exited with code )(-?\d+)", re.M)
_FAILED = (
    "command timed out after",
    "execution error:",
    "exec command rejected by user",
    "patch rejected by user",
    "apply_patch verification failed",
    "err:",
)


def _args(raw: Any) -> dict[str, Any]:
    """A call's arguments: `arguments` is a JSON string (a custom tool's `input` may be too)."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(as_str(raw) or "{}")
    except ValueError:
        return {"input": as_str(raw)}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _command(cmd: Any) -> Any:
    """`["bash", "-lc", "ls"]` -> "ls" (how Codex wraps a shell command), else as given."""
    parts = as_list(cmd)
    if len(parts) == 3 and parts[0] in ("bash", "zsh", "sh") and parts[1] in ("-lc", "-c"):
        return parts[2]
    return cmd


def call_step(item: dict[str, Any], thought: str, timestamp: float | None) -> Step | None:
    """The step a call item starts (None for the plan tool)."""
    kind = as_str(item.get("type"))
    name = as_str(item.get("name")) or ("shell" if kind == "local_shell_call" else "")
    if name in _SKIP_TOOLS:
        return None
    if kind == "local_shell_call":
        args = {"command": _command(as_dict(item.get("action")).get("command"))}
    elif kind == "custom_tool_call" and name == "apply_patch":
        args = {"input": as_str(item.get("input"))}
    else:
        args = _args(item.get("arguments") if kind == "function_call" else item.get("input"))
        if "command" in args:
            args = {**args, "command": _command(args["command"])}
    if name == "apply_patch":
        action = "apply_patch\n" + as_str(args.get("input"))
    else:
        action = action_text(name, args)
    return Step(index=0, tool=name, action=action, args=args, thought=thought, timestamp=timestamp)


def output_text(output: Any, tool: str = "") -> tuple[str, bool]:
    """An output's text and whether it reports a failure. The exit-code headers are read only
    for the tools that write them (shell commands, apply_patch) and only before `Output:`, so a
    file or a program's output that prints `Exit code: 1` is not an error."""
    if isinstance(output, str) and output.startswith("{"):
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "output" in parsed:  # the `shell` tool's JSON
            code = as_dict(parsed.get("metadata")).get("exit_code")
            failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
            return as_str(parsed.get("output")), failed
    if isinstance(output, dict):  # a content item, or {content, success} (forks)
        text = content_text(output.get("content")) or as_str(output.get("text"))
        return text, output.get("success") is False
    text = content_text(output)
    failed = text.startswith(_FAILED) or text.strip() == "aborted"  # a call its turn aborted
    if tool in _HEADED:
        header = text.split("\nOutput:", 1)[0][:1000]
        m = _CODE.search(header)
        failed = failed or (m is not None and int(m.group(1)) != 0)
    return text, failed


def end_failed(event: dict[str, Any]) -> bool:
    """Whether a newer file's `*_end` event says its call failed. Only the failure is taken from
    it: the output item by the same call id (written after it) is the observation, so a live
    step does not change once scored."""
    kind = as_str(event.get("type"))
    if kind == "exec_command_end":
        code = event.get("exit_code")
        bad_code = isinstance(code, int) and not isinstance(code, bool) and code != 0
        return bad_code or event.get("status") == "failed"
    if kind == "patch_apply_end":
        return event.get("success") is False or event.get("status") in ("failed", "declined")
    result = as_dict(event.get("result"))  # mcp_tool_call_end
    return "Err" in result or as_dict(result.get("Ok")).get("isError") is True


class Steps(StepLedger):
    """A rollout's steps, built one line at a time, with what the token estimates need."""

    def __init__(self) -> None:
        super().__init__()
        self.by_call: dict[str, Step] = {}
        self.thought: list[str] = []
        self.response: list[Step] = []  # steps of the model response no usage has covered yet
        self.totals: dict[str, Any] = {}  # the last `total_token_usage` read
        self.carry = (0, 0)  # usage of responses that made no step (the plan tool), for the next
        self.task = ""

    def item(self, item: dict[str, Any], timestamp: float | None) -> None:
        """Take a `response_item`."""
        kind = as_str(item.get("type"))
        if kind == "reasoning":
            summary = [as_str(as_dict(s).get("text")) for s in as_list(item.get("summary"))]
            self.thought.append("\n".join(t for t in summary if t))
        elif kind == "message":
            text = content_text(item.get("content"))
            if as_str(item.get("role")) == "assistant":
                step = Step(index=0, kind="message", thought=self._thought(text))
                step.timestamp, step.raw = timestamp, item
                self._add(step, len(text))
            else:
                if as_str(item.get("role")) == "user" and not text.lstrip().startswith(CONTEXT):
                    self.task = self.task or text
                self.seen += len(text)
        elif kind in CALLS:
            call = call_step(item, self._thought(""), timestamp)
            if call is not None:
                call.raw = item
                self._add(call, len(call.action) + len(call.thought))
                key = as_str(item.get("call_id")) or as_str(item.get("id"))
                if key:  # a call with no id cannot be paired: it stays unanswered
                    self.by_call[key] = call
        elif kind in OUTPUTS:
            key = as_str(item.get("call_id"))
            asked = self.by_call.get(key) if key else None
            text, failed = output_text(item.get("output"), asked.tool if asked else "")
            self.seen += len(text)
            if asked is not None:  # an `*_end` event before it may have said it failed
                asked.observation = text or NO_OUTPUT
                asked.is_error = asked.is_error or failed
        elif kind == "web_search_call":
            query = as_str(as_dict(item.get("action")).get("query")) or as_str(item.get("query"))
            step = Step(index=0, tool="web_search", action=f"web_search({query})")
            step.thought, step.timestamp, step.raw = self._thought(""), timestamp, item
            step.observation = as_str(item.get("status")) or "done"  # no output item follows
            self._add(step, len(step.action))
        elif kind in ("compaction", "compaction_summary", "context_compaction"):
            self.compaction("", timestamp)

    def compaction(self, summary: str, timestamp: float | None) -> None:
        """The context was compacted (a `compacted` line, a compaction item)."""
        step = Step(index=0, kind="compaction", action="compaction")
        step.observation, step.timestamp = summary or "compacted", timestamp
        self._add(step, 0, waits=False)  # the next response's usage is the next call's

    def usage(self, info: dict[str, Any]) -> None:
        """A `token_count` event's usage: the model response just read (`last_token_usage`,
        else what the running total grew by)."""
        last = as_dict(info.get("last_token_usage"))
        totals = as_dict(info.get("total_token_usage"))
        if totals and totals == self.totals:
            return  # repeated: nothing new was sampled
        if last:
            tin, tout = as_int(last.get("input_tokens")), as_int(last.get("output_tokens"))
        else:
            tin = as_int(totals.get("input_tokens")) - as_int(self.totals.get("input_tokens"))
            tout = as_int(totals.get("output_tokens")) - as_int(self.totals.get("output_tokens"))
        self.totals = totals or self.totals
        if tin <= 0 and tout <= 0:
            return  # nothing usable: the waiting steps keep waiting (else estimated)
        tin, tout = max(tin, 0) + self.carry[0], max(tout, 0) + self.carry[1]
        if not self.response:
            self.carry = (tin, tout)
            return
        self.carry = (0, 0)
        charge(self.response, tin, tout)
        self.response = []

    def _thought(self, text: str) -> str:
        parts = [*self.thought, text]
        self.thought = []
        return "\n".join(p for p in parts if p)

    def _add(self, step: Step, out: int, *, waits: bool = True) -> None:
        self.append(step, out)
        if waits:
            self.response.append(step)


def time_of(line: dict[str, Any]) -> float | None:
    """A rollout line's time."""
    return parse_time(line.get("timestamp"))
