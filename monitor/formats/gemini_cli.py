"""Gemini CLI sessions: the file Gemini CLI records every session to
(`~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<id>.json`, `.jsonl` since v0.39).

Source of truth: google-gemini/gemini-cli `packages/core/src/services/chatRecordingTypes.ts` and
`chatRecordingService.ts` (ConversationRecord {sessionId, projectHash, startTime, lastUpdated,
messages}; MessageRecord {id, timestamp, type: user | gemini | info | error | warning, content,
thoughts[{subject, description}], tokens{input, output, cached, thoughts, tool, total}, model,
toolCalls[{id, name, args, result, status}]}); `core/geminiChat.ts` (a call's `result` is the
Gemini `functionResponse` parts sent back to the model); `tools/shell.ts` (`Exit Code: N` in a
shell command's output). Up to v0.38 the file is one JSON object rewritten in place at every
update; since v0.39 it is JSONL, appended: a header line, message lines (a message is appended
again whenever it changes: the last copy holds, at the first one's place), `{"$set": {...}}`
updates and `{"$rewindTo": id}` (that message and the ones after it dropped). A `$set` with
`messages` is a checkpoint of the history the model sees (after a compression, output masking,
a restore): the CLI replaces its list with it; here the messages already read stay as written
(not masked), the ones it leaves out are kept and a new one is added, since the run is what
happened, not what the model still sees (a live watch would otherwise lose the run's steps at a
compression). Synthetic model messages (no `model`, no calls: a compression's summary) are not
steps.

Steps: each tool call of a `gemini` message, with its result (embedded in the call) as the
observation; a `gemini` message without calls is prose. The message's text and thoughts are the
thought of its first step, its recorded tokens that step's (the others of the message get 0; no
usage, or all zeros, is estimated). An error: the call's status `error` / `cancelled`, an `error`
in its response, or a non-zero `Exit Code` (a shell command that failed is still `success`). The
task is the first user message a person wrote (not a slash command, the injected
`<session_context>`, or tool responses recorded as a user message, v0.44+). The run id is the
session id; a file in Gemini's own `chats/` folder has source "gemini-cli".
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import (
    NO_OUTPUT,
    action_text,
    as_dict,
    as_int,
    as_list,
    as_str,
    content_text,
    file_stem,
    head_records,
    malformed,
    parse_time,
)
from monitor.ledger import StepLedger, charge
from monitor.textio import read_text
from monitor.types import Step, Totals, Trajectory

NAME = "gemini-cli"

_LEGACY = re.compile(rb'^\s*\{\s*"sessionId"\s*:\s*"[^"]*"\s*,\s*"projectHash"')
_EXIT = re.compile(r"^Exit Code: (-?\d+)", re.M)
_SIGNAL = re.compile(r"^Signal: (\d+)", re.M)
_NOT_TASK = ("/", "?", "<session_context>", "<hook_context>")
_SHELL = {"run_shell_command"}


def sniff(path: Path, head: bytes) -> bool:
    """The legacy JSON (`{"sessionId": ..., "projectHash": ...`) or JSONL whose first line is the
    header (`sessionId` and `projectHash`, no `type`)."""
    if _LEGACY.match(head):
        return True
    recs = head_records(head, limit=1)
    return (
        bool(recs) and "projectHash" in recs[0] and "sessionId" in recs[0] and "type" not in recs[0]
    )


def _records(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the messages, from either encoding (JSONL replayed as the CLI does)."""
    text = read_text(path)
    if not text.strip():
        raise TranscriptError(path, "empty file")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
        return whole, [m for m in whole["messages"] if isinstance(m, dict)]
    header: dict[str, Any] = {}
    order: list[str] = []
    latest: dict[str, dict[str, Any]] = {}

    def upsert(rec: dict[str, Any]) -> None:
        if rec["id"] not in latest:
            order.append(rec["id"])
        latest[rec["id"]] = rec

    for line in text.split("\n"):
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            continue  # a torn or bad line: the CLI's own loader skips it too
        if not isinstance(rec, dict):
            continue
        if isinstance(rec.get("$rewindTo"), str):
            at = rec["$rewindTo"]
            cut = order.index(at) if at in order else 0
            for gone in order[cut:]:
                latest.pop(gone, None)
            del order[cut:]
        elif isinstance(rec.get("id"), str) and "type" in rec:
            upsert(rec)
        elif isinstance(rec.get("$set"), dict):
            update = rec["$set"]
            # a checkpoint (compression, output masking, a restore) rewrites the history the
            # model sees; the run is what happened: its messages stay as they were written
            # (not masked), the ones it leaves out are kept, a new one is added
            for m in as_list(update.get("messages")):
                if isinstance(m, dict) and isinstance(m.get("id"), str) and "type" in m:
                    if m["id"] not in latest:
                        upsert(m)
            header.update({k: v for k, v in update.items() if k != "messages"})
        elif "sessionId" in rec:
            header = {**rec, **header}
    return header, [latest[k] for k in order if k in latest]


