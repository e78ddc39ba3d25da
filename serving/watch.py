"""Follow a growing transcript file and feed each new step to a monitor session.

    watch = TranscriptWatch("run.jsonl", monitor)       # monitor.session.Monitor (or a remote one)
    while agent_running():
        for decision in watch.poll():                   # the decisions of the steps added since
            if decision.stop: ...
        time.sleep(1)
    watch.poll(final=True)                              # the agent is gone: a call left without
    watch.end()                                         # its result is scored as it is; end record

`failfast watch` and `failfast supervise` use it; so can any Python harness.

The file is re-read whole at each poll (the readers parse whole transcripts) and only steps not
yet seen are observed. Between polls the file may have been truncated or replaced by a new run
(log rotation, an agent restarted on the same path): its inode changed, it shrank, its first line
is another one, or it now has fewer steps than were seen. Then the current run is ended and a new
one started with its own run id (`on_replace="new"`), or `TranscriptReplaced` is raised
(`on_replace="stop"`); the new file's steps are never spliced onto the old run. A transcript
written whole after every step (a JSON document, saved in place or renamed over the old file) is
followed as the same run while its run id, task and observed steps stay the same
(serving.run_identity).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from monitor.errors import TranscriptError, TranscriptTooLarge
from monitor.types import Decision, Step, Trajectory
from serving.limits import MAX_STEPS, MAX_TRANSCRIPT_BYTES
from serving.run_identity import FileMark, continues, same_run, settled
from serving.transcripts import read_transcript

log = logging.getLogger(__name__)


class WatchSession(Protocol):
    """What the watch needs of a monitor session (monitor.session.Session has it)."""

    def observe(self, step: Step) -> Decision: ...

    def end(self) -> Any: ...


class Opener(Protocol):
    """Opens sessions: monitor.session.Monitor, or serving.remote.RemoteMonitor."""

    def start(
        self,
        task: str = "",
        agent: str | None = None,
        *,
        run: str = "",
        source: str = "",
        instance_id: str = "",
    ) -> Any: ...


class TranscriptReplaced(TranscriptError):
    """The watched file was truncated or replaced by another run (with on_replace="stop")."""


class TranscriptWatch:
    """One watched transcript path; a monitor session per run found at that path.

    Args:
        path: the transcript file (it need not exist yet).
        monitor: opens a session per run (`start(task, agent, run=, source=)`).
        fmt: reader name; None sniffs it.
        agent, source: override the transcript's agent family / threshold group.
        max_bytes, max_steps: refuse a transcript past these (TranscriptTooLarge from `poll`).
        on_replace: "new": end the run and start a new one; "stop": raise TranscriptReplaced.
        on_new_run: called with (run id, why) whenever a run starts (why: "" for the first).
    """

    def __init__(
        self,
        path: str | Path,
        monitor: Opener,
        *,
        fmt: str | None = None,
        agent: str | None = None,
        source: str | None = None,
        instance_id: str | None = None,
        max_bytes: int = MAX_TRANSCRIPT_BYTES,
        max_steps: int = MAX_STEPS,
        on_replace: Literal["new", "stop"] = "new",
        on_new_run: Callable[[str, str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.monitor = monitor
        self.fmt = fmt
        self.agent = agent
        self.source = source
        self.instance_id = instance_id
        """The task's id for every run of the file (None: each transcript's own)."""
        self.max_bytes = max_bytes
        self.max_steps = max_steps
        self.on_replace = on_replace
        self.on_new_run = on_new_run
        self.session: Any = None
        self.seen = 0
        """Steps of the current run already observed."""
        self.runs: list[str] = []
        """The run id of every run seen at this path, in order."""
        self.traj: Trajectory | None = None
        """The current run as last read."""
        self.ended = False
        self._mark: FileMark | None = None
        self._pending_why = ""  # why the last run ended, told when the next one starts
        self.totals: dict[str, float] = {"steps": 0, "tokens": 0, "dollars": 0.0}
        """Steps, tokens and dollars of every step observed, over all runs at this path."""
        self._step_dollars = 0.0  # the current run's observed steps' costs
        self._step_tokens = 0  # the current run's observed steps' tokens, as counted
        self._run_dollars = 0.0  # what the current run added to totals["dollars"]
        self._held = (0, 0)  # steps and tokens of held calls counted in totals
        self._error = ""  # why the file could not be read at the last poll ("" when it could)

    def poll(self, *, final: bool = False) -> list[Decision]:
        """Read the file; observe the steps added since the last poll; their decisions.

        A step at the end of the file that may still change (`settled`: a tool call whose
        result has not been written yet, or a reply with no call yet; stream formats such as
        Claude Code's write a response's text, its call and the call's result as separate
        records) is held back until a later step arrives, so it is scored as it ended;
        `final=True` (the run is over) observes it as it is. A run is opened once it has a
        step (by then its task is known). Returns [] while the file is missing or not readable
        as a transcript (not yet complete, or half rewritten: the run goes on once it reads).

        Raises:
            TranscriptTooLarge: past max_bytes or max_steps.
            TranscriptReplaced: the file was replaced and on_replace is "stop".
        """
        mark = FileMark.of(self.path)
        if mark is None:
            return []
        why = self._mark.replaced_by(mark) if self._mark is not None else ""
        try:
            traj = read_transcript(self.path, self.fmt, max_bytes=self.max_bytes)
        except TranscriptTooLarge:
            raise
        except TranscriptError as e:
            # half written (a rewrite in place truncates the file first) or a new run not yet
            # readable: which it was is decided by its content once it reads again
            self._unreadable(e)
            return []
        if len(traj.steps) > self.max_steps:
            raise TranscriptTooLarge(
                self.path,
                f"{len(traj.steps)} steps, over the limit of {self.max_steps} (--max-steps)",
            )
        self._error = ""
        if self.session is not None and not self.ended and self.traj is not None:
            why = self._another_run(why, traj)
        out: list[Decision] = []
        if why:
            out += self._replaced(why, mark)
        self._mark = mark
        self.traj = traj
        if self.session is None:
            if not traj.steps and not final:
                return out  # opened when its first step is there: its task and id are by then
            self._start(traj, why)
        cut = settled(traj.steps, self.seen, traj.format, final=final)
        out += self._observe(traj.steps[self.seen : cut])
        self._account()
        return out

    def _another_run(self, why: str, traj: Trajectory) -> str:
        """Why `traj` is not the current run grown ("" when it is): the file's mark said it was
        replaced and its content does not continue the run, or it has fewer steps, or another
        run id or task (another run written over the file in place, a new aider session), or
        its steps so far are not the observed ones (rewritten, or a folder's new attempt)."""
        old = self.traj
        assert old is not None
        if len(traj.steps) < self.seen:
            return why or f"it now has {len(traj.steps)} steps, {self.seen} were seen"
        if not same_run(old, traj):
            return why or f"another run was written over it (run {traj.id!r})"
        if (why or self.path.is_dir()) and not continues(old, self.seen, traj):
            # a folder's mark never changes: its content alone tells (a rerun's call files
            # beside a crashed attempt's in OpenHands' llm_completions/<instance>/)
            return why or "its latest content does not continue the run (another attempt)"
        if why:  # rewritten whole, grown: the same run
            log.debug("%s: %s, but it is run %r grown; followed", self.path, why, self.run)
        return ""

    def _unreadable(self, error: TranscriptError) -> None:
        """Say once why a transcript that was read before cannot be read now."""
        msg = str(error)
        if self.runs and msg != self._error:
            log.warning("%s (waiting for it to read again)", msg)
        self._error = msg

    def _observe(self, steps: list[Step]) -> list[Decision]:
        """Observe `steps` (the next ones of the current run); count them in the totals."""
        out = []
        for step in steps:
            self.seen += 1  # before observing: a session that raises must not see it again
            self.totals["steps"] += 1
            self.totals["tokens"] += step.tokens
            self._step_tokens += step.tokens
            self._step_dollars += step.cost_usd or 0.0
            assert self.session is not None
            out.append(self.session.observe(step))
        return out

    def _account(self) -> None:
        """Totals beyond the observed steps: the calls held for their results (their model
        calls were made: the budgets count them now, and not again once observed), and a run's
        reported total cost where its steps carry less (Claude Code's result record), once; and
        tokens the observed steps carry only once re-read (Codex reports a turn's usage after
        its steps, in `turn.completed`)."""
        traj = self.traj
        live = traj is not None and self.session is not None and not self.ended
        held = traj.steps[self.seen :] if live and traj is not None else []
        if live and traj is not None:
            now = sum(s.tokens for s in traj.steps[: self.seen])
            if now > self._step_tokens:  # only ever more: estimates may shrink as a run grows
                self.totals["tokens"] += now - self._step_tokens
                self._step_tokens = now
        steps, tokens = len(held), sum(s.tokens for s in held)
        self.totals["steps"] += steps - self._held[0]
        self.totals["tokens"] += tokens - self._held[1]
        self._held = (steps, tokens)
        reported = traj.totals.cost_usd if traj is not None and traj.totals is not None else None
        counted = max(self._step_dollars + sum(s.cost_usd or 0.0 for s in held), reported or 0.0)
        if counted > self._run_dollars:
            self.totals["dollars"] += counted - self._run_dollars
            self._run_dollars = counted

    def _flush(self) -> list[Decision]:
        """The current run is over: observe the calls held back for their results, as they are."""
        if self.session is None or self.ended or self.traj is None:
            return []
        out = self._observe(self.traj.steps[self.seen :])
        self._account()
        return out

    def _replaced(self, why: str, mark: FileMark) -> list[Decision]:
        if self.on_replace == "stop":
            raise TranscriptReplaced(self.path, f"{why}; not splicing it onto run {self.run!r}")
        log.warning("%s: %s; ending run %r, the new content is a new run", self.path, why, self.run)
        held = self._flush()  # the old run's last call, held for its result: it ran
        self._end_session()
        self._mark = mark
        self._pending_why = why
        return held

    def _start(self, traj: Trajectory, why: str) -> None:
        why = why or self._pending_why
        self._pending_why = ""
        run = traj.id or self.path.name
        if run in self.runs:  # the reader names runs after the file: give the new one its own id
            run = f"{run}#{len(self.runs) + 1}"
        self.runs.append(run)
        self.session = self.monitor.start(
            traj.task,
            self.agent or traj.agent or None,
            run=run,
            source=self.source or traj.source,
            instance_id=self.instance_id or traj.instance_id,  # a known task: its own choice
        )
        self.seen = 0
        self._step_dollars = self._run_dollars = 0.0
        self._step_tokens = 0
        self.ended = False
        if self.on_new_run is not None:
            self.on_new_run(run, why)

    @property
    def run(self) -> str:
        """The current run's id ("" before the first)."""
        return self.runs[-1] if self.runs else ""

    def _end_session(self) -> None:
        if self.session is not None and not self.ended:
            try:
                self.session.end()
            finally:
                self.ended = True
        self.session = None
        self.seen = 0

    def end(self) -> None:
        """The watch is over: observe a call still held for its result (its tokens and cost
        count), then log the current run's end record (once)."""
        if self.session is not None and not self.ended:
            try:
                self._flush()
            except Exception:  # noqa: BLE001 - the end record must still be written
                log.exception("%s: could not observe the held call of run %r", self.path, self.run)
            try:
                self.session.end()
            finally:
                self.ended = True
