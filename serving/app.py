"""The HTTP service (FastAPI): score whole transcripts, or follow live runs step by step.

    POST   /v1/score                   a whole transcript (text / base64, any supported format)
                                       or normalised steps -> scores + decisions
    POST   /v1/sessions                open a live session -> {session_id, thresholds}
    POST   /v1/sessions/{id}/check     before a model call -> Decision (budgets)
    POST   /v1/sessions/{id}/steps     one step -> Decision (KV cache: costs the step's tokens)
    DELETE /v1/sessions/{id}           close a session
    GET    /healthz, GET /metrics      liveness; Prometheus text (decisions by reason, latency)

OpenAPI is served at /openapi.json and /docs. Bodies over `max_body_bytes` get 413, bad JSON 400,
invalid fields 422, unknown sessions 404, a session past `max_steps` 409, too many sessions 429;
every error body is {"error": message}. Idle sessions expire after `session_idle_seconds`.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from monitor.config import StrictModel
from monitor.errors import TranscriptError
from monitor.policy import PolicyConfig
from monitor.session import Monitor
from monitor.textio import json_safe
from monitor.types import Step, Trajectory
from serving.metrics import Counter, Histogram, gauge
from serving.runs import score_transcript
from serving.transcripts import read_transcript_bytes

log = logging.getLogger(__name__)


class ServiceConfig(StrictModel):
    """Limits of the HTTP service."""

    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest request body."
    )
    max_steps: int = Field(default=5000, ge=1, description="Most steps one session may receive.")
    max_sessions: int = Field(default=1024, ge=1, description="Most open sessions at once.")
    max_concurrent: int = Field(
        default=32,
        ge=1,
        description="Model calls run at once (more wait). 32 on 2 cores gave 2x the throughput of 2 "
        "(bench/bench_load.py), lower it to bound memory.",
    )
    session_idle_seconds: float = Field(
        default=1800.0, gt=0, description="Idle sessions expire after this."
    )


class StepIn(BaseModel):
    """One normalised step (monitor.types.Step fields; all but `index` optional)."""

    index: int | None = None
    kind: str = "action"
    thought: str = ""
    tool: str = ""
    action: str = ""
    args: dict[str, Any] | None = None
    observation: str = ""
    is_error: bool = False
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = True
    cost_usd: float | None = None
    timestamp: float | None = None
    role: str = ""

    def to_step(self, index: int) -> Step:
        d = self.model_dump()
        d["index"] = index if self.index is None else self.index
        return Step.from_dict(d)


class ScoreRequest(BaseModel):
    """A whole run: `transcript` (native format) or `steps` (normalised)."""

    transcript: str | None = Field(None, description="Transcript content (text, or base64).")
    encoding: Literal["text", "base64"] = "text"
    format: str | None = Field(None, description="Reader name; sniffed when absent.")
    filename: str = Field("transcript.json", description="Name hint for readers.")
    steps: list[StepIn] | None = None
    task: str = ""
    agent: str | None = Field(None, description="Agent family (overrides the transcript's).")
    submission: str = Field(
        "", description="The run's current diff (overrides the transcript's; a stop hands it on)."
    )
    all_decisions: bool = Field(False, description="Return the Decision after every step.")


class SessionRequest(BaseModel):
    task: str = ""
    agent: str | None = None
    run: str = ""


class _Live:
    """A session of the service: the monitor Session, its lock, and its last use."""

    def __init__(self, session: Any, score_session: Any) -> None:
        self.session = session
        self.score_session = score_session
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.steps = 0


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _BodyLimit:
    """ASGI middleware: 413 when a request body (declared or streamed) exceeds the limit.

    A body without Content-Length (chunked) is read here first, up to the limit, and then replayed
    to the app: an overflow raised inside FastAPI's body parsing would come out as a 400.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_big = _error(413, f"request body over {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_big(scope, receive, send)
            return
        messages: list[dict] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.limit:
                await too_big(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def create_app(
    scorer: Any, config: ServiceConfig | None = None, policy: PolicyConfig | None = None
) -> FastAPI:
    """The FastAPI app over a loaded serving.Scorer.

    Args:
        scorer: a serving.Scorer (or anything with start/score_run/thresholds/policy).
        config: service limits.
        policy: decision policy; None: the bundle's.
    """
    cfg = config or ServiceConfig()
    monitor = Monitor(policy or PolicyConfig.model_validate(scorer.policy), scorer=scorer)
    sessions: dict[str, _Live] = {}
    opening = [0]  # sessions being opened: counted against max_sessions (guarded by the lock)
    sessions_lock = threading.Lock()
    # Requests beyond `max_concurrent` queue here instead of oversubscribing the cores.
    slots = threading.BoundedSemaphore(cfg.max_concurrent)
    latency = Histogram("failfast_request_seconds", "Request latency by endpoint.")
    errors = Counter("failfast_errors_total", "Requests answered with an error, by status.")
    started = time.time()

    app = FastAPI(
        title="failfast-monitor",
        description="Early-failure monitor for coding agents: scores and continue/warn/stop decisions.",
        version="1",
    )

    @app.middleware("http")
    async def timing(request: Request, call_next: Any) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        label = getattr(route, "path", "unmatched")
        latency.observe(f"{request.method} {label}", time.perf_counter() - t0)
        if response.status_code >= 400:
            errors.inc(str(response.status_code))
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errs):
            return _error(
                400,
                f"request body is not valid JSON: {errs[0].get('ctx', {}).get('error', '')}".strip(),
            )
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errs[:5]
        )
        return _error(422, f"invalid request: {where}")

    def expire() -> None:
        now = time.monotonic()
        with sessions_lock:
            for sid in [
                s for s, live in sessions.items() if now - live.last_used > cfg.session_idle_seconds
            ]:
                del sessions[sid]
                log.info("session %s expired after %.0f s idle", sid, cfg.session_idle_seconds)

    def get_live(sid: str) -> _Live | JSONResponse:
        expire()
        with sessions_lock:
            live = sessions.get(sid)
        if live is None:
            return _error(404, f"unknown session {sid!r} (never opened, deleted, or expired)")
        live.last_used = time.monotonic()
        return live

    @app.post("/v1/score")
    def score(req: ScoreRequest) -> Any:
        """Score a whole run; returns scores per step, the thresholds and the decision."""
        if (req.transcript is None) == (req.steps is None):
            return _error(422, "give exactly one of `transcript` or `steps`")
        if req.transcript is not None:
            try:
                data = (
                    base64.b64decode(req.transcript, validate=True)
                    if req.encoding == "base64"
                    else req.transcript.encode()
                )
            except (binascii.Error, ValueError) as e:
                return _error(400, f"transcript is not valid base64: {e}")
            try:
                traj = read_transcript_bytes(data, fmt=req.format, filename=req.filename)
            except TranscriptError as e:
                return _error(422, f"cannot read transcript: {e.reason}")
            if req.task:
                traj.task = req.task
        else:
            steps = [s.to_step(i) for i, s in enumerate(req.steps or [])]
            traj = Trajectory(
                id="request", instance_id="", agent=req.agent or "", task=req.task, steps=steps
            )
        if req.agent is not None:
            traj.agent = req.agent
        if req.submission:
            traj.submission = req.submission
        with slots:
            result = score_transcript(scorer, traj, monitor=monitor)
        return json_safe(result.to_dict(all_decisions=req.all_decisions))

    @app.post("/v1/sessions", status_code=201)
    def open_session(req: SessionRequest) -> Any:
        """Open a live session; returns its id and the thresholds it will use."""
        expire()
        with sessions_lock:
            if len(sessions) + opening[0] >= cfg.max_sessions:
                return _error(429, f"too many open sessions ({cfg.max_sessions}); close some first")
            opening[0] += 1  # reserve the slot before the (slow) scorer start
        try:
            score_session = scorer.start(req.task, req.agent)
            from monitor.session import Session

            session = Session(
                monitor.config,
                score_session,
                task=req.task,
                agent=req.agent,
                log=monitor.log,
                run=req.run,
            )
            sid = uuid.uuid4().hex
            with sessions_lock:
                sessions[sid] = _Live(session, score_session)
        finally:
            with sessions_lock:
                opening[0] -= 1
        return json_safe(
            {
                "session_id": sid,
                "threshold": score_session.threshold,
                "warn_threshold": score_session.warn_threshold,
                "threshold_source": getattr(score_session, "threshold_source", ""),
            }
        )

    @app.post("/v1/sessions/{sid}/steps")
    def add_step(sid: str, step: StepIn) -> Any:
        """Observe the next step of a live run -> Decision."""
        live = get_live(sid)
        if isinstance(live, JSONResponse):
            return live
        with live.lock:
            if live.steps >= cfg.max_steps:
                return _error(409, f"session {sid} reached the limit of {cfg.max_steps} steps")
            with slots:
                decision = live.session.observe(step.to_step(live.steps))
            live.steps += 1
        return json_safe(decision.to_dict())

    @app.post("/v1/sessions/{sid}/check")
    def check(sid: str) -> Any:
        """Before the next model call: stop if a budget would be exceeded -> Decision."""
        live = get_live(sid)
        if isinstance(live, JSONResponse):
            return live
        with live.lock:
            return json_safe(live.session.check().to_dict())

    @app.delete("/v1/sessions/{sid}", status_code=204)
    def close(sid: str) -> Response:
        """Close a session (its cache is freed)."""
        with sessions_lock:
            live = sessions.pop(sid, None)
        if live is None:
            return _error(404, f"unknown session {sid!r} (never opened, deleted, or expired)")
        return Response(status_code=204)

    @app.get("/healthz")
    def healthz() -> Any:
        """Liveness and what is loaded."""
        expire()
        bundle = getattr(scorer, "bundle", None)
        return {
            "status": "ok",
            "sessions": len(sessions),
            "bundle": str(bundle.path) if bundle is not None else None,
            "int8": bool(getattr(scorer, "int8", False)),
            "uptime_seconds": round(time.time() - started, 1),
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Prometheus text: decisions by action and reason, request latency, errors, sessions."""
        text = (
            monitor.log.prometheus_text()
            + latency.text()
            + errors.text("status")
            + gauge("failfast_sessions_open", "Open live sessions.", len(sessions))
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    app.add_middleware(_BodyLimit, limit=cfg.max_body_bytes)
    return app
