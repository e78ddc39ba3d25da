"""One monitored run: the `Session` a `monitor.session.Monitor` opens for it.

A failing scorer never breaks the run: the decision is "continue" with reason "monitor_error"
(logged). Once a session has stopped it keeps returning that stop decision, and keeps scoring the
steps it is still given (a shadow run that ignores the stop), so its "end" record holds the
scores of the whole run.

This module holds what the run does step by step (check, observe, replay, the stop decisions and
their restart packets); what its end leaves behind, the "end" record and the `RunOutcome` its
verdict is reported through, is the `monitor.run_end.RunEnd` each Session holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from monitor.decision_log import DecisionLog
from monitor.errors import Cancelled, VerdictError
from monitor.feedback import Feedback, RunOutcome
from monitor.flags import FlagTracker, diff_files
from monitor.normalise import call_key
from monitor.policy import PolicyConfig, heuristic_hits, hits_evidence, warn_evidence, warn_reason
from monitor.protocols import ScoreSession
from monitor.restart_summary import after_stop, error_line, restart_summary
from monitor.run_end import RunEnd
from monitor.schedule import Streak
from monitor.signals import SignalTracker
from monitor.step_check import check_step, error_evidence
from monitor.types import Decision, Flag, RestartPacket, Step

logger = logging.getLogger("monitor.session")  # Monitor and Session log as one


class Session:
    """One monitored run. Not thread-safe: one harness loop drives it."""

    def __init__(
        self,
        config: PolicyConfig,
        scorer: ScoreSession | None,
        *,
        task: str = "",
        agent: str | None = None,
        log: DecisionLog | None = None,
        run: str = "",
        feedback: Feedback | None = None,
        shadow: bool = False,
        session_id: str = "",
        source: str = "",
    ) -> None:
        self.config = config
        self.scorer = scorer
        self.task = task
        self.agent = agent
        self.source = source
        """The run's source: its threshold and verdict group when thresholds are keyed by it."""
        self.run = run
        self.log = log if log is not None else DecisionLog()
        self.feedback = feedback
        self.shadow = shadow
        """The harness will not obey this run's stops (it runs to its end; monitor.feedback)."""
        self.session_id = session_id
        """The service's id of this session ("" outside the service)."""
        self.scores: list[float | None] = []
        """The score after each step observed (None: no scorer, or it failed)."""
        self.tokens: list[int] = []
        """Each observed step's tokens (prompt + completion)."""
        self.ended = False
        """The run's "end" record was logged (`end`)."""
        self._end = RunEnd()
        self.tracker = SignalTracker()
        self.flag_tracker = FlagTracker(task, config.flags)
        self.diff = ""
        """The run's current diff; set it from the harness so a stop can hand it on."""
        self.stopped: Decision | None = None
        self._seen_diff = ""
        self._last: dict[str, float] = {}
        self._last_error = ""
        self._started = time.monotonic()
        self._streak = Streak(config)
        """The stopping rule by score (the last `persist` checked scores)."""

    @property
    def k(self) -> int:
        """Steps observed so far (the prefix length)."""
        return int(self.tracker.values()["steps"])

    def values(self) -> dict[str, float]:
        """Current signals; wall clock is the longer of transcript time and session time."""
        values = self.tracker.values()
        values["wall_seconds"] = max(values["wall_seconds"], time.monotonic() - self._started)
        return values

    def _thresholds(self) -> tuple[float | None, float | None]:
        if self.scorer is None:
            return None, None
        cfg = self.config
        thr = cfg.threshold if cfg.threshold is not None else self.scorer.threshold
        warn = cfg.warn_threshold if cfg.warn_threshold is not None else self.scorer.warn_threshold
        return thr, warn

    def check(self) -> Decision:
        """Before a model call: stop if the call could take a budget past its cap."""
        first = self.stopped
        if first is not None:  # the same decision until a step comes after the stop
            return first if self.k == first.step else after_stop(first, self.k, None, [])
        values = self.values()
        hits = self.config.budget.before_call(values, self._last)
        if hits:
            return self._stop(hits[0].reason, hits_evidence(hits), values, event="check")
        warn = warn_evidence(values, self.config)
        if warn:
            return Decision("warn", warn_reason(warn), step=self.k, evidence=warn)
        return Decision("continue", step=self.k)

    def observe(self, step: Step) -> Decision:
        """After a step: update signals, score, and decide (flags ride along).

        Never raises into the harness: whatever fails (the scorer, a step that is not a
        `monitor.types.Step` or has fields of the wrong type) gives `continue` with reason
        `monitor_error` and the error in the evidence (`{"error": "TypeError: ..."}`), logged."""
        try:
            check_step(step)  # before any state changes: a bad step leaves the session as it was
            return self._observe(step)
        except Exception as e:  # noqa: BLE001 - the run goes on whatever the monitor does
            logger.exception("monitor_error at a step of run %r", self.run)
            k = int(self.tracker.values().get("steps", 0))
            while len(self.scores) < k:  # counted by the tracker, not scored: keep them aligned
                self.scores.append(None)
                self.tokens.append(0)
            if self.stopped is not None and self.stopped.step == k:
                return self.stopped  # it stopped at this step before the failure
            decision = Decision("continue", "monitor_error", step=k, evidence=error_evidence(e))
            try:
                self.log.record(decision, run=self.run, agent=self.agent, session=self.session_id)
            except Exception:  # noqa: BLE001
                logger.exception("could not log the monitor_error decision")
            return decision

    def _observe(self, step: Step) -> Decision:
        before = self.tracker.values()
        self.tracker.update(step)
        values = self.values()
        k = int(values["steps"])
        self._last = {s: values[s] - before[s] for s in ("tokens", "cost_usd")}
        if step.is_error and step.observation:
            self._last_error = error_line(step.observation)
        flags = self._flags(step, k)
        score: float | None = None
        failed: dict[str, str] = {}
        if self.scorer is not None:
            try:
                score = float(self.scorer.observe(step))
            except Exception as e:
                logger.exception("scorer failed at step %d of run %r", k, self.run)
                failed = error_evidence(e)
        self.scores.append(score)
        self.tokens.append(step.tokens)
        if self.stopped is not None:
            return after_stop(self.stopped, k, score, flags)
        threshold, warn_threshold = self._thresholds()

        hits = heuristic_hits(values, self.config, self.tracker.compaction_steps)
        if hits:
            return self._stop(hits[0].reason, hits_evidence(hits), values, score, threshold, flags)
        ev = self._streak.crossed(k, score, threshold)
        if ev is not None:
            return self._stop("predicted_failure", ev, values, score, threshold, flags)
        if failed:
            decision = Decision("continue", "monitor_error", step=k, evidence=failed, flags=flags)
        else:
            warn = warn_evidence(values, self.config, score=score, warn_threshold=warn_threshold)
            if warn:
                reason = "predicted_failure" if "score" in warn else warn_reason(warn)
                decision = Decision("warn", reason, score, threshold, k, warn, flags)
            else:
                decision = Decision("continue", "ok", score, threshold, k, {}, flags)
        self.log.record(decision, run=self.run, agent=self.agent, session=self.session_id)
        return decision

    def replay(
        self,
        steps: Sequence[Step],
        *,
        check: bool = False,
        cancelled: Callable[[], bool] | None = None,
    ) -> Iterator[tuple[Decision | None, Decision]]:
        """Feed a recorded run's steps in order; per step, what `check()` said before it (with
        `check`, until the session stopped; else None) and what `observe(step)` said.

        Raises:
            Cancelled: `cancelled()` (polled every 256 steps) returned True.
        """
        for k, step in enumerate(steps):
            if cancelled is not None and k % 256 == 0 and cancelled():
                raise Cancelled(f"stopped replaying {self.run or 'the run'} at step {k}")
            before = self.check() if check and self.stopped is None else None
            yield before, self.observe(step)

    def guard_call(self, name: str, args: Any) -> int:
        """How many times this call (normalised) was already made in this run.

        Args:
            name: tool name ("bash" for shell commands).
            args: the tool arguments (dict) or the command string.
        """
        if isinstance(args, dict):
            return self.tracker.call_count(call_key(name, "", args))
        return self.tracker.call_count(call_key(name, str(args)))

    def end(self, submission: str | None = None, *, resolved: bool | None = None) -> list[Flag]:
        """The run is over: raise the flags only the end can raise and log an "end" record.

        Args:
            submission: the final diff (default: the last `diff` the harness set).
            resolved: the verdict when known (replays), so logs can be reported by label.

        Returns:
            The flags raised at the end (final diff scope, unsupported completion).
        """
        flags = self.flag_tracker.end(self.k, self.diff if submission is None else submission)
        self._end.record(self, flags, resolved=resolved)
        self.ended = True
        return flags

    def outcome(self) -> RunOutcome:
        """What verdict feedback needs of this run (steps, where it stopped, shadow); the same
        object on every call, so a verdict given through it is remembered."""
        return self._end.outcome(self)

    @property
    def judged(self) -> bool:
        """The run has a verdict (given through `verdict`): it is over."""
        return self._end.judged

    @property
    def known_task(self) -> bool:
        """The bundle serves this run by its known-task choice (serving.task_prior)."""
        return self.scorer is not None and self.scorer.known_task

    def verdict(
        self, resolved: bool, *, finished: bool | None = None, key_name: str | None = None
    ) -> dict[str, Any]:
        """Report the run's verdict (after the run; before or after `end`) to the feedback.

        Args:
            resolved: the run's verdict.
            finished: the run went on to its own end; None: inferred (a stopped run finished
                only when steps came after its stop, or the session is a shadow run).

        Returns:
            What the feedback did with it (counted, the group's realized FPR and interval).

        Raises:
            VerdictError: the session has no feedback, or the run already has a verdict.
        """
        if self.feedback is None:
            raise VerdictError("this session reports to no feedback (open it from a Monitor)")
        return self.feedback.report(self.outcome(), resolved, finished=finished, key_name=key_name)

    def _flags(self, step: Step, k: int) -> list[Flag]:
        tr = self.tracker
        flags = self.flag_tracker.update(step, k, edit=tr.last_edit, test=tr.last_test)
        if self.diff and self.diff is not self._seen_diff:
            self._seen_diff = self.diff
            flags += self.flag_tracker.add_files(diff_files(self.diff), k)
        return flags

    def _stop(
        self,
        reason: str,
        evidence: dict[str, Any],
        values: dict[str, float],
        score: float | None = None,
        threshold: float | None = None,
        flags: list[Flag] | None = None,
        event: str = "observe",
    ) -> Decision:
        packet = RestartPacket(
            diff=self.diff,
            summary=restart_summary(
                reason,
                values,
                top_call=self.tracker.top_call,
                last_error=self._last_error,
                touched={**self.flag_tracker.edited, **self.flag_tracker.files},
            ),
            task=self.task,  # the packet alone must be enough to start the fresh run
        )
        k = int(values["steps"])
        decision = Decision("stop", reason, score, threshold, k, evidence, flags or [], packet)
        self.stopped = decision
        self.log.record(
            decision, run=self.run, agent=self.agent, event=event, session=self.session_id
        )
        return decision
