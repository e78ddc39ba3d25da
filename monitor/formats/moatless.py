"""Moatless Tools trajectories (`evaluations/<run>/trajs/<instance>.json`), both schemas.

Source of truth: aorwall/moatless-tools, `moatless/loop.py` (AgenticLoop: `trajectory.to_dict()`)
and `moatless/trajectory.py`, as written to `evaluations/<run>/trajs/` by the benchmark scripts.

- 2024-06-09 (`{"name": "moatless", input{problem_statement}, steps[]{name, actions[]{name,
  input, output}, completion_cost}, output, info{instance_id, submission, total_cost, error?}}`):
  a step is a loop state (`SearchLoop_Searching`, `CodeLoop_Pending`, `CodeLoop_CodeChange`, ...)
  and each action is a function call (`search`, `identify`, `request_for_change`,
  `search_replace`, `finish`, `reject`) with its input and output.
- AgenticLoop (2024-06-17 on: `{"name": "AgenticLoop", initial_message, transitions[]{name,
  state{model, ...}, actions[]{action, output, completion_cost, input_tokens?, output_tokens?}},
  info{instance_id, submission, total_cost, status?, error?}}`): a transition is a state
  (SearchCode, IdentifyCode, DecideRelevance, PlanToCode, ClarifyCodeChange, EditCode, then
  Finished / Rejected) and each action is one model call made in that state.

Steps: one per action (= one model call), in order. Step.role is the state's name, so the
monitor sees the agent's phase ("### step 3 [PlanToCode] ..."); Step.tool is the function name
(2024-06-09) or the kind of action the state takes (`search`, `identify`, `decide`, `plan`,
`clarify`, `edit`; a plan that finishes or rejects is `finish` / `reject`, kind "submit" /
"message"). The thought is the action's `thoughts` / `scratch_pad` / `reasoning`. States without
actions (Finished, Rejected) add no step; their name is the exit status.

is_error: an action whose output is null although the run went on in that state (Moatless
retried the call after it failed validation), or whose output lists `errors` /
`verification_errors` (an edit that did not apply or broke the code).

Tokens: the AgenticLoop runs of claude-3.5-sonnet record `input_tokens` / `output_tokens` per
action: used as is (`tokens_estimated=False`). The others record only the dollar cost per call:
completion tokens are estimated from the characters of the model's answer, and prompt tokens
from what is left of the call's cost at the model's list price (`monitor.ledger.PRICES`); a
model without a known price falls back to the characters the transcript shows. Both estimates
are marked `tokens_estimated=True`.
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
    compact_json,
    file_stem,
    malformed,
)
from monitor.formats._layout import place_file, run_id
from monitor.ledger import CHARS_PER_TOKEN, price_of
from monitor.textio import load_json
from monitor.types import Step, Totals, Trajectory

NAME = "moatless"

_HEAD = re.compile(rb'^\s*\{\s*"name"\s*:\s*"(?:moatless|AgenticLoop)"')
_THOUGHT_KEYS = ("thoughts", "scratch_pad", "reasoning")
_STATE_TOOL = {
    "SearchCode": "search",
    "IdentifyCode": "identify",
    "DecideRelevance": "decide",
    "PlanToCode": "plan",
    "ClarifyCodeChange": "clarify",
    "EditCode": "edit",
}
_MAX_TOKENS = 1e12  # a damaged cost (1e308 dollars) must not overflow the ledger
_OUTPUT_KEYS = ("message", "response", "instructions", "diff")
# Run names of the 2024-06-09 files, which do not record their model: name -> model.
_MODEL_IN_NAME = (("gpt4o", "gpt-4o-2024-05-13"), ("gpt-4o", "gpt-4o-2024-05-13"))


def sniff(path: Path, head: bytes) -> bool:
    """True for a Moatless trajectory: `"name": "moatless"` / `"AgenticLoop"` first, or a JSON
    object with `initial_message` and `transitions`."""
    if _HEAD.match(head):
        return True
    return (
        head.lstrip().startswith(b"{") and b'"transitions"' in head and b'"initial_message"' in head
    )


def _split_thought(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    thought = next((as_str(args[k]) for k in _THOUGHT_KEYS if as_str(args.get(k))), "")
    rest = {k: v for k, v in args.items() if k not in _THOUGHT_KEYS}
    return thought, rest


def _plan_tool(args: dict[str, Any]) -> str:
    """PlanToCode's choice: finish, reject, or a change request (claude: `action` names it)."""
    inner = args.get("action")
    choice = as_str(inner) or ""
    fields = as_dict(inner) if isinstance(inner, dict) else args
    if choice == "finish" or "finish" in fields:
        return "finish"
    if choice == "reject" or "reject" in fields:
        return "reject"
    if isinstance(inner, dict) and not {"file_path", "span_id"} & inner.keys():
        # gpt-4o's finish is often a bare `{"message": ...}`: a change request names its file
        # and span. (Told from the call itself, not from the transition that follows it, so a
        # run read while it goes on reads the step as it will read when done.)
        return "finish"
    return "plan"


