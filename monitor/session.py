"""The Monitor API a harness calls: `Monitor` opens one `Session` per run.

    monitor = Monitor(config, scorer=None)
    session = monitor.start(task=problem_statement, agent="mini-swe-agent")
    while True:
        if session.check().stop:          # before each model call: budgets
            break
        step = run_model_and_tool()
        decision = session.observe(step)  # after each step: signals, score, halts, flags
        if decision.stop:
            restart_with(decision.restart)
            break

When the run is over, `session.end()` logs its "end" record (per-step scores and tokens: what
`failfast calibrate` rebuilds the run from), and `session.verdict(resolved)` reports its verdict
to the Monitor's feedback (monitor.feedback: realized FPR per agent and the drift flag).

This module holds the `Monitor` (one config, scorer, decision log and feedback shared by its
sessions); the `Session` of one run is in monitor.monitored_run and is imported from here too
(`from monitor.session import Monitor, Session`).
"""

from __future__ import annotations

import logging

from monitor.decision_log import DecisionLog
from monitor.feedback import Feedback
from monitor.monitored_run import Session
from monitor.policy import PolicyConfig
from monitor.protocols import Scorer, takes_keyword

__all__ = ["Monitor", "Session"]

logger = logging.getLogger(__name__)


class Monitor:
    """Opens monitored sessions that share one config, scorer and decision log.

    Args:
        config: the decision policy (defaults: stuck patterns, context thrash and format
            errors on; budgets off; transcript-analyser rule off).
        scorer: a learned scorer (serving.Scorer or monitor.scripted.ScriptedScorer); None
            runs the heuristic halts only.
        log: where decisions are counted and logged; a fresh DecisionLog when None.
        feedback: where its sessions' verdicts go; None: one at the scorer's target over its
            bundle's threshold groups (`Feedback.for_scorer`), writing verdicts to `log`.
    """

    def __init__(
        self,
        config: PolicyConfig | None = None,
        scorer: Scorer | None = None,
        *,
        log: DecisionLog | None = None,
        feedback: Feedback | None = None,
    ) -> None:
        self.config = config or PolicyConfig()
        self.scorer = scorer
        self.log = log if log is not None else DecisionLog()
        self.feedback = (
            feedback if feedback is not None else Feedback.for_scorer(scorer, log=self.log)
        )

    def start(
        self,
        task: str = "",
        agent: str | None = None,
        *,
        run: str = "",
        shadow: bool = False,
        source: str = "",
        instance_id: str = "",
    ) -> Session:
        """Open a session for one run of `agent` on `task` (`run` names it in the log; `shadow`:
        the harness will not obey this run's stops, see monitor.feedback; `source`: the
        calibration group when thresholds are keyed by source; `instance_id`: the task's id,
        which a bundle with a verdict table of known tasks looks up, serving.task_prior)."""
        score_session = None
        if self.scorer is not None:
            # only a scorer that knows tasks is asked about one: StepScorer.start has no
            # instance_id, and a scorer without it must keep scoring (not fail to start)
            known = (
                {"instance_id": instance_id}
                if instance_id and takes_keyword(self.scorer.start, "instance_id")
                else {}
            )
            try:
                score_session = self.scorer.start(task, agent, source=source, **known)
            except Exception:
                logger.exception("scorer failed to start a session; heuristics only")
        return Session(
            self.config,
            score_session,
            task=task,
            agent=agent,
            log=self.log,
            run=run,
            feedback=self.feedback,
            shadow=shadow,
            source=source,
        )
