"""Verdict feedback: the realized run-level FPR of a live monitor per threshold group, and drift.

A harness reports each finished run's verdict (`Session.verdict`, or over HTTP
`POST /v1/sessions/{id}/verdict`). For every threshold group (the agents of the bundle's
thresholds, everything else under "other") a `monitor.drift.FprWatch` at the served target counts
resolved runs and, of those, runs the monitor asked to stop (a "stop" decision at any step, any
reason); its anytime-valid interval flags drift once its lower end passes the target, with one
WARNING line on the `failfast.drift` logger. A run the bundle served by its known-task choice
(serving.task_prior: thresholds calibrated on known-task runs alone) also counts in a second
watch of its group, `known_tasks`, so drift on that path is seen apart from the rest.

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
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from monitor.decision_log import DecisionLog
from monitor.drift import FprWatch
from monitor.errors import VerdictError
from monitor.escape import prom_label
from monitor.protocols import Scorer
from monitor.thresholds import DEFAULT_TARGET, group_name

log = logging.getLogger("failfast.drift")

OTHER = "other"
"""The group of agents the bundle has no thresholds for (bounds the metric labels)."""
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
        self.group_by = group_by
        """What the groups name: agents, or sources (then a run's source is tried first)."""
        self.groups = sorted({str(g) for g in groups} - {OTHER}) + [OTHER]
        self.watches = {g: FprWatch(self.target, alpha=self.alpha) for g in self.groups}
        self.flagged_at: dict[str, float] = {}
        self.known_watches: dict[str, FprWatch] = {}
        """Per group, the watch of its runs served by the known-task choice (made on the first
        such verdict counted)."""
        self.known_flagged_at: dict[str, float] = {}
        self.verdicts: Counter[tuple[str, str]] = Counter()  # (group, outcome label) -> n
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

    def group(self, agent: str | None, source: str = "") -> str:
        """The metric/watch group of a run: the threshold group it is looked up under
        (monitor.thresholds.group_name), or "other" when that is not one of the groups."""
        name = group_name(self.watches, self.group_by, agent or "", source)
        return name if name and name in self.watches else OTHER

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
            watch = self.watches[group]
            flagged = known_flagged = False
            known = None
            if why is None:
                flagged = watch.add(resolved=bool(resolved), stopped=outcome.stopped)
                label = "resolved" if resolved else "unresolved"
                if outcome.known_task:
                    known = self.known_watches.setdefault(
                        group, FprWatch(self.target, alpha=self.alpha)
                    )
                    known_flagged = known.add(resolved=bool(resolved), stopped=outcome.stopped)
            else:
                label = "not_counted"
            self.verdicts[(group, label)] += 1
            if flagged:
                self.flagged_at[group] = time.time()
            if known_flagged:
                self.known_flagged_at[group] = time.time()
            state = self._watch_dict(group)
        if flagged:
            self._warn(group, watch)
        if known_flagged and known is not None:
            self._warn(f"{group} (known tasks: its known-task choice)", known)
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
            "flagged_now": flagged or known_flagged,
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

    def _watch_dict(self, group: str) -> dict[str, Any]:
        w = self.watches[group]
        d = w.to_dict()
        at = self.flagged_at.get(group)
        d["flagged_at"] = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at is not None else None
        )
        d["verdicts"] = sum(n for (g, _), n in self.verdicts.items() if g == group)
        d["not_counted"] = self.verdicts[(group, "not_counted")]
        known = self.known_watches.get(group)
        if known is not None:
            k = known.to_dict()
            at_k = self.known_flagged_at.get(group)
            k["flagged_at"] = (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at_k)) if at_k is not None else None
            )
            d["known_tasks"] = k
        return d

    def status(self) -> dict[str, Any]:
        """Per group: runs, resolved, stopped_resolved, realized_fpr, interval, drift, flagged_at."""
        with self._lock:
            groups = {g: self._watch_dict(g) for g in self.groups}
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
        """Gauges of the realized FPR and its interval, the drift flag, and verdict counters, one
        series per group (bounded labels: the bundle's groups and "other")."""
        with self._lock:
            rows = {
                g: (w.fpr, w.lower, w.upper, w.drift, w.resolved, w.stopped)
                for g, w in self.watches.items()
            }
            known_rows = {
                g: (w.fpr, w.lower, w.upper, w.drift, w.resolved, w.stopped)
                for g, w in self.known_watches.items()
            }
            verdicts = dict(self.verdicts)

        def num(x: float | None) -> str:
            return "NaN" if x is None or math.isnan(x) else f"{x:.6g}"

        gauges = (
            ("failfast_fpr_realized", "Realized run-level FPR (stopped resolved / resolved).", 0),
            ("failfast_fpr_lower", "Lower end of the anytime-valid FPR interval.", 1),
            ("failfast_fpr_upper", "Upper end of the anytime-valid FPR interval.", 2),
            ("failfast_fpr_drift", "1 once the FPR interval lies above the target.", 3),
            ("failfast_fpr_resolved_runs", "Resolved runs counted.", 4),
            ("failfast_fpr_stopped_resolved_runs", "Resolved runs the monitor stopped.", 5),
        )
        lines = [
            "# HELP failfast_fpr_target Run-level FPR target of the served thresholds.",
            "# TYPE failfast_fpr_target gauge",
            f"failfast_fpr_target {self.target:g}",
        ]
        # the known-task watches (runs served by the known-task choice) as their own series
        known_gauges = [
            (n.replace("failfast_fpr_", "failfast_known_tasks_fpr_"), f"{h[:-1]}, known tasks.", i)
            for n, h, i in gauges
        ]
        for (name, help, i), by_group in (
            *((g, rows) for g in gauges),
            *((g, known_rows) for g in known_gauges if known_rows),
        ):
            lines += [f"# HELP {name} {help}", f"# TYPE {name} gauge"]
            for g, row in by_group.items():
                v = row[i]
                lines.append(
                    f'{name}{{group="{prom_label(g)}"}} {int(v) if isinstance(v, bool) else num(v)}'  # type: ignore[arg-type]
                )
        lines += [
            "# HELP failfast_verdicts_total Verdicts received by group and outcome "
            "(resolved, unresolved, not_counted).",
            "# TYPE failfast_verdicts_total counter",
        ]
        for g in self.groups:
            for label in ("resolved", "unresolved", "not_counted"):
                n = verdicts.get((g, label), 0)
                lines.append(
                    f'failfast_verdicts_total{{group="{prom_label(g)}",outcome="{label}"}} {n}'
                )
        return "\n".join(lines) + "\n"
