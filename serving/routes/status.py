"""GET /healthz (liveness, what is loaded) and GET /metrics (Prometheus text)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from monitor.textio import json_safe
from serving.metrics import batch_gauges, gauge
from serving.state import AppState, app_state

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


@router.get("/healthz")
def healthz(state: State) -> Any:
    """Liveness and what is loaded (the bundle's folder name and monitor.json sha256, never
    its path on this machine)."""
    state.table.expire()
    bundle = state.scorer.bundle
    return json_safe(
        {
            "status": "ok",
            "sessions": len(state.table),
            "bundle": bundle.path.name if bundle is not None else None,
            "bundle_sha256": (bundle.sha256 or None) if bundle is not None else None,
            "int8": bool(state.scorer.int8),
            "uptime_seconds": round(time.time() - state.started, 1),
        }
    )


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(state: State) -> PlainTextResponse:
    """Prometheus text: decisions by action and reason, request latency, errors, sessions."""
    table = state.table
    text = (
        state.monitor.log.prometheus_text()
        + state.latency.text()
        + state.errors.text("status")
        + gauge("failfast_sessions_open", "Open live sessions.", len(table))
        + gauge(
            "failfast_sessions_evicted",
            "Sessions closed to make room for new ones since start.",
            table.evicted,
        )
        + gauge(
            "failfast_session_tokens_encoded",
            "Tokens the model encoded for live sessions since start.",
            state.scorer.tokens_encoded,
        )
        + batch_gauges(state.scorer.batcher)
        + state.monitor.feedback.prometheus_text()
        + (state.refusals.text() if state.keys is not None else "")
    )
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
