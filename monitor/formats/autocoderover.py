"""AutoCodeRover task directories (`results/<run>/<bucket>/<instance>_<timestamp>/`).

Source of truth: nus-apr/auto-code-rover (2024-04), `app/inference.py` (conversation rounds,
`Result of search_*(...)` tool results, "The search API calls seem not valid"),
`app/api/agent_write_patch.py` ("Write a patch for the issue", "Your edit could not be applied",
"Extracted a patch"), `app/log.py` / `app/main.py` (`cost.json`, `tool_call_sequence.json`,
`extracted_patch_N.diff`, `problem_statement.txt`); `<bucket>` is ACR's patch status
(applicable_patch, raw_patch_but_unmatched, ...).

The directory holds OpenAI chat message lists: `debug_agent_write_patch_N.json` (the last N is
the superset: the search rounds and the patch writing) and `conversation_round_N.json` (search
rounds only; used when no debug file exists).

Steps: one per assistant message (one API call each). Observation = the user messages that follow
it up to the next assistant message.
- `Result of search_x(args):` blocks -> kind "action", tool = the first search API, action = the
  calls joined by "; ". is_error when any of its calls failed: `call_ok` of the matching entry of
  `tool_call_sequence.json` (matched in order by name), else "Could not find" in the result.
- "The search API calls seem not valid" -> kind "format_error", is_error True.
- Patch writing (the answer to "Write a patch for the issue" and its retries) -> tool
  "write_patch"; "Your edit could not be applied" / "did not resolve" / "not precise" feedback ->
  is_error True; a patch that was extracted or resolved the issue -> kind "submit".
- An answer naming bug locations that ACR then looked up ("Here are the code in buggy
  locations") -> kind "action", tool "bug_locations".
- Other answers (analysis) -> kind "message". Prompts for the next call ("Let's analyze
  collected context first", ...) are not part of any observation.
Tokens: `cost.json` totals only; per step estimated from the growing context and scaled
(monitor.ledger). `exit_status` is the bucket name.
"""

from __future__ import annotations

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
from monitor.formats._layout import place_task_dir, run_id
from monitor.ledger import fill_estimates
from monitor.textio import between, load_json, read_text, strip_gz
from monitor.types import Step, Totals, Trajectory

NAME = "autocoderover"

_RESULT = re.compile(r"^Result of (\w+)\((.*)\):\s*$", re.M)
_TASK_DIR = re.compile(r"^(.+)_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}$")
_NUMBERED = re.compile(r"_(\d+)\.\w+(?:\.gz)?$")
_INVALID_CALLS = "The search API calls seem not valid"
_WRITE_PATCH = "Write a patch for the issue"
# Prompts that ask for the next call; they are not what the last call got back.
_PROMPTS = (
    _WRITE_PATCH,
    "Let's analyze collected context first",
    "Based on your analysis, answer below questions",
    "Based on the files, classes, methods, code statements from the issue",
)
_LOCATIONS = "Here are the code in buggy locations"
_IMPRECISE = "The buggy locations is not precise"
_PATCH_FAILED = (
    "Your edit could not be applied",
    "did not resolve the issue",
    _IMPRECISE,
)
_PATCH_OK = ("Extracted a patch", "Written a patch that resolves the issue")


