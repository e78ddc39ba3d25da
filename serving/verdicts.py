"""Verdict feedback in the HTTP service: the bodies, the monitor the routes share
(serving/routes/verdicts.py), closing sessions.

A verdict may arrive while the session is open or after it closed (DELETE, expiry, eviction): the
last `recent_runs` closed sessions are remembered (monitor.feedback), also across a restart
(serving/history.py reads them back from the decision log); one racing its DELETE is taken by
the session, before or after its end (never a 404). Each verdict's log record carries the name of
the API key that gave it (`key_name`, serving/keys.py). Answers: 404 for a session or
run neither open nor remembered, 409 for a second verdict of one run, 422 for a bad body. Which
verdicts count, and why a harness that obeys stops needs shadow runs: monitor/feedback.py.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, Field, StrictBool

from monitor.decision_log import DecisionLog
from monitor.feedback import Feedback
from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from monitor.session import Monitor
from serving.bundle import start_record
from serving.history import closed_sessions
from serving.limits import ServiceConfig
from serving.sessions import Live

log = logging.getLogger(__name__)


class VerdictIn(BaseModel):
    """A finished run's verdict."""

    # Strict: a verdict of "yes" or 1 is refused (422), not guessed; it sets the realized FPR.
    resolved: StrictBool = Field(description="The run's verdict (e.g. the SWE-bench harness's).")
    finished: StrictBool | None = Field(
        None,
        description="The run went on to its own end. Default: inferred; a stopped run counts as "
        "finished only when steps came after its stop (or it is a shadow session).",
    )


class VerdictFor(VerdictIn):
    """A verdict naming its run by session id or by the harness's run id (exactly one)."""

    session_id: str | None = Field(None, max_length=200)
    run_id: str | None = Field(None, max_length=1000)


def service_monitor(scorer: Scorer, policy: PolicyConfig, cfg: ServiceConfig) -> Monitor:
    """The Monitor of the service: its decision log (`decision_log` file, line-buffered) and
    its feedback at the scorer's target over the bundle's threshold groups."""
    # read before this start's record is appended: the sessions a verdict may still name, by
    # the bundle sha256 the start records carry
    bundle_sha256 = scorer.bundle.sha256 if scorer.bundle is not None else None
    earlier = (
        closed_sessions(cfg.decision_log, bundle_sha256, cfg.recent_runs)
        if cfg.decision_log
        else []
    )
    dlog = DecisionLog.append_to(
        cfg.decision_log, start_record(scorer) if cfg.decision_log else None
    )
    feedback = Feedback.for_scorer(
        scorer, alpha=cfg.drift_alpha, sample=cfg.watch_runs, keep=cfg.recent_runs, log=dlog
    )
    for outcome in earlier:
        feedback.closed(outcome)
    calibration = scorer.bundle.calibration if scorer.bundle is not None else None
    if calibration:
        log.info("thresholds: %s", describe_calibration(calibration))
    return Monitor(policy, scorer=scorer, log=dlog, feedback=feedback)


def close_session(sid: str, live: Live) -> None:
    """A session leaves the table: log its end record (per-step scores) and remember it for a
    verdict that comes later."""
    session = live.session
    with live.lock:
        if not session.ended:
            try:
                session.end()
            except Exception:  # the end record is bookkeeping: closing must still succeed
                log.exception("session %s: could not log its end record", sid)
        if session.feedback is not None:
            session.feedback.closed(session.outcome())


def describe_calibration(c: dict[str, Any]) -> str:
    """One line: who calibrated the thresholds, when, on what."""
    if c.get("by") == "failfast calibrate":
        groups = ", ".join(
            f"{g} ({v.get('resolved')} resolved of {v.get('runs')})"
            for g, v in (c.get("groups") or {}).items()
        )
        kept = ", ".join(c.get("kept") or {}) or "none"
        return (
            f"calibrated by failfast calibrate at {c.get('at')} on {groups or 'no group'} "
            f"({(c.get('data') or {}).get('kind')}); kept from before: {kept}"
        )
    if c.get("by") == "failfast train":
        per = ", ".join(
            f"{g} ({v.get('resolved')} resolved)" for g, v in (c.get("per_agent") or {}).items()
        )
        return f"calibrated by failfast train on its {c.get('records', 'val')} records: {per}"
    return str(c.get("note") or "no thresholds")
