"""Verdict feedback: `Feedback` takes each run's verdict, decides whether it counts, logs it.

A harness reports each finished run's verdict (`Session.verdict`, or over HTTP
`POST /v1/sessions/{id}/verdict`). A counted verdict goes to its threshold group's realized-FPR
watch (monitor.fpr_watches: resolved runs and, of those, runs the monitor asked to stop, with an
anytime-valid interval; a run served by the known-task choice also counts in the group's
`known_tasks` watch). When a watch's interval first lies above the target, one WARNING line on
the `failfast.drift` logger says so. Closed runs are remembered so that a verdict may come later.

Which verdicts count (docs/USAGE.md, "Verdict feedback"): only a run that went on to its own
end says whether a stop was a false positive. A run stopped at step k that received no step after
k was cut short (the stop was obeyed): its verdict is taken and logged but not counted, unless the
harness says the run finished (`finished=True`). A harness that obeys stops must therefore let a
random share of runs ignore them (shadow runs, opened with `shadow=True`) and serve with
`sample="shadow"`, so that only those runs count: counting every run that was never stopped
would leave out exactly the stopped ones and bias the realized FPR towards 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from monitor.decision_log import DecisionLog
from monitor.drift import FprWatch
from monitor.errors import VerdictError
from monitor.fpr_watches import FprWatches
from monitor.protocols import Scorer
from monitor.thresholds import DEFAULT_TARGET

log = logging.getLogger("failfast.drift")

SAMPLES = ("all", "shadow")
"""Which runs' verdicts count: every run that went on to its end, or shadow runs only."""


@dataclass
class RunOutcome:
    """What the feedback needs to know of one run (a Session's, or a closed service session's).

    Attributes:
        session: the service's session id ("" for a Python session).
        run: the harness's run id.
        agent: the agent (threshold group) the session was opened for.
        steps: steps observed.
        stop_step: the step of the first stop decision (None: never stopped).
        stop_reason: its reason label.
        shadow: the harness said it will not obey this run's stops.
        verdict: the verdict once reported (None: not yet).
    """

    session: str
    run: str
    agent: str | None
    steps: int
    stop_step: int | None = None
    stop_reason: str | None = None
    shadow: bool = False
    verdict: bool | None = None
    source: str = ""
    """The run's source (its group when the bundle's thresholds are keyed by source)."""
    known_task: bool = False
    """The bundle served the run by its known-task choice (a task prior from other agents)."""

    @property
    def stopped(self) -> bool:
        return self.stop_step is not None

    @property
    def key(self) -> str:
        return self.session or self.run


