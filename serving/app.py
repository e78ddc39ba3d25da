"""The HTTP service (FastAPI): score whole transcripts, or follow live runs step by step.

    POST   /v1/score                   a whole transcript (text / base64, any supported format)
                                       or normalised steps -> scores + decisions
    POST   /v1/sessions                open a live session -> {session_id, thresholds}
    POST   /v1/sessions/{id}/check     before a model call -> Decision (budgets)
    POST   /v1/sessions/{id}/steps     one step -> Decision (KV cache: costs the step's tokens)
    DELETE /v1/sessions/{id}           close a session
    POST   /v1/sessions/{id}/verdict   a finished run's verdict; also POST /v1/verdicts, and
    GET    /v1/status                  realized FPR per group and drift (serving/verdicts.py)
    GET    /healthz, GET /metrics      liveness; Prometheus text (decisions by reason, latency)

With API keys (`keys`, serving/auth.py) every call but /healthz and the OpenAPI pages carries
`Authorization: Bearer KEY`: none or an unknown key 401, a key without the route's scope 403.
OpenAPI is served at /openapi.json and /docs. Every error body is {"error": message}: bad JSON
or base64 400, invalid fields (non-finite numbers, negative token counts, a bad file name) 422,
unknown sessions 404, a body or transcript over its limit 413, a body not received in time 408,
a session past `max_steps` 409, no room for a session 429, an unexpected failure 500. The limits
are the fields of ServiceConfig (docs/USAGE.md, "Limits the service enforces").

The routes live in serving/routes/ (sessions, score, verdicts, status), over the app's
serving.state.AppState.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from serving.auth import RequireKey
from serving.guard import Guard, error
from serving.keys import KeyRing
from serving.limits import ServiceConfig
from serving.routes import score, sessions, status, verdicts
from serving.schemas import ScoreRequest, SessionRequest, StepIn, steps_over
from serving.state import AppState

__all__ = ["ScoreRequest", "ServiceConfig", "SessionRequest", "StepIn", "create_app"]


def create_app(
    scorer: Scorer,
    config: ServiceConfig | None = None,
    policy: PolicyConfig | None = None,
    *,
    keys: KeyRing | None = None,
) -> FastAPI:
    """The FastAPI app over a loaded scorer (serving.Scorer, or any monitor.protocols.Scorer).

    Args:
        scorer: what scores the runs.
        config: service limits.
        policy: decision policy; None: the bundle's.
        keys: API keys every call but /healthz must carry (serving/auth.py); None: no keys.
    """
    state = AppState.build(scorer, config or ServiceConfig(), policy, keys=keys)
    app = FastAPI(
        title="failfast-monitor",
        description="Early-failure monitor for coding agents: scores and continue/warn/stop decisions.",
        version="1",
    )
    app.state.failfast = state
    for module in (score, sessions, verdicts, status):
        app.include_router(module.router)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _invalid_answer(exc.errors(), state.cfg.max_score_steps)

    app.state.sessions = state.table  # closed at shutdown by serving.server (their end records)
    if keys is not None:  # inside Guard: refusals are timed and counted by status there too
        app.add_middleware(RequireKey, keys=keys, refusals=state.refusals)
    app.add_middleware(
        Guard,
        max_body_bytes=state.cfg.max_body_bytes,
        body_timeout=state.cfg.body_timeout_seconds,
        latency=state.latency,
        errors=state.errors,
    )
    return app


def _invalid_answer(errs: Sequence[Any], max_steps: int) -> JSONResponse:
    """A body that failed validation: 400 bad JSON, 413 too many steps, else 422 with where."""
    if any(e.get("type") == "json_invalid" for e in errs):
        why = errs[0].get("ctx", {}).get("error", "")
        return error(400, f"request body is not valid JSON: {why}".strip())
    n = steps_over(errs)
    if n is not None:
        return error(413, f"{n} steps, over the limit of {max_steps} (--max-score-steps)")
    where = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errs[:5]
    )
    return error(422, f"invalid request: {where}")
