"""OpenHands SDK conversations (OpenHands 1.x: the CLI, the agent server, the SDK's benchmarks).

Source of truth: `openhands-sdk` (OpenHands/software-agent-sdk), `conversation/persistence_const.py`
and `conversation/event_store.py`: a conversation persisted under `persistence_dir` is a folder
`<conversation id>/` with `base_state.json` (the state: `agent.llm.model`, `execution_status`,
`stats.usage_to_metrics{<usage id>: {accumulated_cost, accumulated_token_usage,
token_usages[]{response_id, prompt_tokens, completion_tokens}}}`) and `events/`, one file per
event named `event-<index, 5+ digits>-<event id>.json` (the OpenHands CLI keeps them under
`~/.openhands/conversations/`). Each event is the pydantic dump of an `event/` class, told apart
by `kind`: `SystemPromptEvent`, `MessageEvent{source, llm_message{role, content[]}}`,
`ActionEvent{thought[], action{..., kind}, tool_name, tool_call{arguments}, llm_response_id}`,
`ObservationEvent{observation{content[], is_error, ...}, action_id, tool_call_id}`,
`AgentErrorEvent{error, tool_call_id}`, `UserRejectObservation{rejection_reason, action_id}`,
`ConversationStateUpdateEvent{key, value}`, `Condensation`, ... The same events as a JSONL file
(one event per line, as exported) are read too.

Steps (monitor.formats.openhands_sdk_steps, shared with serving.hooks.openhands, which scores
the same steps live): a call paired with its answer, agent messages as prose, condensations as
compactions; user messages (the first is the task), the system prompt and state updates are not
steps. A call not answered yet is a step with no observation (a watch holds it back until its
answer is written). Only the branch the conversation is on is read (the events from the newest
back to the root by `parent_id`), not a branch it left. Tokens: each call's usage from
`base_state.json`, else estimated.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import as_dict, as_str, head_records, malformed
from monitor.formats._layout import place_file, run_id
from monitor.formats.openhands_sdk_steps import Steps, usage
from monitor.textio import load_json, load_jsonl
from monitor.types import Totals, Trajectory

NAME = "openhands-sdk"

_EVENT_FILE = re.compile(r"^event-(\d{5,})-[0-9a-fA-F-]{8,}\.json$")
_KINDS = {
    "SystemPromptEvent",
    "MessageEvent",
    "ActionEvent",
    "ObservationEvent",
    "AgentErrorEvent",
    "UserRejectObservation",
    "ConversationStateUpdateEvent",
    "Condensation",
    "CondensationRequest",
    "PauseEvent",
}


def _event_files(folder: Path) -> list[Path]:
    """`folder`'s event files in index order (`folder` is a conversation or its `events/`)."""
    events = folder / "events" if (folder / "events").is_dir() else folder
    try:
        names = os.listdir(events)
    except OSError:
        return []
    found = [(int(m.group(1)), n) for n in names if (m := _EVENT_FILE.match(n))]
    return [events / n for _, n in sorted(found)]


def sniff(path: Path, head: bytes) -> bool:
    """A folder: a conversation (`events/event-*.json`, `base_state.json`) or its `events/`.
    A file: JSONL whose first record is an SDK event (a known `kind`, and a `source`)."""
    if head:
        recs = head_records(head, limit=1)
        return bool(recs) and as_str(recs[0].get("kind")) in _KINDS and "source" in recs[0]
    path = Path(path)
    if not path.is_dir():
        return False
    return bool(_event_files(path)) and (
        (path / "base_state.json").is_file() or path.name == "events" or (path / "events").is_dir()
    )


def _events(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """The events, the persisted state ({} without one) and the conversation's folder."""
    if not path.is_dir():
        with malformed(path, "OpenHands SDK events (JSONL)"):
            events = [e for e in load_jsonl(path) if isinstance(e, dict)]
        return events, {}, path
    files = _event_files(path)
    if not files:
        raise TranscriptError(path, "no OpenHands event files (events/event-*.json) in this folder")
    events = []
    for f in files:
        with malformed(f, "OpenHands SDK event"):
            ev = load_json(f)
        if isinstance(ev, dict):
            events.append(ev)
    folder = path.parent if path.name == "events" and not (path / "events").is_dir() else path
    state: dict[str, Any] = {}
    if (folder / "base_state.json").is_file():
        try:  # rewritten while the run goes on: a half-written state only loses the usage
            state = as_dict(load_json(folder / "base_state.json"))
        except TranscriptError:
            state = {}
    return events, state, folder


def _branch(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the branch the conversation is on: from the root to the newest event by
    `parent_id` (an SDK conversation is a tree: a branch left by `navigate_to` stays on disk).
    An event with no `parent_id` (older SDKs) follows the one before it; "__root__" is a root."""
    if not any(e.get("parent_id") for e in events):
        return events
    index = {as_str(e.get("id")): i for i, e in enumerate(events)}
    chain: list[dict[str, Any]] = []
    i: int | None = len(events) - 1
    while i is not None and len(chain) <= len(events):  # a cycle stops at the length
        ev = events[i]
        chain.append(ev)
        parent = ev.get("parent_id")
        if parent == "__root__":
            i = None
        elif parent:
            i = index.get(as_str(parent))  # a parent not on disk ends the branch there
        else:
            i = i - 1 if i > 0 else None
    return chain[::-1]


def read(path: Path) -> Trajectory:
    """Parse a persisted OpenHands SDK conversation (its folder, its `events/`, or a JSONL)."""
    path = Path(path)
    events, state, folder = _events(path)
    build = Steps()
    for ev in _branch(events):
        build.add(ev)
    if not build.task and not build.steps:
        raise TranscriptError(path, "no OpenHands SDK events (no user message, no action)")
    calls, tokens_in, tokens_out, cost = usage(state)
    for step in build.steps:
        build.tokens(step, calls)
    instance_id = folder.stem if not path.is_dir() else folder.name
    source, run = place_file(folder / "base_state.json" if path.is_dir() else path, instance_id)
    last = build.steps[-1] if build.steps else None
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="openhands",
        source=source,
        run=run,
        model=as_str(as_dict(as_dict(state.get("agent")).get("llm")).get("model")),
        format=NAME,
        path=str(path),
        task=build.task,
        steps=build.steps,
        exit_status=as_str(state.get("execution_status"))
        or build.status
        or ("finish" if last is not None and last.kind == "submit" else ""),
        totals=Totals(
            tokens_in=tokens_in or None,
            tokens_out=tokens_out or None,
            cost_usd=cost or None,
            api_calls=len(calls) or None,
        ),
    )
