"""API keys in the HTTP service: an ASGI middleware that asks every call for a key with the
route's scope (`failfast serve --api-key-file`; the key file: serving/keys.py).

    Authorization: Bearer KEY      on every call but the open ones
    none, or not a key             401 {"error": ...} with `WWW-Authenticate: Bearer`
    a key without the scope        403
    open                           GET /healthz, /docs, /redoc, /openapi.json

Scopes by route: `score` POST /v1/score, /v1/sessions, /v1/sessions/{id}/steps and /check,
DELETE /v1/sessions/{id}; `verdict` POST /v1/sessions/{id}/verdict and /v1/verdicts; `admin`
GET /v1/status and /metrics, and any path not listed here (deny by default: a route added
later is closed until it is given a scope here).

The check runs on the request line and headers only, before the body is read. Refusals are
counted in /metrics by route template and status (`failfast_auth_refused_total`), never with
the key, the path as sent, or anything else a client chooses as a label; log lines name the
route, the client address and, for a 403, the key's name.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from serving.guard import METHODS, error
from serving.keys import KeyRing

log = logging.getLogger(__name__)

SCOPE_KEY = "failfast.api_key"
"""The ASGI scope entry that holds the ApiKey a request was let in with."""
MAX_TOKEN_CHARS = 4096
_OPEN = frozenset({"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
_ROUTES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), template, scope)
    for pattern, template, scope in (
        (r"/v1/score", "/v1/score", "score"),
        (r"/v1/sessions", "/v1/sessions", "score"),
        (r"/v1/sessions/[^/]+", "/v1/sessions/{id}", "score"),
        (r"/v1/sessions/[^/]+/steps", "/v1/sessions/{id}/steps", "score"),
        (r"/v1/sessions/[^/]+/check", "/v1/sessions/{id}/check", "score"),
        (r"/v1/sessions/[^/]+/verdict", "/v1/sessions/{id}/verdict", "verdict"),
        (r"/v1/verdicts", "/v1/verdicts", "verdict"),
        (r"/v1/status", "/v1/status", "admin"),
        (r"/metrics", "/metrics", "admin"),
    )
)
LOG_EVERY = 10.0
"""Seconds between log lines about refused calls (the counters count every one)."""


def route_of(path: str) -> tuple[str, str | None]:
    """(route template, scope needed) of a request path; scope None: open to all."""
    if path in _OPEN:
        return path, None
    for pattern, template, scope in _ROUTES:
        if pattern.fullmatch(path):
            return template, scope
    return "unmatched", "admin"


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of the request's one `Authorization: Bearer TOKEN` header, else None."""
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        return None
    return token


def key_name(request: Any) -> str | None:
    """The name of the key a FastAPI request was let in with (None: the service has no keys)."""
    key = request.scope.get(SCOPE_KEY)
    return key.name if key is not None else None


class Refusals:
    """401 and 403 answers by (METHOD route, status), as Prometheus text."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def inc(self, route: str, status: int) -> None:
        with self._lock:
            self.counts[(route, status)] = self.counts.get((route, status), 0) + 1

    def text(self) -> str:
        name = "failfast_auth_refused_total"
        lines = [
            f"# HELP {name} Calls refused for want of a key (401) or of a scope (403), by route.",
            f"# TYPE {name} counter",
        ]
        with self._lock:
            for (route, status), n in sorted(self.counts.items()):
                lines.append(f'{name}{{route="{route}",status="{status}"}} {n}')
        return "\n".join(lines) + "\n"


class RequireKey:
    """ASGI middleware: a call must carry a key of `keys` with its route's scope.

    Args:
        app: the ASGI app.
        keys: the service's KeyRing (reloaded in place on SIGHUP).
        refusals: where 401s and 403s are counted.
    """

    def __init__(self, app: Any, *, keys: KeyRing, refusals: Refusals) -> None:
        self.app = app
        self.keys = keys
        self.refusals = refusals
        self._logged = -LOG_EVERY
        self._unlogged = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        route, needed = route_of(scope.get("path", ""))
        if needed is None:
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        label = f"{method if method in METHODS else 'OTHER'} {route}"
        token = bearer(scope.get("headers") or [])
        key = self.keys.find(token) if token is not None else None
        if key is None:
            self._refused(scope, label, 401, "no key" if token is None else "not a key")
            answer = error(
                401,
                "this service needs an API key: send `Authorization: Bearer KEY` (clients of "
                "this package read it from FAILFAST_API_KEY)"
                if token is None
                else "the API key sent is not one of this service's keys (revoked, mistyped, "
                "or from another service's key file)",
                {"WWW-Authenticate": 'Bearer realm="failfast"'},
            )
        elif needed not in key.scopes:
            self._refused(scope, label, 403, f"key {key.name} lacks the {needed} scope")
            answer = error(403, f"key {key.name!r} lacks the `{needed}` scope that {label} needs")
        else:
            scope[SCOPE_KEY] = key
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            await answer(scope, receive, send)
        else:  # no websocket routes today; refuse the handshake all the same
            await send({"type": "websocket.close", "code": 1008})

    def _refused(self, scope: dict, label: str, status: int, why: str) -> None:
        self.refusals.inc(label, status)
        now = time.monotonic()
        if now - self._logged < LOG_EVERY:
            self._unlogged += 1
            return
        client = scope.get("client") or ("unknown", 0)
        more = f" ({self._unlogged} more refused since the last line)" if self._unlogged else ""
        log.warning("%d on %s from %s: %s%s", status, label, client[0], why, more)
        self._logged, self._unlogged = now, 0