def _files(path: Path, prefix: str) -> list[Path]:
    """`prefix_N.*` files of the directory, by N."""
    found = []
    for p in path.iterdir():
        if p.name.startswith(prefix):
            m = _NUMBERED.search(p.name)
            if m:
                found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def _member(path: Path, name: str) -> Path | None:
    for candidate in (path / name, path / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def sniff(path: Path, head: bytes) -> bool:
    """True for a directory holding ACR's cost.json and a conversation or debug file."""
    if head or not Path(path).is_dir():
        return False
    try:
        names = {strip_gz(p.name) for p in Path(path).iterdir()}
    except OSError:
        return False
    chats = any(n.startswith(("debug_agent_write_patch_", "conversation_round_")) for n in names)
    return chats and ("cost.json" in names or "tool_call_sequence.json" in names)


def _calls(path: Path) -> list[dict[str, Any]]:
    seq = _member(path, "tool_call_sequence.json")
    if seq is None:
        return []
    return [as_dict(c) for c in as_list(load_json(seq))]


def _steps(path: Path, messages: list[dict[str, Any]]) -> tuple[list[Step], list[int], list[int]]:
    calls = [c for c in _calls(path) if as_str(c.get("func_name")) != "write_patch"]
    cursor = 0  # next unmatched entry of tool_call_sequence.json
    steps: list[Step] = []
    ctx_chars: list[int] = []
    out_chars: list[int] = []
    seen = 0
    writing = False  # inside the patch-writing phase
    for i, msg in enumerate(messages):
        text = content_text(msg.get("content"))
        if msg.get("role") != "assistant":
            writing = writing or text.startswith(_WRITE_PATCH)
            seen += len(text)
            continue
        obs_msgs = []
        for nxt in messages[i + 1 :]:
            if nxt.get("role") == "assistant":
                break
            obs_msgs.append(nxt)
        # Prompts for the next call ("Let's analyze...", "Write a patch...") are not results.
        observation = "\n\n".join(
            t
            for t in (content_text(m.get("content")) for m in obs_msgs)
            if not t.startswith(_PROMPTS)
        )
        step = Step(index=len(steps), thought=text.strip(), kind="message")
        results = list(_RESULT.finditer(observation))
        if writing:
            step.tool, step.action, step.kind = "write_patch", "write_patch()", "action"
            if any(m in observation for m in _PATCH_FAILED):
                step.is_error = True
            elif any(m in observation for m in _PATCH_OK):
                step.kind = "submit"
        elif results:
            step.kind, step.tool = "action", results[0].group(1)
            step.action = "; ".join(f"{m.group(1)}({m.group(2)})" for m in results)
            chunks = re.split(r"^Result of \w+\(.*\):\s*$", observation, flags=re.M)[1:]
            failed = False
            for m, chunk in zip(results, chunks, strict=False):
                call = calls[cursor] if cursor < len(calls) else {}
                if as_str(call.get("func_name")) == m.group(1):
                    cursor += 1
                    ok = call.get("call_ok")
                    failed |= ok is False or (ok is None and "Could not find" in chunk)
                else:
                    failed |= "Could not find" in chunk
            step.is_error = failed
            step.args = {"calls": [f"{m.group(1)}({m.group(2)})" for m in results]}
        elif observation.startswith(_LOCATIONS):
            step.kind, step.tool, step.action = "action", "bug_locations", "bug_locations()"
            step.is_error = "Could not find" in observation
        elif observation.startswith(_IMPRECISE):
            # the bug locations named could not be found: the answer that names them failed
            step.kind, step.tool, step.action = "action", "bug_locations", "bug_locations()"
            step.is_error = True
        elif observation.startswith(_INVALID_CALLS):
            step.kind, step.is_error = "format_error", True
        step.observation = observation
        step.raw = [msg, *obs_msgs]
        steps.append(step)
        ctx_chars.append(seen)
        out_chars.append(len(text))
        seen += len(text)
    return steps, ctx_chars, out_chars


def _parse(path: Path) -> Trajectory:
    debug = _files(path, "debug_agent_write_patch_")
    rounds = _files(path, "conversation_round_")
    chats = debug or rounds
    if not chats:
        raise TranscriptError(
            path, "no debug_agent_write_patch_N.json or conversation_round_N.json"
        )
    chat = chats[-1]
    messages = load_json(chat)
    if not isinstance(messages, list):
        raise TranscriptError(chat, "not a chat message list")
    messages = [m for m in messages if isinstance(m, dict)]
    cost_file = _member(path, "cost.json")
    cost = as_dict(load_json(cost_file)) if cost_file else {}
    steps, ctx, out = _steps(path, messages)

    def total(key: str) -> int | None:
        v = cost.get(key)
        return as_int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    total_in, total_out = total("total_input_tokens"), total("total_output_tokens")
    fill_estimates(steps, ctx, out, total_in=total_in, total_out=total_out)

    m = _TASK_DIR.match(path.name)
    instance_id = m.group(1) if m else path.name
    statement = _member(path, "problem_statement.txt")
    task = read_text(statement).strip() if statement else ""
    if not task:
        first = next(
            (content_text(x.get("content")) for x in messages if x.get("role") == "user"), ""
        )
        found = between(first, "<issue>", "</issue>")  # a regex `(.*?)` is quadratic here
        task = (first if found is None else found).strip()
    patches = _files(path, "extracted_patch_")
    source, run = place_task_dir(path)
    start, end = as_float(cost.get("start_epoch")), as_float(cost.get("end_epoch"))
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="autocoderover",
        source=source,
        run=run,
        model=as_str(cost.get("model")),
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        submission=read_text(patches[-1]) if patches else "",
        exit_status=path.parent.name,
        totals=Totals(
            tokens_in=total_in,
            tokens_out=total_out,
            cost_usd=as_float(cost.get("total_cost")),
            wall_seconds=as_float(cost.get("elapsed_seconds"))
            or (end - start if start is not None and end is not None else None),
        ),
    )


def read(path: Path) -> Trajectory:
    """Parse an AutoCodeRover task directory (files plain or gzip) into its API-call steps."""
    path = Path(path)
    if not path.is_dir():
        raise TranscriptError(path, "an AutoCodeRover run is a task directory, not a file")
    try:
        with malformed(path, "AutoCodeRover task directory"):
            return _parse(path)
    except OSError as e:
        raise TranscriptError(path, f"cannot read: {e}") from e
