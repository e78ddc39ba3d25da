"""Scoring a whole (finished or partial) run and replaying the decision policy over it.

Scores come from one graph call per featuriser window (Scorer.score_run); the monitor policy
(heuristic halts, check schedule with its persistence, thresholds) is then replayed step by step
on those scores, so a finished transcript gets the same decisions a live session would have given.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from monitor.errors import Cancelled
from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor, Session
from monitor.types import Decision, Trajectory

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """Scores and decisions of one run.

    Attributes:
        scores: element k-1 = P(unresolved | steps 1..k).
        decisions: the Decision after each step (after a stop: "stop" again, with that step's
            score and `stopped_at_step` in its evidence).
        stop: the first stop decision, None when the run was never stopped.
        threshold, warn_threshold: the thresholds used; threshold_origin says where from.
    """

    scores: list[float] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    stop: Decision | None = None
    threshold: float | None = None
    warn_threshold: float | None = None
    threshold_origin: str = ""
    scorer: str = "monitor"
    """The candidate that scored the run (serving.choice; "monitor": the LM probe)."""
    group: str = ""
    """The threshold group the run was served as (its source or agent; "" without a bundle)."""

    @property
    def final(self) -> Decision:
        """The stop decision when there was one, else the last decision."""
        if self.stop is not None:
            return self.stop
        return self.decisions[-1] if self.decisions else Decision("continue", step=0)

    def to_dict(self, *, all_decisions: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "n_steps": len(self.scores),
            "scores": self.scores,
            "threshold": self.threshold,
            "warn_threshold": self.warn_threshold,
            "threshold_origin": self.threshold_origin,
            "scorer": self.scorer,
            "group": self.group,
            "stop_step": self.stop.step if self.stop else None,
            "decision": self.final.to_dict(),
        }
        if all_decisions:
            d["decisions"] = [x.to_dict() for x in self.decisions]
        return d


def _finite(x: float) -> float | None:
    return x if x != float("inf") else None


def score_transcript(
    scorer: Scorer | None,
    traj: Trajectory,
    *,
    policy: PolicyConfig | None = None,
    monitor: Monitor | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> RunResult:
    """Score every prefix of `traj` and replay the policy to get a Decision per step.

    Args:
        scorer: a serving.Scorer; None: the model-free halts only (loops, budgets), e.g. when
            the bundle could not be loaded.
        traj: the run (finished or partial).
        policy: decision policy; None: the bundle's (PolicyConfig() without a scorer).
        monitor: a Monitor whose decision log should count these decisions (its policy is used).
        cancelled: polled between graph calls and every few hundred steps; when it returns
            True the work stops with `Cancelled` (the client went away).

    Raises:
        Cancelled: `cancelled()` said so. Nothing else: a failing scorer gives `monitor_error`.
    """
    if scorer is None:
        return _heuristics_only(traj, policy or PolicyConfig(), cancelled)
    try:
        scores, th = (
            scorer.score_served(traj)
            if cancelled is None
            else scorer.score_served(traj, cancelled=cancelled)
        )
    except Cancelled:
        raise
    except Exception as e:  # a failing scorer never raises into the harness
        log.exception("monitor_error while scoring %s", traj.id or traj.path)
        err = Decision("continue", reason="monitor_error", evidence={"error": repr(e)})
        return RunResult(
            scores=[float("nan")] * len(traj.steps),
            decisions=[dataclasses.replace(err, step=k) for k in range(1, len(traj.steps) + 1)],
        )
    replay = ScriptedScorer(scores, threshold=th.stop, warn_threshold=th.warn)
    if monitor is not None:
        mon = Monitor(monitor.config, scorer=replay, log=monitor.log)
    else:
        cfg = policy or PolicyConfig.model_validate(scorer.policy)
        mon = Monitor(cfg, scorer=replay)
    session = mon.start(traj.task, traj.agent or None, run=traj.id, source=traj.source)
    session.diff = traj.submission
    result = RunResult(
        scores=scores,
        threshold=_finite(th.stop),
        warn_threshold=_finite(th.warn),
        threshold_origin=th.origin,
        scorer=th.scorer,
        group=_group(scorer, traj),
    )
    _replay(session, traj, result, cancelled)
    return result


def _group(scorer: Any, traj: Trajectory) -> str:
    """The threshold group `traj` is served as ("" for a scorer without a bundle)."""
    group_of = getattr(getattr(scorer, "bundle", None), "group_of", None)
    return str(group_of(traj.agent or None, traj.source)) if callable(group_of) else ""


def _replay(session: Session, traj: Trajectory, result: RunResult, cancelled: Any) -> None:
    for _, d in session.replay(traj.steps, cancelled=cancelled):
        result.decisions.append(d)
        if d.stop and result.stop is None:
            result.stop = d


def _heuristics_only(traj: Trajectory, policy: PolicyConfig, cancelled: Any) -> RunResult:
    """Decisions of the model-free halts (no scores): what a harness still gets without a model."""
    session = Monitor(policy).start(traj.task, traj.agent or None, run=traj.id)
    session.diff = traj.submission
    result = RunResult(scores=[float("nan")] * len(traj.steps), threshold_origin="none (no model)")
    _replay(session, traj, result, cancelled)
    return result
