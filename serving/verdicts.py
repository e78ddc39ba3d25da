"""Verdict feedback in the HTTP service: routes, the monitor they share, closing sessions.

    POST /v1/sessions/{id}/verdict   {"resolved": true|false, "finished": null}  -> what was done
    POST /v1/verdicts                {"session_id" | "run_id": ..., "resolved": ..., "finished": ...}
    GET  /v1/status                  per agent: runs, resolved, stopped_resolved, realized_fpr,
                                     interval, drift, flagged_at; the bundle's calibration

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

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from monitor.decision_log import DecisionLog
from monitor.errors import VerdictError
from monitor.feedback import Feedback
from monitor.policy import PolicyConfig
from monitor.session import Monitor
from monitor.textio import json_safe
from serving.auth import key_name
from serving.bundle import start_record
from serving.guard import error
from serving.history import closed_sessions
from serving.limits import ServiceConfig
from serving.sessions import Live, SessionTable

log = logging.getLogger(__name__)


class VerdictIn(BaseModel):
    """A finished run's verdict."""

    resolved: bool = Field(description="The run's verdict (e.g. the SWE-bench harness's).")
    finished: bool | None = Field(
        None,
        description="The run went on to its own end. Default: inferred; a stopped run counts as "
        "finished only when steps came after its stop (or it is a shadow session).",
    )


class VerdictFor(VerdictIn):
    """A verdict naming its run by session id or by the harness's run id (exactly one)."""

    session_id: str | None = Field(None, max_length=200)
    run_id: str | None = Field(None, max_length=1000)


def service_monitor(scorer: Any, policy: PolicyConfig, cfg: ServiceConfig) -> Monitor:
    """The Monitor of the service: its decision log (`decision_log` file, line-buffered) and
    its feedback at the scorer's target over the bundle's threshold groups."""
    # read before this start's record is appended: the sessions a verdict may still name, by
    # the bundle sha256 the start records carry
    bundle_sha256 = getattr(getattr(scorer, "bundle", None), "sha256", None)
    earlier = (
        closed_sessions(cfg.decision_log, bundle_sha256, cfg.recent_runs)
        if cfg.decision_log
        else []
    )
    sink = open(cfg.decision_log, "a", buffering=1) if cfg.decision_log else None  # noqa: SIM115
    dlog = DecisionLog(sink)
    if sink is not None:
        dlog.write(start_record(scorer))
    feedback = Feedback.for_scorer(
        scorer, alpha=cfg.drift_alpha, sample=cfg.watch_runs, keep=cfg.recent_runs, log=dlog
    )
    for outcome in earlier:
        feedback.closed(outcome)
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


def install(app: FastAPI, *, scorer: Any, table: SessionTable, feedback: Feedback) -> None:
    """Add the verdict and status routes to the service's app; log what calibrated the bundle."""
    bundle = getattr(scorer, "bundle", None)
    calibration = bundle.calibration if bundle is not None else None
    if calibration:
        log.info("thresholds: %s", describe_calibration(calibration))

    def take(
        live: Live | None, sid: str | None, run: str | None, body: VerdictIn, request: Request
    ) -> Any:
        by = key_name(request)  # the decision log records who gave it (a name, never the key)
        try:
            if live is not None:
                with live.lock:
                    done = live.session.verdict(body.resolved, finished=body.finished, key_name=by)
            else:
                outcome = feedback.find(session=sid, run=run)
                if outcome is None:
                    what = f"session {sid!r}" if sid else f"run {run!r}"
                    return error(
                        404,
                        f"unknown {what}: never opened, or closed longer ago than the "
                        f"{feedback.keep} most recent sessions (--recent-runs)",
                    )
                done = feedback.report(outcome, body.resolved, finished=body.finished, key_name=by)
        except VerdictError as e:
            return error(409, str(e))
        return json_safe(done)

    @app.post("/v1/sessions/{sid}/verdict")
    def session_verdict(sid: str, body: VerdictIn, request: Request) -> Any:
        """Report a finished run's verdict by its session id (open or recently closed)."""
        return take(table.get(sid) or table.closing(sid), sid, None, body, request)

    @app.post("/v1/verdicts")
    def verdicts(body: VerdictFor, request: Request) -> Any:
        """Report a finished run's verdict by `session_id` or by the harness's `run_id`."""
        if (body.session_id is None) == (body.run_id is None):
            return error(422, "give exactly one of `session_id` or `run_id`")
        if body.session_id is not None:
            sid = body.session_id
            return take(table.get(sid) or table.closing(sid), sid, None, body, request)
        assert body.run_id is not None
        found = table.find_run(body.run_id)
        return take(found[1] if found else None, None, body.run_id, body, request)

    @app.get("/v1/status")
    def status() -> Any:
        """Per agent: the realized FPR of the runs with verdicts, its anytime-valid interval and
        the drift flag; what calibrated the served thresholds."""
        return json_safe(
            {
                **feedback.status(),
                "sessions_open": len(table),
                "bundle": bundle.path.name if bundle is not None else None,
                "bundle_sha256": getattr(bundle, "sha256", None) or None,
                "calibration": calibration,
            }
        )


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