def _observation(output: Any) -> str:
    """The output as text: its message / diff / instructions, else compact JSON."""
    out = as_dict(output)
    if not out:
        return "" if output is None or isinstance(output, dict) else compact_json(output)
    parts = [as_str(out.get(k)) for k in _OUTPUT_KEYS if as_str(out.get(k))]
    spans = as_list(out.get("ranked_spans")) or as_list(out.get("file_context"))
    if spans:
        files = []
        for s in spans:
            d = as_dict(s)
            file = as_str(d.get("file_path"))
            span = as_str(d.get("span_id")) or ",".join(
                as_str(as_dict(x).get("span_id")) for x in as_list(d.get("spans"))
            )
            files.append(f"{file}:{span}" if span else file)
        parts.append(f"{len(spans)} spans: " + " ".join(files))
    if as_str(out.get("error")):  # search_replace (2024-06-09): why the edit was refused
        parts.append("error: " + as_str(out.get("error")))
    for key in ("errors", "verification_errors"):
        errors = as_list(out.get(key))
        if errors:
            parts.append(f"{key}: " + compact_json(errors))
    return "\n".join(parts) if parts else compact_json(out)


# What the loop answers a call it refused (a span or file the request may not name, arguments
# that did not validate): the call failed though the output has no `errors` list.
_REFUSED = re.compile(
    r"^(Span not found:|The function call is invalid\.|File \S+ is not found in the file context)"
)


def _is_error(output: Any, retried: bool) -> bool:
    out = as_dict(output)
    if output is None:
        return retried
    if (
        as_list(out.get("errors"))
        or as_list(out.get("verification_errors"))
        or as_str(out.get("error"))
    ):
        return True
    return any(_REFUSED.match(as_str(out.get(k))) for k in ("message", "response"))


def _step(state: str, tool: str, args: dict[str, Any], output: Any, retried: bool) -> Step:
    thought, rest = _split_thought(args)
    step = Step(index=0, tool=tool, action=action_text(tool, rest), args=rest, thought=thought)
    step.role = state
    step.observation = _observation(output)
    step.is_error = _is_error(output, retried)
    if tool == "finish":
        step.kind = "submit"
    elif tool == "reject":
        step.kind = "message"
    return step


def _old_steps(data: dict[str, Any]) -> list[tuple[Step, float | None]]:
    """2024-06-09 schema: (step, that call's share of the state's cost)."""
    out = []
    for state in as_list(data.get("steps")):
        s = as_dict(state)
        actions = [as_dict(a) for a in as_list(s.get("actions"))]
        cost = as_float(s.get("completion_cost"))
        share = cost / len(actions) if cost is not None and actions else None
        for i, a in enumerate(actions):
            tool = as_str(a.get("name")) or "action"
            retried = i < len(actions) - 1
            step = _step(
                as_str(s.get("name")), tool, as_dict(a.get("input")), a.get("output"), retried
            )
            out.append((step, share))
    return out


