"""Verdicts of finished runs and the realized FPR they give (serving/verdicts.py says how).

POST /v1/sessions/{id}/verdict   {"resolved": true|false, "finished": null}  -> what was done
POST /v1/verdicts                {"session_id" | "run_id": ..., "resolved": ..., "finished": ...}
GET  /v1/status                  per group: runs, resolved, stopped_resolved, realized_fpr,
                                 interval, drift, flagged_at; the bundle's calibration
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request

from monitor.errors import VerdictError
from monitor.textio import json_safe
from serving.auth import key_name
from serving.sessions import Live
from serving.state import AppState, app_state
from serving.verdicts import VerdictFor, VerdictIn

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


def _take(
    state: AppState,
    live: Live | None,
    sid: str | None,
    run: str | None,
    body: VerdictIn,
    request: Request,
) -> Any:
    """Report `body` for the open (or closing) session `live`, else for the remembered run."""
    feedback = state.monitor.feedback
    by = key_name(request)  # the decision log records who gave it (a name, never the key)
    try:
        if live is not None:
            with live.lock:
                done = live.session.verdict(body.resolved, finished=body.finished, key_name=by)
            return json_safe(done)
        outcome = feedback.find(session=sid, run=run)
        if outcome is None:
            what = f"session {sid!r}" if sid else f"run {run!r}"
            raise HTTPException(
                404,
                f"unknown {what}: never opened, or closed longer ago than the "
                f"{feedback.keep} most recent sessions (--recent-runs)",
            )
        return json_safe(
            feedback.report(outcome, body.resolved, finished=body.finished, key_name=by)
        )
    except VerdictError as e:
        raise HTTPException(409, str(e)) from e


@router.post("/v1/sessions/{sid}/verdict")
def session_verdict(sid: str, body: VerdictIn, request: Request, state: State) -> Any:
    """Report a finished run's verdict by its session id (open or recently closed)."""
    live = state.table.get(sid) or state.table.closing(sid)
    return _take(state, live, sid, None, body, request)


@router.post("/v1/verdicts")
def verdicts(body: VerdictFor, request: Request, state: State) -> Any:
    """Report a finished run's verdict by `session_id` or by the harness's `run_id`."""
    if (body.session_id is None) == (body.run_id is None):
        raise HTTPException(422, "give exactly one of `session_id` or `run_id`")
    if body.session_id is not None:
        sid = body.session_id
        live = state.table.get(sid) or state.table.closing(sid)
        return _take(state, live, sid, None, body, request)
    assert body.run_id is not None
    found = state.table.find_run(body.run_id)
    return _take(state, found[1] if found else None, None, body.run_id, body, request)


@router.get("/v1/status")
def status(state: State) -> Any:
    """Per group: the realized FPR of the runs with verdicts, its anytime-valid interval and
    the drift flag; what calibrated the served thresholds."""
    bundle = state.scorer.bundle
    return json_safe(
        {
            **state.monitor.feedback.status(),
            "sessions_open": len(state.table),
            "bundle": bundle.path.name if bundle is not None else None,
            "bundle_sha256": (bundle.sha256 or None) if bundle is not None else None,
            "calibration": bundle.calibration if bundle is not None else None,
        }
    )
