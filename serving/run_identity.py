"""Is the transcript at a watched path still the run that was being watched, and which of its
steps are settled?

Two signs, checked at every poll of serving.watch.TranscriptWatch:
- the file's mark (`FileMark`): its inode, its size and its first line. An append-only transcript
  (JSONL, Markdown) that was rotated, truncated or written over by another run changes one of them.
- its content (`continues`): a transcript written whole after every step (a JSON document such as
  a SWE-agent `.traj`, a mini-swe-agent `.traj.json` or ATIF, saved in place or through a
  temporary file renamed over it) changes its mark at every step when it is compact or replaced
  atomically, yet it is the same run when it has the same run id and task and the steps already
  observed are the first steps of the new content. Such a rewrite is followed as growth.

A last step may still change (`held_back`, `OUTPUT_AFTER`), and in the formats answered by id so
may a call before it (`ANSWERED_BY_ID`): `settled` says how many steps the watch may score now;
the rest are scored when later steps arrive or the run ends.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from monitor.types import Step, Trajectory

FIRST_LINE_BYTES = 4096  # enough to tell two runs apart (ids, timestamps, the task) cheaply


@dataclass(frozen=True)
class FileMark:
    """What identifies one run's file between polls: inode, size, a hash of its first line."""

    device: int
    inode: int
    size: int
    first_line: str  # sha256 of the first line once it is complete; "" before

    @classmethod
    def of(cls, path: Path) -> FileMark | None:
        """The mark of the file at `path` now (a folder: its inode only); None when there is none."""
        try:
            st = os.stat(path)
            if os.path.isdir(path):  # a run kept as a folder (a Harbor trial, llm_completions/):
                return cls(st.st_dev, st.st_ino, 0, "")  # told apart by its content alone
            if not os.path.isfile(path):
                return None
            with open(path, "rb") as f:
                head = f.read(FIRST_LINE_BYTES)
        except OSError:
            return None
        nl = head.find(b"\n")
        line = head[:nl] if nl >= 0 else (head if len(head) == FIRST_LINE_BYTES else b"")
        digest = hashlib.sha256(line).hexdigest() if line else ""
        return cls(st.st_dev, st.st_ino, st.st_size, digest)

    def replaced_by(self, new: FileMark) -> str:
        """Why `new` is not this run's file grown further ("" when it is)."""
        if (new.device, new.inode) != (self.device, self.inode):
            return "the file was replaced (new inode)"
        if new.size < self.size:
            return f"the file shrank from {self.size} to {new.size} bytes (truncated)"
        if self.first_line and new.first_line != self.first_line:
            return "its first line changed (a new run was written over it)"
        return ""


def _call(step: Step) -> tuple[str, str, str]:
    # what a rewrite of the same run keeps of a step: its call. Not its tokens (some readers
    # estimate them over the whole run, chars/4 scaled to its totals) nor its observation (a
    # harness may save a step before its format error or submission message is appended)
    return (step.kind, step.tool, step.action)


def same_run(old: Trajectory, new: Trajectory) -> bool:
    """`new` has `old`'s run id and task (a task not known yet when `old` was read may appear)."""
    return new.id == old.id and (not old.task or new.task == old.task)


def continues(old: Trajectory, seen: int, new: Trajectory) -> bool:
    """`new` is `old` written again and grown: the same run (`same_run`), and the calls of its
    first `seen` steps (those already observed) are `old`'s."""
    if not same_run(old, new) or len(new.steps) < seen or len(old.steps) < seen:
        return False
    pairs = zip(old.steps[:seen], new.steps[:seen], strict=True)
    return all(_call(a) == _call(b) for a, b in pairs)


def written_bytes(path: Path) -> int:
    """How much the run at `path` has written so far: a file's size, a folder's files' sizes
    summed (a folder's own size does not grow with them); -1 when there is nothing there. What
    `failfast watch --idle` counts as life."""
    try:
        if not os.path.isdir(path):
            return os.stat(path).st_size
        total = 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue  # removed while walking
        return total
    except OSError:
        return -1


OUTPUT_AFTER = frozenset({"aider"})
"""Formats whose last step's observation is written after it in pieces (aider: a reply, then its
edits applied, lint and test output), so the last step is scored when the next one starts."""


ANSWERED_BY_ID = frozenset({"claude-code", "codex-rollout", "gemini-stream"})
"""Formats whose calls are answered by id, possibly out of order (parallel calls), and whose
readers give every answered call an observation: a call still without one holds back the steps
after it, not only when it is the last (`first_pending`)."""


def first_pending(steps: list[Step], start: int, stop: int) -> int:
    """The index of the first call in steps[start:stop] still waiting for its answer, else
    `stop`. A call followed by a later model response (`made_a_call`) is not waiting: the model
    is only called again once every call of its last response is answered, so a call without
    an answer by then will not get one (a transcript that lost it) and must not hold the rest
    of the run back."""
    last_call = max((j for j in range(start, stop) if made_a_call(steps[j])), default=start)
    for i in range(last_call, stop):  # the calls before the latest response are not waiting
        if steps[i].kind in ("action", "submit") and not steps[i].observation:
            return i
    return stop


def made_a_call(step: Step) -> bool:
    """The step is the first of a model response whose recorded usage the reader put on it
    (the readers of ANSWERED_BY_ID charge a response's usage to its first step and 0 to the
    rest); estimated tokens say nothing of where a response begins."""
    return not step.tokens_estimated and step.tokens_in + step.tokens_out > 0


def held_back(step: Step) -> bool:
    """A last step that may still change: any step with nothing answered yet (a call awaiting
    its result; a format error or a submission a harness saved before the message that answers
    it), or a reply with no call yet (Claude Code writes a response's text and its tool call as
    two records of one message: read between them, the step is prose, then a call)."""
    return not step.observation or step.kind == "message"


def settled(steps: list[Step], seen: int, fmt: str, *, final: bool = False) -> int:
    """How many of `steps` (of format `fmt`, the first `seen` already scored) can no longer
    change: all once the run is over (`final`); else not a last step still waiting
    (`held_back`), nor the last step of a format whose output is written after it
    (`OUTPUT_AFTER`), nor, where calls are answered by id, anything from the first call still
    waiting on (`ANSWERED_BY_ID`)."""
    cut = len(steps)
    if final:
        return cut
    while cut > seen and held_back(steps[cut - 1]):
        cut -= 1
    if cut == len(steps) > seen and fmt in OUTPUT_AFTER:
        cut -= 1  # its output (edits applied, lint, tests) is still being appended
    if fmt in ANSWERED_BY_ID:  # a parallel call answered after a later one
        cut = first_pending(steps, seen, cut)
    return cut