def _loop_steps(data: dict[str, Any]) -> list[tuple[Step, float | None]]:
    """AgenticLoop schema: (step, cost of its call), with recorded tokens when present."""
    out = []
    for trans in as_list(data.get("transitions")):
        t = as_dict(trans)
        state = as_str(t.get("name"))
        actions = [as_dict(a) for a in as_list(t.get("actions"))]
        for i, a in enumerate(actions):
            args = as_dict(a.get("action"))
            tool = _STATE_TOOL.get(state, state.lower() or "action")
            retried = i < len(actions) - 1
            if state == "PlanToCode":
                tool = _plan_tool(args)
            refused = as_str(a.get("retry_message")) if a.get("output") is None else ""
            # a call the loop refused: its answer is the feedback sent back to the model
            output = {"message": refused} if refused else a.get("output")
            step = _step(state, tool, args, output, retried)
            step.is_error = step.is_error or bool(refused)
            if "input_tokens" in a or "output_tokens" in a:
                step.tokens_in = as_int(a.get("input_tokens"))
                step.tokens_out = as_int(a.get("output_tokens"))
                step.tokens_estimated = False
            out.append((step, as_float(a.get("completion_cost"))))
    return out


def _model(data: dict[str, Any]) -> str:
    for trans in as_list(data.get("transitions")):
        if as_list(as_dict(trans).get("actions")):
            model = as_str(as_dict(as_dict(trans).get("state")).get("model"))
            if model:
                return model
    name = as_str(as_dict(data.get("info")).get("evaluation_name")).lower()
    return next((model for key, model in _MODEL_IN_NAME if key in name), "")


def _estimate_tokens(steps: list[tuple[Step, float | None]], model: str) -> None:
    """Fill tokens of steps without recorded usage from their cost at the model's price."""
    price = price_of(model)
    for step, cost in steps:
        if not step.tokens_estimated:
            continue
        answer = len(step.thought) + len(step.action)
        step.tokens_out = round(answer / CHARS_PER_TOKEN)
        if price is not None and cost is not None:
            per_in, per_out = price
            left = cost - step.tokens_out * per_out / 1e6
            step.tokens_in = int(min(max(left * 1e6 / per_in, 0.0), _MAX_TOKENS))
        else:
            step.tokens_in = round(len(step.observation) / CHARS_PER_TOKEN)


def _parse(path: Path, data: Any) -> Trajectory:
    if not isinstance(data, dict):
        raise TranscriptError(path, "not a Moatless trajectory (expected a JSON object)")
    agentic = isinstance(data.get("transitions"), list)
    if not agentic and not isinstance(data.get("steps"), list):
        raise TranscriptError(path, "not a Moatless trajectory (no `steps` or `transitions` list)")
    info = as_dict(data.get("info"))
    instance_id = as_str(info.get("instance_id")) or file_stem(path)
    pairs = _loop_steps(data) if agentic else _old_steps(data)
    model = _model(data)
    _estimate_tokens(pairs, model)
    steps = []
    for i, (step, cost) in enumerate(pairs):
        step.index, step.cost_usd = i, cost
        steps.append(step)
    if agentic:
        task = as_str(data.get("initial_message"))
        last = next((as_str(as_dict(t).get("name")) for t in reversed(data["transitions"])), "")
        exit_status = as_str(info.get("status")) or last
    else:
        task = as_str(as_dict(data.get("input")).get("problem_statement"))
        exit_status = steps[-1].tool if steps else ""
    error_lines = as_str(info.get("error")).strip().splitlines()
    if error_lines:  # a traceback: its last line says why the loop stopped
        exit_status = "error: " + error_lines[-1][:200]
    source, run = place_file(path, instance_id)
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="moatless",
        source=source,
        run=run,
        model=model,
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        submission=as_str(info.get("submission")),
        exit_status=exit_status,
        totals=Totals(
            tokens_in=sum(s.tokens_in for s in steps),
            tokens_out=sum(s.tokens_out for s in steps),
            cost_usd=as_float(info.get("total_cost")),
            api_calls=len(steps),
            wall_seconds=as_float(info.get("duration")),
        ),
    )


def read(path: Path) -> Trajectory:
    """Parse a Moatless Tools trajectory (either schema, plain or gzip) into its steps."""
    path = Path(path)
    with malformed(path, "Moatless trajectory"):
        return _parse(path, load_json(path))
