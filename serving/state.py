"""What the HTTP service's routes share: the scorer, the limits, the monitor, the sessions."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fastapi import HTTPException, Request

from monitor.policy import PolicyConfig
from monitor.protocols import Scorer
from monitor.session import Monitor
from serving.auth import Refusals
from serving.keys import KeyRing
from serving.limits import ServiceConfig
from serving.metrics import Counter, Histogram
from serving.sessions import Live, SessionTable
from serving.verdicts import close_session, service_monitor


@dataclass
class AppState:
    """The service's state, one per app (`request.app.state.failfast`)."""

    scorer: Scorer
    cfg: ServiceConfig
    monitor: Monitor
    table: SessionTable
    slots: threading.BoundedSemaphore
    """Requests beyond `max_concurrent` queue here instead of oversubscribing the cores."""
    latency: Histogram = field(
        default_factory=lambda: Histogram(
            "failfast_request_seconds", "Request latency by endpoint."
        )
    )
    errors: Counter = field(
        default_factory=lambda: Counter(
            "failfast_errors_total", "Requests answered with an error, by status."
        )
    )
    started: float = field(default_factory=time.time)
    keys: KeyRing | None = None
    """The API keys every call but /healthz must carry (serving/auth.py); None: no keys."""
    refusals: Refusals = field(default_factory=Refusals)
    """Calls refused for want of a key or a scope (counted only with keys)."""

    @classmethod
    def build(
        cls,
        scorer: Scorer,
        cfg: ServiceConfig,
        policy: PolicyConfig | None = None,
        *,
        keys: KeyRing | None = None,
    ) -> AppState:
        """The state over `scorer` (its policy unless `policy`), with batching turned on."""
        monitor = service_monitor(scorer, policy or PolicyConfig.model_validate(scorer.policy), cfg)
        table = SessionTable(
            max_sessions=cfg.max_sessions,
            max_per_client=cfg.max_sessions_per_client,
            idle_seconds=cfg.session_idle_seconds,
            evict_idle_seconds=cfg.evict_idle_seconds,
            on_close=close_session,
        )
        scorer.enable_batching(cfg.batch_window_ms / 1000, cfg.max_batch)
        slots = threading.BoundedSemaphore(cfg.max_concurrent)
        return cls(scorer, cfg, monitor, table, slots, keys=keys)

    def client_of(self, request: Request) -> str:
        """Who a request comes from: the trusted client header when configured, else the peer."""
        if self.cfg.client_header and (named := request.headers.get(self.cfg.client_header)):
            return named.split(",")[0].strip()[:200]
        return request.client.host if request.client else "unknown"

    def live(self, sid: str) -> Live:
        """The open session `sid`; HTTP 404 when there is none."""
        live = self.table.get(sid)
        if live is None:
            raise HTTPException(404, unknown_session(sid))
        return live


def unknown_session(sid: str) -> str:
    return f"unknown session {sid!r} (never opened, deleted, expired or evicted)"


def app_state(request: Request) -> AppState:
    """The route dependency that hands a route its app's state."""
    state: AppState = request.app.state.failfast
    return state
