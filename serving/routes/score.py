"""POST /v1/score: a whole transcript or list of steps -> scores and decisions."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import ValidationError

from monitor.errors import Cancelled, TranscriptError, TranscriptTooLarge
from monitor.textio import json_safe
from monitor.types import Trajectory
from serving.limits import ServiceConfig
from serving.runs import score_transcript
from serving.schemas import NUMBERS, STEP_LIMIT, ScoreRequest, StepIn, note_ignored
from serving.state import AppState, app_state
from serving.transcripts import read_transcript_bytes

log = logging.getLogger(__name__)
State = Annotated[AppState, Depends(app_state)]


async def _step_limit(state: State) -> None:
    """Runs before the body is validated, in its task: the body's step limit is this app's."""
    STEP_LIMIT.set(state.cfg.max_score_steps)


router = APIRouter(dependencies=[Depends(_step_limit)])


def _decode(req: ScoreRequest) -> bytes:
    assert req.transcript is not None
    try:
        if req.encoding == "base64":
            return base64.b64decode(req.transcript, validate=True)
        return req.transcript.encode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError) as e:
        raise HTTPException(400, f"transcript is not valid base64: {e}") from e


def read_run(req: ScoreRequest, cfg: ServiceConfig) -> Trajectory:
    """The request's run (its steps, or its transcript read within the limits); HTTPException
    with the status to answer otherwise."""
    if req.steps is not None:
        steps = [s.to_step(i) for i, s in enumerate(req.steps)]
        return Trajectory(
            id="request", instance_id="", agent=req.agent or "", task=req.task, steps=steps
        )
    try:
        traj = read_transcript_bytes(
            _decode(req), fmt=req.format, filename=req.filename, max_bytes=cfg.max_transcript_bytes
        )
    except TranscriptTooLarge as e:
        why = f"transcript {e.reason}".replace("--max-bytes", "--max-transcript-bytes")
        raise HTTPException(413, why) from e
    except TranscriptError as e:
        raise HTTPException(422, f"cannot read transcript: {e.reason}") from e
    if len(traj.steps) > cfg.max_score_steps:
        raise HTTPException(
            413,
            f"transcript has {len(traj.steps)} steps, over the limit of "
            f"{cfg.max_score_steps} (--max-score-steps)",
        )
    for step in traj.steps:  # the numbers a client could send as steps obey the same rules
        try:
            StepIn.model_validate({k: getattr(step, k) for k in NUMBERS})
        except ValidationError as e:
            what = "; ".join(f"{x['loc'][0]}: {x['msg']}" for x in e.errors())
            raise HTTPException(422, f"transcript step {step.index}: {what}") from e
    if req.task:
        traj.task = req.task
    return traj


def score_now(state: AppState, req: ScoreRequest, cancel: threading.Event) -> Any:
    """Read and score the run in a worker thread, holding one of the service's slots."""
    traj = read_run(req, state.cfg)
    if req.agent is not None:
        traj.agent = req.agent
    if req.source is not None:
        traj.source = req.source
    if req.instance_id is not None:
        traj.instance_id = req.instance_id
    if req.submission:
        traj.submission = req.submission
    while not state.slots.acquire(timeout=0.25):
        if cancel.is_set():
            raise Cancelled("the client went away while the request waited for a slot")
    try:
        result = score_transcript(
            state.scorer, traj, monitor=state.monitor, cancelled=cancel.is_set
        )
    finally:
        state.slots.release()
    ignored = sorted({f for s in req.steps or () for f in s.ignored()})
    return json_safe(note_ignored(result.to_dict(all_decisions=req.all_decisions), ignored))


@router.post("/v1/score")
async def score(req: ScoreRequest, request: Request, state: State) -> Any:
    """Score a whole run; returns scores per step, the thresholds and the decision.

    The work runs in a worker thread and stops (status 499 in the metrics) as soon as the
    client disconnects.
    """
    if (req.transcript is None) == (req.steps is None):
        raise HTTPException(422, "give exactly one of `transcript` or `steps`")
    cancel = threading.Event()

    async def watch_client() -> None:
        while not cancel.is_set():
            if await request.is_disconnected():
                cancel.set()
                return
            await anyio.sleep(0.2)

    outcome: Any
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch_client)
        try:  # raised after the group is closed: a task group would wrap it
            outcome = await anyio.to_thread.run_sync(score_now, state, req, cancel)
        except (HTTPException, Cancelled) as e:
            outcome = e
        finally:
            cancel.set()
            tasks.cancel_scope.cancel()
    if isinstance(outcome, Cancelled):
        log.info("/v1/score: %s", outcome)
        raise HTTPException(499, "the client closed the request; scoring stopped")
    if isinstance(outcome, HTTPException):
        raise outcome
    return outcome
