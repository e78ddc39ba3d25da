"""What a monitored run leaves behind once it is over: its "end" record in the decision log (the
per-step scores and tokens `failfast calibrate` rebuilds the run from, training.data.decisions)
and the `RunOutcome` its verdict is reported through (monitor.feedback).

A Session (monitor.monitored_run) holds one `RunEnd` and hands itself in as an `EndedRun`: the
protocol names what the end reads of it, so this module never imports the Session.
"""

from __future__ import annotations

from typing import Protocol

from monitor.decision_log import DecisionLog
from monitor.feedback import RunOutcome
from monitor.protocols import ScoreSession
from monitor.types import Decision, Flag


class EndedRun(Protocol):
    """What the end record and the outcome need of a run (monitor.monitored_run.Session has it)."""

    session_id: str
    run: str
    agent: str | None
    source: str
    shadow: bool
    log: DecisionLog
    scorer: ScoreSession | None
    scores: list[float | None]
    tokens: list[int]
    stopped: Decision | None

    @property
    def k(self) -> int: ...

    @property
    def known_task(self) -> bool: ...


class RunEnd:
    """The end of one run: logs its "end" record, and keeps the one `RunOutcome` of the run so
    that a verdict given through it is remembered."""

    def __init__(self) -> None:
        self._outcome: RunOutcome | None = None

    def record(self, run: EndedRun, flags: list[Flag], *, resolved: bool | None = None) -> None:
        """Log the run's "end" record: its stop (or continue/ok) at its last step with the flags
        raised at the end, and its per-step scores and tokens."""
        stopped = run.stopped
        d = Decision(
            stopped.action if stopped else "continue",
            stopped.reason if stopped else "ok",
            step=run.k,
            flags=flags,
        )
        extra: dict[str, object] = {
            "steps": len(run.scores),
            "stop_step": stopped.step if stopped else None,
            "shadow": run.shadow,
            "scores": run.scores,
            "tokens": run.tokens,
        }
        if run.source:
            extra["source"] = run.source
        if run.known_task:
            extra["known_task"] = True
        if run.scorer is not None and run.scorer.scorer_name != "monitor":
            extra["scorer"] = run.scorer.scorer_name  # `failfast calibrate` skips such runs
        run.log.record(
            d,
            run=run.run,
            agent=run.agent,
            resolved=resolved,
            event="end",
            session=run.session_id,
            extra=extra,
        )

    def outcome(self, run: EndedRun) -> RunOutcome:
        """The run's outcome as of now (steps, where it stopped, shadow), always the same object."""
        if self._outcome is None:
            self._outcome = RunOutcome(run.session_id, run.run, run.agent, 0, source=run.source)
        o = self._outcome
        o.session, o.run, o.agent, o.shadow = run.session_id, run.run, run.agent, run.shadow
        o.steps = len(run.scores)
        o.stop_step = run.stopped.step if run.stopped else None
        o.stop_reason = run.stopped.reason if run.stopped else None
        o.known_task = run.known_task
        return o

    @property
    def judged(self) -> bool:
        """The run has a verdict (given through its outcome)."""
        return self._outcome is not None and self._outcome.verdict is not None