def _parts(content: Any) -> list[Any]:
    return content if isinstance(content, list) else [content]


def _typed(content: Any) -> str:
    """What a person typed: the text parts of a user message ("" for tool responses only)."""
    return "\n".join(
        p if isinstance(p, str) else as_str(as_dict(p).get("text")) for p in _parts(content)
    ).strip()


def _result(call: dict[str, Any]) -> tuple[str, bool]:
    """A call's output as the model got it, and whether its response is an error."""
    texts, error = [], False
    result = call.get("result")
    for part in result if isinstance(result, list) else [result] if result else []:
        fr = as_dict(as_dict(part).get("functionResponse"))
        if not fr:
            texts.append(content_text([part]))  # a text part, or a plain string
            continue
        if fr.get("id") not in (None, call.get("id")):
            continue  # a sibling call's response (kept with it after output masking)
        response = as_dict(fr.get("response"))
        if "error" in response:
            error = True
            texts.append(as_str(response.get("error")))
        out = response.get("output")
        texts.append(out if isinstance(out, str) else json.dumps(out) if out is not None else "")
    return "\n".join(t for t in texts if t), error


def _call_step(call: dict[str, Any], thought: str, timestamp: float | None) -> Step:
    name = as_str(call.get("name"))
    args = as_dict(call.get("args"))
    text, error = _result(call)
    failed = as_str(call.get("status")) in ("error", "cancelled") or error
    if name in _SHELL:  # the CLI's own lines end the output: the last of each is its own
        exits, signals = _EXIT.findall(text), _SIGNAL.findall(text)
        failed |= bool(exits) and int(exits[-1]) != 0  # v0.27+ writes no line for 0
        failed |= bool(signals) and int(signals[-1]) != 0  # killed: `Exit Code: (none)`
    step = Step(index=0, tool=name, action=action_text(name, args), args=args or None)
    step.thought, step.timestamp, step.raw = thought, timestamp, call
    step.observation = text or as_str(call.get("status")) or NO_OUTPUT
    step.is_error = failed
    return step


def _thought(message: dict[str, Any]) -> str:
    notes = [
        ": ".join(t for t in (as_str(d.get("subject")), as_str(d.get("description")).strip()) if t)
        for d in map(as_dict, as_list(message.get("thoughts")))
    ]
    said = _typed(message.get("content"))  # a string, or parts (after a checkpoint)
    return "\n".join(t for t in [*notes, said] if t)


def _source(path: Path) -> str:
    """ "gemini-cli" in Gemini's own `chats/` folder (it names no source), else "" (the folder
    holding the file names it, as for other readers)."""
    return "gemini-cli" if Path(os.path.abspath(path)).parent.name == "chats" else ""


def read(path: Path) -> Trajectory:
    """Parse a Gemini CLI session file (legacy JSON or JSONL) into steps."""
    path = Path(path)
    with malformed(path, "Gemini CLI session"):
        header, messages = _records(path)
    if not header.get("sessionId") and not messages:
        raise TranscriptError(path, "no Gemini CLI session header or messages")
    ledger = StepLedger()
    task, model = "", ""
    for m in messages:
        kind, when = as_str(m.get("type")), parse_time(m.get("timestamp"))
        if kind == "gemini" and not m.get("model") and not m.get("toolCalls"):
            kind = "synthetic"  # the CLI's own (a compression summary): no model call
        if kind != "gemini":
            shown = m.get("displayContent") or m.get("content")  # what was typed, not expanded
            typed = _typed(shown) if kind == "user" else ""
            if typed and not task and not typed.startswith(_NOT_TASK):
                task = typed
            ledger.seen += len(typed or content_text(m.get("content")))
            continue
        model = as_str(m.get("model")) or model
        thought = _thought(m)
        calls = [c for c in as_list(m.get("toolCalls")) if isinstance(c, dict) and c.get("name")]
        made = [_call_step(c, thought if k == 0 else "", when) for k, c in enumerate(calls)]
        if not made:
            made = [Step(index=0, kind="message", thought=thought, timestamp=when, raw=m)]
        tokens = as_dict(m.get("tokens"))
        tin, tout = as_int(tokens.get("input")), as_int(tokens.get("output"))
        if tin or tout:  # all zeros (a genuine file has such a message): estimated
            charge(made, tin, tout)
        for step in made:
            ledger.append(step, len(step.thought) + len(step.action))
            ledger.seen += len(step.observation)
    steps = ledger.estimate()
    whole = bool(steps) and not any(s.tokens_estimated for s in steps)  # every call's usage
    return Trajectory(
        id=as_str(header.get("sessionId")) or file_stem(path),
        instance_id=file_stem(path),
        agent="gemini-cli",
        source=_source(path),
        model=model,
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        totals=Totals(
            tokens_in=sum(s.tokens_in for s in steps) if whole else None,
            tokens_out=sum(s.tokens_out for s in steps) if whole else None,
        ),
    )
