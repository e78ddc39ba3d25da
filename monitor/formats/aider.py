"""Aider chat transcripts (markdown): `.aider.chat.history.md`, and the per-task `<instance>.md`
that aider's SWE-bench harness publishes (with `results.json` beside them).

Source of truth: Aider-AI/aider, `aider/io.py` (InputOutput: `append_chat_history`,
`user_input`, `ai_output`, `tool_output` / `tool_error` with `blockquote=True`),
`aider/coders/editblock_prompts.py` (SEARCH/REPLACE blocks) and `aider/coders/base_coder.py`
(token and cost reports, lint and test reflections); the harness is Aider-AI/aider-swe-bench
(`harness.py`: one chat file per task, attempts appended to it, models alternating).

The markdown:
- `# aider chat started at <time>` opens a session (one Coder run);
- `#### ` lines are the user's (or the harness's) messages;
- `> ` lines are aider's own output: announcements (`> Models: gpt-4o with diff edit format`),
  applied edits, lint and test output, edit-format errors, token reports
  (`> 33924 prompt tokens, 91 completion tokens, $0.170985 cost` in 2024 versions,
  `> Tokens: 3.2k sent, 410 received. Cost: $0.02 message, $0.05 session.` later);
- everything else is the model's reply: prose and SEARCH/REPLACE edit blocks
  (`<<<<<<< SEARCH` / `=======` / `>>>>>>> REPLACE` under the file's name).

Steps: one per model reply. A reply with edit blocks (or a unified diff) is an action
(tool "edit", action "edit <files>"); a reply without is a message. Its observation is what
follows it up to the next reply: aider's `> ` output and any `#### ` message the harness sent
back (lint or test failures). is_error when that output reports a failed edit, lint errors, a
failing test or a traceback; a reply aider could not parse as edits is a "format_error". Tokens
come from the token report after the reply when there is one, else they are estimated.

Attempts and runs (a decision; docs/USAGE.md says why):
- `<instance>.md` (the harness's file): all its sessions are ONE run, the harness episode. The
  harness appends every attempt to the file and keeps the patch of the attempt it chose; the
  verdict in `results.json` is that patch's, and the file does not say which attempt it was.
  Each session after the first starts with a step of kind "message", tool "aider", action
  "new attempt N" (the model in the thought), so a restart shows in the run.
- `.aider.chat.history.md` (a user's own history, appended to across days): each session is a
  run of its own (run "session-N"); the instance is the folder the history is in (the repo).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import TranscriptError
from monitor.formats._fields import parse_time
from monitor.formats._layout import place_file, run_id
from monitor.ledger import fill_estimates
from monitor.textio import read_text, strip_gz
from monitor.types import Step, Totals, Trajectory

NAME = "aider"

HISTORY = ".aider.chat.history.md"
_SESSION = re.compile(r"^# aider chat started at (.*)$")
_OPENING = b"# aider chat started at "
_MODEL = re.compile(r"^(?:Main )?[Mm]odels?: (\S+)")
_OLD_TOKENS = re.compile(
    r"(?<![\d,])([\d,]+) prompt tokens, ([\d,]+) completion tokens(?:, \$([\d.]+) cost)?"
)
_NEW_TOKENS = re.compile(
    r"Tokens: ([\d.,]+)(k?) sent[^\n]{0,200}?(?<![\d.,])([\d.,]+)(k?) received"
    r"(?:\. Cost: \$([\d.]+))?"
)
_FILE_LINE = re.compile(r"^\s*([\w./\\-]+\.[\w]+)\s*$")
_FORMAT_ERROR = re.compile(
    r"did not conform to the edit format|SearchReplaceNoExactMatch|"
    r"SEARCH/REPLACE block failed to match|Malformed (?:response|edit)",
    re.I,
)
_ERROR = re.compile(
    r"# Fix any errors below|^FAILED |^ERROR |Traceback \(most recent call last\)|"
    r"(?<!\d)\d+ failed\b|Failed to apply edit|^\S+:\d+:\d+: [EF]\d+ ",
    re.M,
)


def sniff(path: Path, head: bytes) -> bool:
    """True for markdown that opens an aider session (`# aider chat started at`)."""
    if not strip_gz(Path(path).name).endswith(".md"):
        return False
    return any(line.lstrip().startswith(_OPENING) for line in head[:8192].splitlines())


@dataclass
class _Segment:
    kind: str  # "user" (#### lines), "tool" (> lines) or "assistant" (the rest)
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


@dataclass
class _Session:
    started: str
    segments: list[_Segment] = field(default_factory=list)


def _sessions(text: str) -> list[_Session]:
    """Split the markdown into sessions of user / tool / assistant segments."""
    sessions: list[_Session] = []
    fenced = False  # inside a ``` block of a reply: every line is the reply's
    for raw in text.splitlines():
        m = _SESSION.match(raw)
        if m:
            sessions.append(_Session(m.group(1).strip()))
            fenced = False
            continue
        if not sessions:
            continue  # text before the first session header is not aider's
        if fenced or raw.startswith("```") or raw.startswith(">>>>>>>"):
            if raw.startswith("```"):
                fenced = not fenced
            kind, line = "assistant", raw
        elif raw.startswith("####"):
            kind, line = "user", raw[4:].removeprefix(" ").rstrip()
        elif raw == ">" or raw.startswith("> "):
            kind, line = "tool", raw[1:].removeprefix(" ").rstrip()
        elif not raw.strip():
            segs = sessions[-1].segments
            if segs:
                segs[-1].lines.append("")
            continue
        else:
            kind, line = "assistant", raw
        segs = sessions[-1].segments
        if segs and segs[-1].kind == kind:
            segs[-1].lines.append(line)
        else:
            segs.append(_Segment(kind, [line]))
    return sessions


def _edited_files(reply: str) -> list[str]:
    """The file names of the SEARCH/REPLACE blocks (or unified diff) in a reply."""
    files: list[str] = []
    lines = reply.splitlines()
    for i, line in enumerate(lines):
        name = ""
        if line.strip() == "<<<<<<< SEARCH":
            for back in lines[max(0, i - 3) : i][::-1]:
                m = _FILE_LINE.match(back)
                if m and not back.strip().startswith("```"):
                    name = m.group(1)
                    break
            name = name or "?"
        elif line.startswith("+++ ") and i and lines[i - 1].startswith("--- "):
            name = line[4:].strip().removeprefix("b/")
        if name and name not in files:
            files.append(name)
    return files


def _count(num: str, k: str = "") -> int:
    """A token count as aider prints it ("1,234", "12.3" with k: thousands). Raises ValueError
    on what only looks like a number ("..6", ",,")."""
    value = float(num.replace(",", ""))
    return int(round(value * 1000)) if k else int(value)


def _usage(output: str) -> tuple[int, int, float | None] | None:
    """(prompt tokens, completion tokens, cost) from the token report in aider's output; None
    when there is none, or its numbers do not parse (a damaged log: the usage is unknown)."""
    try:
        m = _OLD_TOKENS.search(output)
        if m:
            cost = float(m.group(3)) if m.group(3) else None
            return _count(m.group(1)), _count(m.group(2)), cost
        m2 = _NEW_TOKENS.search(output)
        if m2:
            cost = float(m2.group(5)) if m2.group(5) else None
            return _count(m2.group(1), m2.group(2)), _count(m2.group(3), m2.group(4)), cost
    except ValueError:
        return None
    return None


def _model(session: _Session) -> str:
    for seg in session.segments:
        if seg.kind == "assistant":
            break
        if seg.kind == "tool":
            for line in seg.lines:
                m = _MODEL.match(line)
                if m:
                    return m.group(1).rstrip(",")
    return ""


def _steps(
    sessions: list[_Session], mark_attempts: bool
) -> tuple[str, list[Step], list[int], list[int]]:
    """(task, steps, context chars per step, output chars per step) of the sessions, in order."""
    task = ""
    steps: list[Step] = []
    ctx_chars: list[int] = []
    out_chars: list[int] = []
    context = 0
    for n, session in enumerate(sessions, start=1):
        ts = parse_time(session.started.replace(" ", "T", 1)) if session.started else None
        if mark_attempts and n > 1:
            steps.append(
                Step(
                    index=len(steps),
                    kind="message",
                    tool="aider",
                    action=f"new attempt {n}",
                    thought=f"model {_model(session) or '?'}",
                    timestamp=ts,
                    tokens_estimated=False,
                )
            )
            ctx_chars.append(0)
            out_chars.append(0)
        current: Step | None = None
        observed: list[str] = []
        for seg in session.segments:
            text = seg.text
            if seg.kind == "assistant":
                if current is not None:
                    _close(current, observed)
                files = _edited_files(text)
                current = Step(
                    index=len(steps),
                    kind="action" if files else "message",
                    thought=text,
                    tool="edit" if files else "",
                    action=f"edit {', '.join(files)}" if files else "",
                    args={"files": files} if files else None,
                    timestamp=ts,
                )
                observed = []
                steps.append(current)
                ctx_chars.append(context)
                out_chars.append(len(text))
                context += len(text)
            elif current is None:
                if seg.kind == "user" and not task:
                    task = text
                context += len(text)
            else:
                observed.append(text)
                context += len(text)
        if current is not None:
            _close(current, observed)
    return task, steps, ctx_chars, out_chars


def _close(step: Step, observed: list[str]) -> None:
    """Give a reply step what followed it: observation, error, kind, tokens."""
    step.observation = "\n".join(t for t in observed if t)
    if _FORMAT_ERROR.search(step.observation):
        step.kind, step.is_error = "format_error", True
    elif _ERROR.search(step.observation):
        step.is_error = True
    usage = _usage(step.observation)
    if usage is not None:
        step.tokens_in, step.tokens_out, step.cost_usd = usage
        step.tokens_estimated = False


def _trajectory(
    path: Path, sessions: list[_Session], instance_id: str, run: str, mark_attempts: bool
) -> Trajectory:
    task, steps, ctx, out = _steps(sessions, mark_attempts)
    if not steps:
        raise TranscriptError(path, "aider transcript without a model reply")
    fill_estimates(steps, ctx, out)
    source, _ = place_file(path, instance_id)
    costs = [s.cost_usd for s in steps if s.cost_usd is not None]
    return Trajectory(
        id=run_id(source, run, instance_id),
        instance_id=instance_id,
        agent="aider",
        source=source,
        model=next((m for m in map(_model, sessions) if m), ""),
        format=NAME,
        path=str(path),
        task=task,
        steps=steps,
        run=run,
        totals=Totals(cost_usd=round(sum(costs), 6) if costs else None),
        provenance={
            "instance": (
                f"the folder holding {HISTORY}" if run else f"file name of {Path(path).name}"
            ),
            "source": "folder layout above the transcript",
        },
    )


def _instance(path: Path) -> str:
    name = strip_gz(Path(path).name)
    if name == HISTORY:
        return Path(path).absolute().parent.name
    return name.removesuffix(".md")


def read_all(path: Path) -> Iterator[Trajectory]:
    """Every run in an aider transcript (one per session for `.aider.chat.history.md`)."""
    path = Path(path)
    sessions = _sessions(read_text(path))
    if not sessions:
        raise TranscriptError(path, "not an aider transcript (no '# aider chat started at')")
    instance_id = _instance(path)
    if strip_gz(path.name) != HISTORY:
        yield _trajectory(path, sessions, instance_id, "", mark_attempts=True)
        return
    read = 0
    for n, session in enumerate(sessions, start=1):
        try:
            yield _trajectory(path, [session], instance_id, f"session-{n}", mark_attempts=False)
            read += 1
        except TranscriptError:
            continue  # a session with no reply (opened and closed): not a run
    if not read:
        raise TranscriptError(path, "aider chat history without a model reply")


def read(path: Path) -> Trajectory:
    """The run of an aider transcript that one run's callers mean (score, watch, the hooks):
    the whole episode of an `<instance>.md`; the latest session with a reply of a user's
    `.aider.chat.history.md`, the one being worked on (its earlier sessions are older work;
    `read_all` gives them all, as ingest reads them)."""
    *_, last = read_all(path)
    return last
