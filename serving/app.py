"""The HTTP service (FastAPI): score whole transcripts, or follow live runs step by step.

    POST   /v1/score                   a whole transcript (text / base64, any supported format)
                                       or normalised steps -> scores + decisions
    POST   /v1/sessions                open a live session -> {session_id, thresholds}
    POST   /v1/sessions/{id}/check     before a model call -> Decision (budgets)
    POST   /v1/sessions/{id}/steps     one step -> Decision (KV cache: costs the step's tokens)
    DELETE /v1/sessions/{id}           close a session
    POST   /v1/sessions/{id}/verdict   a finished run's verdict; also POST /v1/verdicts, and
    GET    /v1/status                  realized FPR per agent and drift (serving/verdicts.py)
    GET    /healthz, GET /metrics      liveness; Prometheus text (decisions by reason, latency)

With API keys (`keys`, serving/auth.py) every call but /healthz and the OpenAPI pages carries
`Authorization: Bearer KEY`: none or an unknown key 401, a key without the route's scope 403.
OpenAPI is served at /openapi.json and /docs. Every error body is {"error": message}: bad JSON
or base64 400, invalid fields (non-finite numbers, negative token counts, a bad file name) 422,
unknown sessions 404, a body or transcript over its limit 413, a body not received in time 408,
a session past `max_steps` 409, no room for a session 429, an unexpected failure 500. The limits
are the fields of ServiceConfig (docs/USAGE.md, "Limits the service enforces").
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from monitor.errors import Cancelled, TranscriptError, TranscriptTooLarge
from monitor.policy import PolicyConfig
from monitor.session import Session
from monitor.textio import json_safe
from monitor.types import Trajectory
from serving.auth import Refusals, RequireKey
from serving.guard import Guard, error
from serving.keys import KeyRing
from serving.limits import ServiceConfig
from serving.metrics import Counter, Histogram, batch_gauges, gauge
from serving.runs import score_transcript
from serving.schemas import NUMBERS, ScoreRequest, SessionRequest, StepIn, steps_over
from serving.sessions import Full, Live, SessionTable
from serving.transcripts import read_transcript_bytes
from serving.verdicts import close_session, install, service_monitor

log = logging.getLogger(__name__)

__all__ = ["ScoreRequest", "ServiceConfig", "SessionRequest", "StepIn", "create_app"]


class _Refused(Exception):
    """A request refused while it was being worked on (status and message of the answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(
    scorer: Any,
    config: ServiceConfig | None = None,
    policy: PolicyConfig | None = None,
    *,
    keys: KeyRing | None = None,
) -> FastAPI:
    """The FastAPI app over a loaded serving.Scorer.

    Args:
        scorer: a serving.Scorer (or anything with start/score_run/thresholds/policy).
        config: service limits.
        policy: decision policy; None: the bundle's.
        keys: API keys every call but /healthz must carry (serving/auth.py); None: no keys.
    """
    cfg = config or ServiceConfig()
    monitor = service_monitor(scorer, policy or PolicyConfig.model_validate(scorer.policy), cfg)
    table = SessionTable(
        max_sessions=cfg.max_sessions,
        max_per_client=cfg.max_sessions_per_client,
        idle_seconds=cfg.session_idle_seconds,
        evict_idle_seconds=cfg.evict_idle_seconds,
        on_close=close_session,
    )
    if hasattr(scorer, "enable_batching"):  # concurrent sessions' steps share graph calls
        scorer.enable_batching(cfg.batch_window_ms / 1000, cfg.max_batch)
    # Requests beyond `max_concurrent` queue here instead of oversubscribing the cores.
    slots = threading.BoundedSemaphore(cfg.max_concurrent)
    latency = Histogram("failfast_request_seconds", "Request latency by endpoint.")
    errors = Counter("failfast_errors_total", "Requests answered with an error, by status.")
    refusals = Refusals()
    started = time.time()

    class ScoreBody(ScoreRequest):
        # The step limit is checked on the list's length before any step is validated (20,000
        # steps cost ~1 s of validation each time, 2 M steps of a 16 MB body ~6 s).
        steps: list[StepIn] | None = Field(None, max_length=cfg.max_score_steps)

    app = FastAPI(
        title="failfast-monitor",
        description="Early-failure monitor for coding agents: scores and continue/warn/stop decisions.",
        version="1",
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errs):
            return error(
                400,
                f"request body is not valid JSON: {errs[0].get('ctx', {}).get('error', '')}".strip(),
            )
        n = steps_over(errs)
        if n is not None:
            return error(
                413, f"{n} steps, over the limit of {cfg.max_score_steps} (--max-score-steps)"
            )
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errs[:5]
        )
        return error(422, f"invalid request: {where}")

    def client_of(request: Request) -> str:
        if cfg.client_header and (named := request.headers.get(cfg.client_header)):
            return named.split(",")[0].strip()[:200]
        return request.client.host if request.client else "unknown"

    def get_live(sid: str) -> Live | JSONResponse:
        live = table.get(sid)
        if live is None:
            return error(
                404, f"unknown session {sid!r} (never opened, deleted, expired or evicted)"
            )
        return live

    def read_run(req: ScoreRequest) -> Trajectory:
        """The request's run (steps or transcript), within the limits; _Refused otherwise."""
        if req.steps is not None:
            steps = [s.to_step(i) for i, s in enumerate(req.steps)]
            return Trajectory(
                id="request", instance_id="", agent=req.agent or "", task=req.task, steps=steps
            )
        assert req.transcript is not None
        try:
            data = (
                base64.b64decode(req.transcript, validate=True)
                if req.encoding == "base64"
                else req.transcript.encode("utf-8", "surrogatepass")
            )
        except (binascii.Error, ValueError) as e:
            raise _Refused(400, f"transcript is not valid base64: {e}") from e
        try:
            traj = read_transcript_bytes(
                data, fmt=req.format, filename=req.filename, max_bytes=cfg.max_transcript_bytes
            )
        except TranscriptTooLarge as e:
            raise _Refused(
                413, f"transcript {e.reason}".replace("--max-bytes", "--max-transcript-bytes")
            ) from e
        except TranscriptError as e:
            raise _Refused(422, f"cannot read transcript: {e.reason}") from e
        if len(traj.steps) > cfg.max_score_steps:
            raise _Refused(
                413,
                f"transcript has {len(traj.steps)} steps, over the limit of "
                f"{cfg.max_score_steps} (--max-score-steps)",
            )
        for step in traj.steps:  # the numbers a client could send as steps obey the same rules
            try:
                StepIn.model_validate({k: getattr(step, k) for k in NUMBERS})
            except ValidationError as e:
                what = "; ".join(f"{x['loc'][0]}: {x['msg']}" for x in e.errors())
                raise _Refused(422, f"transcript step {step.index}: {what}") from e
        if req.task:
            traj.task = req.task
        return traj

    def score_now(req: ScoreRequest, cancel: threading.Event) -> Any:
        traj = read_run(req)
        if req.agent is not None:
            traj.agent = req.agent
        if req.source is not None:
            traj.source = req.source
        if req.submission:
            traj.submission = req.submission
        while not slots.acquire(timeout=0.25):
            if cancel.is_set():
                raise Cancelled("the client went away while the request waited for a slot")
        try:
            result = score_transcript(scorer, traj, monitor=monitor, cancelled=cancel.is_set)
        finally:
            slots.release()
        return json_safe(result.to_dict(all_decisions=req.all_decisions))

    async def score(req: ScoreBody, request: Request) -> Any:
        """Score a whole run; returns scores per step, the thresholds and the decision.

        The work runs in a worker thread and stops (status 499 in the metrics) as soon as the
        client disconnects: 20,000 steps went on computing for two minutes after the client left.
        """
        if (req.transcript is None) == (req.steps is None):
            return error(422, "give exactly one of `transcript` or `steps`")
        cancel = threading.Event()

        async def watch_client() -> None:
            while not cancel.is_set():
                if await request.is_disconnected():
                    cancel.set()
                    return
                await anyio.sleep(0.2)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch_client)
            try:
                return await anyio.to_thread.run_sync(score_now, req, cancel)
            except _Refused as e:
                return error(e.status, e.message)
            except Cancelled as e:
                log.info("/v1/score: %s", e)
                return error(499, "the client closed the request; scoring stopped")
            finally:
                cancel.set()
                tasks.cancel_scope.cancel()

    score.__annotations__["req"] = ScoreBody  # a local class: not resolvable from its name
    app.post("/v1/score")(score)

    @app.post("/v1/sessions", status_code=201)
    def open_session(req: SessionRequest, request: Request) -> Any:
        """Open a live session; returns its id and the thresholds it will use.

        At most `max_sessions` in all and `max_sessions_per_client` per client; when full, the
        idlest session is evicted if idle over `evict_idle_seconds` (serving/sessions.py).
        """
        client = client_of(request)
        try:
            table.reserve(client)
        except Full as e:
            return error(429, str(e))
        try:
            score_session = scorer.start(req.task, req.agent, source=req.source)
            session = Session(
                monitor.config,
                score_session,
                task=req.task,
                agent=req.agent,
                source=req.source,
                log=monitor.log,
                run=req.run,
                feedback=monitor.feedback,
                shadow=req.shadow,
            )
        except BaseException:
            table.cancel(client)
            raise
        sid = table.add(client, session, score_session)
        session.session_id = sid
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
                return error(409, f"session {sid} reached the limit of {cfg.max_steps} steps")
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
        """Close a session (its cache is freed; its end record is logged)."""
        if table.close(sid) is None:  # closes it (end record) while a racing verdict finds it
            return error(
                404, f"unknown session {sid!r} (never opened, deleted, expired or evicted)"
            )
        return Response(status_code=204)

    @app.get("/healthz")
    def healthz() -> Any:
        """Liveness and what is loaded (the bundle's folder name and monitor.json sha256, never
        its path on this machine)."""
        table.expire()
        bundle = getattr(scorer, "bundle", None)
        return json_safe(
            {
                "status": "ok",
                "sessions": len(table),
                "bundle": bundle.path.name if bundle is not None else None,
                "bundle_sha256": getattr(bundle, "sha256", None) or None,
                "int8": bool(getattr(scorer, "int8", False)),
                "uptime_seconds": round(time.time() - started, 1),
            }
        )

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> PlainTextResponse:
        """Prometheus text: decisions by action and reason, request latency, errors, sessions."""
        text = (
            monitor.log.prometheus_text()
            + latency.text()
            + errors.text("status")
            + gauge("failfast_sessions_open", "Open live sessions.", len(table))
            + gauge(
                "failfast_sessions_evicted",
                "Sessions closed to make room for new ones since start.",
                table.evicted,
            )
            + gauge(
                "failfast_session_tokens_encoded",
                "Tokens the model encoded for live sessions since start.",
                getattr(scorer, "tokens_encoded", 0),
            )
            + batch_gauges(getattr(scorer, "batcher", None))
            + monitor.feedback.prometheus_text()
            + (refusals.text() if keys is not None else "")
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    install(app, scorer=scorer, table=table, feedback=monitor.feedback)
    app.state.sessions = table  # closed at shutdown by serving.server (their end records)
    if keys is not None:  # inside Guard: refusals are timed and counted by status there too
        app.add_middleware(RequireKey, keys=keys, refusals=refusals)
    app.add_middleware(
        Guard,
        max_body_bytes=cfg.max_body_bytes,
        body_timeout=cfg.body_timeout_seconds,
        latency=latency,
        errors=errors,
    )
    return app
