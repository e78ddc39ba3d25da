"""Live sessions: open, step, check before a model call, close."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from monitor.textio import json_safe
from serving.schemas import SessionRequest, StepIn, note_ignored
from serving.sessions import Full
from serving.state import AppState, app_state, unknown_session

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


@router.post("/v1/sessions", status_code=201)
def open_session(req: SessionRequest, request: Request, state: State) -> Any:
    """Open a live session; returns its id and the thresholds it will use.

    At most `max_sessions` in all and `max_sessions_per_client` per client; when full, the
    idlest session is evicted if idle over `evict_idle_seconds` (serving/sessions.py). A scorer
    that cannot start a session leaves it the model-free halts, as everywhere (`Monitor.start`).
    """
    client = state.client_of(request)
    try:
        state.table.reserve(client)
    except Full as e:
        raise HTTPException(429, str(e)) from e
    try:
        session = state.monitor.start(
            req.task,
            req.agent,
            run=req.run,
            shadow=req.shadow,
            source=req.source,
            instance_id=req.instance_id,
        )
    except BaseException:
        state.table.cancel(client)
        raise
    scored = session.scorer
    sid = state.table.add(client, session, scored)
    session.session_id = sid
    return json_safe(
        {
            "session_id": sid,
            "threshold": scored.threshold if scored is not None else None,
            "warn_threshold": scored.warn_threshold if scored is not None else None,
            "threshold_origin": scored.threshold_origin
            if scored is not None
            else "none (no model)",
            "scorer": scored.scorer_name if scored is not None else None,
            "task_prior": getattr(scored, "task_prior", None) if scored is not None else None,
        }
    )


@router.post("/v1/sessions/{sid}/steps")
def add_step(sid: str, step: StepIn, state: State) -> Any:
    """Observe the next step of a live run -> Decision."""
    live = state.live(sid)
    with live.lock:
        _not_judged(sid, live)
        if live.steps >= state.cfg.max_steps:
            raise HTTPException(
                409, f"session {sid} reached the limit of {state.cfg.max_steps} steps"
            )
        with state.slots:
            decision = live.session.observe(step.to_step(live.steps))
        live.steps += 1
    return json_safe(note_ignored(decision.to_dict(), step.ignored()))


@router.post("/v1/sessions/{sid}/check")
def check(sid: str, state: State) -> Any:
    """Before the next model call: stop if a budget would be exceeded -> Decision."""
    live = state.live(sid)
    with live.lock:
        _not_judged(sid, live)
        return json_safe(live.session.check().to_dict())


def _not_judged(sid: str, live: Any) -> None:
    """409 for a session whose run already has a verdict: the run is over, and a stop after
    its verdict would leave the realized FPR counting it as it was when the verdict came."""
    if live.session.judged:
        raise HTTPException(
            409,
            f"session {sid}'s run already has a verdict: it is over; open a new session for a "
            "new run",
        )


@router.delete("/v1/sessions/{sid}", status_code=204)
def close(sid: str, state: State) -> Response:
    """Close a session (its cache is freed; its end record is logged)."""
    if state.table.close(sid) is None:  # closes it (end record) while a racing verdict finds it
        raise HTTPException(404, unknown_session(sid))
    return Response(status_code=204)
