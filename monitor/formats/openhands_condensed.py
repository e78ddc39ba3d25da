"""OpenHands call files whose history a condenser shortened: how to tell them, and where the run
goes on in them. Used by monitor.formats.openhands_completions to read a folder of call files
as one whole run.

What a condensed call sends (OpenHands `openhands/memory/view.py`, `conversation_memory.py` and
`memory/condenser/impl/*.py`): the system prompt, then the task (the first user message is put
back when the condenser dropped it), then what the condenser left of the history:
- LLMSummarizingCondenser / StructuredSummaryCondenser: a user message holding the summary (the
  summarizing LLM's own text; StructuredSummary's starts with `# State Summary`), then the
  latest steps;
- ObservationMaskingCondenser: a `<MASKED>` user message per observation older than its window
  (in function calling the call that observation answered is left out with it), then the
  window's steps; BrowserOutputCondenser: `Visited URL ...\\nContent omitted`;
- RecentEventsCondenser, AmortizedForgettingCondenser, ConversationWindowCondenser and the
  controller's own halving on a context-window error (v0.14 to mid 2025, on in SWE-bench
  evaluation too): the latest steps, with no mark at all;
- LLMAttentionCondenser: the steps an LLM picked as important, in order (not always the latest).

So a condensed call keeps a few first steps (`keep_first`) and then the run's latest steps, in
order. A rerun of the instance (a fresh attempt after a crash) starts again from its first step.
`continuation` tells them apart by the steps themselves; a mark in the file lets less evidence
do, and so does the conversation's session id where the files carry one (`Call`): another id is
another attempt whatever its steps.

What cannot be told: a condensed call that kept the run's latest step alone, with no mark (a
RecentEvents or AmortizedForgetting window of one step), or an LLMAttention pick without the
latest step, reads as another attempt; a rerun whose first steps repeat the crashed attempt's
last two steps reads as the same run (files logged for a LiteLLM proxy model carry the session
id, which settles both).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats._fields import as_dict, as_str, content_text
from monitor.types import Step, Trajectory

log = logging.getLogger(__name__)


@dataclass
class Call:
    """One agent call file as read: the run as that call saw it, whether a condenser marked its
    history, and the conversation's session id when the file carries one (OpenHands sends
    `extra_body.metadata.session_id`, a fresh uuid-based id per run, only to a LiteLLM proxy
    model, and logs it in `kwargs`; llm.py drops it for any other model)."""

    run: Trajectory
    marked: bool = False
    session: str = ""


Loader = Callable[[Path], "Call | None"]
"""Reads one call file; None for a call that is no agent step (a condenser's own)."""


def session_id(data: dict[str, Any]) -> str:
    """The session id a call file's `kwargs.extra_body.metadata` holds ("" without one)."""
    meta = as_dict(as_dict(as_dict(data.get("kwargs")).get("extra_body")).get("metadata"))
    return as_str(meta.get("session_id"))


_MASKED = "<MASKED>"  # ObservationMaskingCondenser
_SUMMARY_HEADS = (
    "# State Summary",  # StructuredSummaryCondenser: str(StateSummary)
    "USER_CONTEXT:",  # the form LLMSummarizingCondenser's prompt asks the summary to take
)
_CONDENSER_PROMPTS = (
    # the condensers' own LLM calls; they land in the agent's folder only when the condenser
    # shares the agent's LLM config with log_completions (the CLI's default condenser does)
    "You are maintaining a context-aware state summary",  # LLMSummarizing / StructuredSummary
    "You will be given a list of actions, observations, and thoughts",  # LLMAttention
)
TASK_DROPPED = "Please continue working on the task"
"""A condensed call whose kept history starts with the harness's reply to a message: OpenHands
keeps that user message in the task's place (conversation_memory `_ensure_initial_user_message`)."""


def is_condenser_call(messages: list[dict[str, Any]]) -> bool:
    """A condenser's own LLM call (a summary or an importance ranking), not an agent step."""
    if not messages or messages[0].get("role") == "system":
        return False
    text = content_text(messages[0].get("content")).lstrip()
    return text.startswith(_CONDENSER_PROMPTS)


def marked(messages: list[dict[str, Any]], task_index: int) -> bool:
    """A condenser's mark between the task and the first assistant turn: a `<MASKED>`
    observation, a browser output omitted, or a summary in one of the known forms."""
    for m in messages[task_index + 1 :]:
        if m.get("role") == "assistant":
            return False
        text = content_text(m.get("content")).strip()
        if text == _MASKED or text.startswith(_SUMMARY_HEADS) or text.endswith("Content omitted"):
            return True
    return False


def _key(step: Step) -> tuple[str, str, str]:
    # what two views of one step share: its call (the observation may be cut or masked)
    return (step.kind, step.tool, step.action)


def _found(old: list[Step], end: int, new: list[Step], q: int, marked: bool) -> bool:
    """new[: q + 1] is old[:end] condensed: its first steps are old's first (kept) steps and the
    rest are old's last steps up to old[end - 1], in order. A cut (steps left out) needs two
    latest steps found in order, or one and the condenser's mark: a rerun starts again from its
    own first step, and one step alike (`ls`, a test run) is too common to tell."""
    tail = 0
    while tail <= q and _key(new[q - tail]) == _key(old[end - 1 - tail]):
        tail += 1
    head = q + 1 - tail
    if any(_key(new[i]) != _key(old[i]) for i in range(head)):
        return False
    cut = end - (q + 1)
    return cut == 0 or tail >= 2 or (marked and tail >= 1)


def continuation(old: list[Step], new: list[Step], *, marked: bool = False) -> int | None:
    """Where `new` (a later call's steps) goes on from `old` (the run so far): an index `i`
    such that the run is now `old[:-1] + new[i:]` (old's last step taken again from `new`, which
    has its result). None: `new` is not this run (another attempt). `new` may hold old's steps
    whole (the history grew) or condensed; old's last step may be missing from it when it had
    no result (an invalid tool call, a condensation request: OpenHands never sends those back)."""
    ends = [len(old)]
    if old and not old[-1].observation:
        ends.append(len(old) - 1)
    for end in ends:
        if end == 0:
            return 0
        last = _key(old[end - 1])
        dropped = int(end < len(old))  # then the later call's own answer follows: a step after q
        for q in range(min(len(new) - dropped, end) - 1, -1, -1):
            if _key(new[q]) == last and _found(old, end, new, q, marked):
                return q + dropped
    return None


def join(run: Trajectory, call: Call, session: str = "") -> Trajectory:
    """`call` (a later call's view) joined onto `run` (whose calls had session id `session`):
    the run grown or condensed and gone on, or `call`'s run alone when it is another attempt
    (another session id; or another task, or `continuation` finds no place for it)."""
    new = call.run
    same_session = bool(session and call.session and session == call.session)
    if session and call.session and not same_session:
        return new
    same_task = not run.task or new.task == run.task or new.task.startswith(TASK_DROPPED)
    at = None
    if same_task or same_session:
        at = continuation(run.steps, new.steps, marked=call.marked or same_session)
    if at is None:
        return new
    steps = run.steps[:-1] + new.steps[at:]
    for i in range(len(run.steps) - 1, len(steps)):
        steps[i].index = i  # the call's own steps, renumbered in the run
    totals = replace(
        new.totals,
        tokens_in=sum(s.tokens_in for s in steps),
        tokens_out=sum(s.tokens_out for s in steps),
        api_calls=len(steps),
    )
    return replace(new, task=run.task or new.task, steps=steps, totals=totals)


_Mark = tuple[str, int, int]  # a call file's name, size and mtime: written once, never changed
_JOINED: OrderedDict[str, tuple[list[_Mark], Trajectory, str]] = OrderedDict()
_JOINED_MAX = 32  # folders whose joined run is kept (a watch re-reads its folder at every poll)
_LOCK = threading.Lock()


def _marks(files: list[Path]) -> list[_Mark]:
    out = []
    for p in files:
        st = p.stat()
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return out


def joined(folder: Path, files: list[Path], load: Loader) -> Trajectory:
    """The run the folder's call files (oldest first) make, each read by `load` and joined onto
    those before. The result is kept per folder, so a watch's next poll reads only the calls
    added since; a file that cannot be read is skipped unless it is the latest (it may be being
    written: the error is raised, and the next read tries it again)."""
    key = str(folder.resolve())
    marks = _marks(files)
    with _LOCK:
        done, run, session = _JOINED.get(key, ([], None, ""))
    if run is None or marks[: len(done)] != done:
        done, run, session = [], None, ""
    done = list(done)
    for path, mark in zip(files[len(done) :], marks[len(done) :], strict=True):
        try:
            loaded = load(path)
        except TranscriptError as e:
            if path == files[-1]:
                raise  # the latest call may be being written: read again later
            log.warning("%s; skipped (a call cut short, e.g. by a crash)", e)
            loaded = None
        if loaded is not None:
            run = loaded.run if run is None else join(run, loaded, session)
            session = loaded.session
        done.append(mark)
    if run is None:
        raise TranscriptError(folder, "only a condenser's own LLM calls in this folder")
    with _LOCK:  # watches of several folders may poll from several threads
        _JOINED[key] = (done, run, session)
        _JOINED.move_to_end(key)
        while len(_JOINED) > _JOINED_MAX:
            _JOINED.popitem(last=False)
    return replace(run, steps=[replace(s) for s in run.steps])  # callers may change theirs