class Feedback:
    """Per-group realized FPR from verdicts, the drift flag, and a bounded record of closed runs.

    Thread-safe. Args:
        target: the run-level FPR target the served thresholds were set for.
        groups: the threshold groups (agents) of the bundle; any other agent counts as "other".
        alpha: the watch's chance of ever flagging while the FPR is at or below the target.
        sample: "all" (every run that went on to its end counts) or "shadow" (shadow runs only).
        keep: closed runs remembered for a verdict that arrives after the close.
        log: the decision log that gets one "verdict" record per verdict.
    """

    def __init__(
        self,
        target: float,
        groups: Iterable[str] = (),
        *,
        alpha: float = 0.1,
        sample: str = "all",
        keep: int = 10_000,
        log: DecisionLog | None = None,
        group_by: str = "agent",
    ) -> None:
        if sample not in SAMPLES:
            raise ValueError(f"sample must be one of {', '.join(SAMPLES)}, got {sample!r}")
        self.target = float(target)
        self.alpha = float(alpha)
        self.sample = sample
        self.keep = int(keep)
        self.log = log
        self.fpr = FprWatches(self.target, groups, alpha=self.alpha, group_by=group_by)
        """The per-group watches and verdict counts (guarded by this object's lock)."""
        self._closed: OrderedDict[str, RunOutcome] = OrderedDict()
        self._by_run: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_scorer(cls, scorer: Scorer | None, **kwargs: Any) -> Feedback:
        """A Feedback at the scorer's target over its bundle's threshold groups (no scorer: the
        default target; no thresholds, e.g. ScriptedScorer: every run "other")."""
        target = scorer.target if scorer is not None else DEFAULT_TARGET
        table = scorer.bundle.thresholds if scorer is not None and scorer.bundle else None
        if table is not None:
            kwargs.setdefault("group_by", table.group_by)
        return cls(float(target), list(table.groups) if table else [], **kwargs)

    @property
    def group_by(self) -> str:
        """What the groups name: agents, or sources (then a run's source is tried first)."""
        return self.fpr.group_by

    @property
    def groups(self) -> list[str]:
        """The bundle's threshold groups, sorted, then "other"."""
        return self.fpr.groups

    @property
    def watches(self) -> dict[str, FprWatch]:
        """The FprWatch of each group."""
        return self.fpr.watches

    def group(self, agent: str | None, source: str = "") -> str:
        """The metric/watch group of a run (FprWatches.group)."""
        return self.fpr.group(agent, source)

    # --- closed runs ------------------------------------------------------------------------

    def closed(self, outcome: RunOutcome) -> None:
        """Remember a closed run so that its verdict can still arrive (the oldest is forgotten
        once `keep` are held)."""
        with self._lock:
            self._closed[outcome.key] = outcome
            self._closed.move_to_end(outcome.key)
            if outcome.run:
                self._by_run[outcome.run] = outcome.key
            while len(self._closed) > self.keep:
                old_key, old = self._closed.popitem(last=False)
                if self._by_run.get(old.run) == old_key:
                    del self._by_run[old.run]

    def find(self, *, session: str | None = None, run: str | None = None) -> RunOutcome | None:
        """A remembered closed run by session id or by run id (the latest closed with that id)."""
        with self._lock:
            if session:
                return self._closed.get(session)
            key = self._by_run.get(run or "")
            return self._closed.get(key) if key is not None else None

    def __len__(self) -> int:
        return len(self._closed)

    # --- verdicts ---------------------------------------------------------------------------

    def report(
        self,
        outcome: RunOutcome,
        resolved: bool,
        *,
        finished: bool | None = None,
        key_name: str | None = None,
    ) -> dict[str, Any]:
        """Take one run's verdict: count it in its group's watch when it is in the sample (long:
        the check, the count and the drift flag happen under one lock hold).

        Args:
            outcome: the run (its `verdict` is set here).
            resolved: the run's verdict.
            finished: the run went on to its own end; None: inferred (a stopped run finished
                only when steps came after its stop, or it is a shadow run).
            key_name: the name of the API key that gave the verdict (logged; never the key).

        Returns:
            What was done: group, counted (and why not), stopped, the group's watch, and
            `flagged_now` when this verdict raised the drift flag.

        Raises:
            VerdictError: the run already has a verdict.
        """
        group = self.group(outcome.agent, outcome.source)
        with self._lock:
            if outcome.verdict is not None:
                raise VerdictError(
                    f"run {outcome.run or outcome.session!r} already has a verdict "
                    f"(resolved={outcome.verdict})"
                )
            outcome.verdict = bool(resolved)
            why = self._not_counted(outcome, finished)
            flagged, known_flagged = self.fpr.count(
                group,
                resolved=bool(resolved),
                stopped=outcome.stopped,
                known_task=outcome.known_task,
                counted=why is None,
            )
            state = self.fpr.watch_dict(group)
        if flagged is not None:
            self._warn(group, flagged)
        if known_flagged is not None:
            self._warn(f"{group} (known tasks: its known-task choice)", known_flagged)
        result = {
            "session_id": outcome.session or None,
            "run": outcome.run,
            "agent": outcome.agent,
            "group": group,
            "resolved": bool(resolved),
            "stopped": outcome.stopped,
            "stop_step": outcome.stop_step,
            "counted": why is None,
            "not_counted_because": why,
            "flagged_now": flagged is not None or known_flagged is not None,
            "watch": state,
        }
        if outcome.known_task:
            result["known_task"] = True
        if self.log is not None:
            self.log.write(
                {
                    "ts": round(time.time(), 3),
                    "event": "verdict",
                    "run": outcome.run,
                    **({"session": outcome.session} if outcome.session else {}),
                    "agent": outcome.agent,
                    "resolved": bool(resolved),
                    "finished": finished,
                    "stopped": outcome.stopped,
                    "stop_step": outcome.stop_step,
                    "steps": outcome.steps,
                    "shadow": outcome.shadow,
                    **({"known_task": True} if outcome.known_task else {}),
                    "counted": why is None,
                    **({"key_name": key_name} if key_name else {}),
                }
            )
        return result

    def _warn(self, name: str, watch: FprWatch) -> None:
        log.warning(
            "drift: %s realized FPR %.3f (%d of %d resolved runs stopped), interval "
            "[%.3f, %.3f] lies above the target %g; recalibrate (failfast calibrate)",
            name,
            watch.fpr or 0.0,
            watch.stopped,
            watch.resolved,
            watch.lower,
            watch.upper,
            self.target,
        )

    def _not_counted(self, outcome: RunOutcome, finished: bool | None) -> str | None:
        if self.sample == "shadow" and not outcome.shadow:
            return "not a shadow run (the service counts shadow runs only)"
        if outcome.stop_step is None or outcome.shadow:
            return None
        if finished is None:
            finished = outcome.steps > outcome.stop_step
        if finished:
            return None
        return (
            f"stopped at step {outcome.stop_step} with no step after it: the stop was obeyed, so "
            "the verdict is not that of the whole run (pass finished=true if it was)"
        )

    # --- status and metrics -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per group: runs, resolved, stopped_resolved, realized_fpr, interval, drift, flagged_at."""
        with self._lock:
            groups = self.fpr.status()
        return {
            "target": self.target,
            "alpha": self.alpha,
            "sample": self.sample,
            "drift": any(
                a["drift"] or (a.get("known_tasks") or {}).get("drift", False)
                for a in groups.values()
            ),
            "closed_runs_remembered": len(self._closed),
            "groups": groups,
        }

    def prometheus_text(self) -> str:
        """The per-group FPR gauges and verdict counters (monitor.fpr_watches)."""
        with self._lock:
            return self.fpr.prometheus_text()
