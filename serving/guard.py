"""What stands between the network and the app: body size and time limits, one error body
shape, bounded metric labels, and a header timeout for uvicorn.

`Guard` is a plain ASGI middleware (no BaseHTTPMiddleware: it must see exceptions, and the
endpoint must still see a client disconnect). For every HTTP request it

- answers 413 when the body (declared or streamed) exceeds `max_body_bytes`, and 408 when the
  whole body has not arrived within `body_timeout` seconds (a client that never finishes its
  body no longer holds a connection and a task forever);
- turns an unhandled exception into a 500 `{"error": ...}` (logged with its traceback);
- records latency per `METHOD route` and errors per status, with bounded label values: a
  method outside `METHODS` is "OTHER", a path no route matches is "unmatched" (5,000 invented
  methods grew /metrics to 725 MB when the raw method was the label).

`header_timeout_protocol` closes connections whose request line and headers do not arrive
within a deadline, which uvicorn has no setting for (its keep-alive timer stops at the first
byte of a request).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from fastapi.responses import JSONResponse

from serving.metrics import Counter, Histogram

log = logging.getLogger(__name__)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""HTTP methods kept as metric labels; any other is counted as "OTHER"."""


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The service's one error body: `{"error": message}`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


_FORMS = (b"application/x-www-form-urlencoded", b"multipart/form-data")


def form_refusal(scope: dict) -> JSONResponse | None:
    """415 for a body sent as a form: every body this service takes is JSON. A browser page may
    post a form to a loopback service without asking (no CORS preflight), so a form is never
    read as JSON; curl's `-d` sends one unless told `-H 'content-type: application/json'`."""
    for k, v in scope.get("headers") or []:
        if k == b"content-type" and v.split(b";")[0].strip().lower() in _FORMS:
            return error(
                415,
                "request bodies are JSON: send `content-type: application/json` "
                "(curl: -H 'content-type: application/json')",
            )
    return None


class Guard:
    """ASGI middleware: body limit and deadline, error shape for 500s, bounded metrics.

    Args:
        app: the ASGI app.
        max_body_bytes: largest request body (413 beyond).
        body_timeout: seconds from the start of a request to the end of its body (408 beyond).
        latency: histogram labelled "METHOD route".
        errors: counter labelled by status code, for every answer >= 400.
    """

    def __init__(
        self,
        app: Any,
        *,
        max_body_bytes: int,
        body_timeout: float,
        latency: Histogram,
        errors: Counter,
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.body_timeout = body_timeout
        self.latency = latency
        self.errors = errors

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = anyio.current_time()
        status = [0]

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refused = form_refusal(scope)
            if refused is not None:
                await refused(scope, receive, send_status)
                return
            early, replay = await self._read_body(scope, receive)
            if early is not None:
                await early(scope, receive, send_status)
            else:
                await self.app(scope, replay, send_status)
        except Exception as e:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if status[0] == 0:  # nothing sent yet: answer in the documented shape
                await error(500, f"internal error ({type(e).__name__}); see the server log")(
                    scope, receive, send_status
                )
            status[0] = status[0] or 500
        finally:
            route = scope.get("route")
            method = scope.get("method", "")
            label = (
                f"{method if method in METHODS else 'OTHER'} {getattr(route, 'path', 'unmatched')}"
            )
            self.latency.observe(label, anyio.current_time() - t0)
            if status[0] >= 400:
                self.errors.inc(str(status[0]))

    async def _read_body(self, scope: dict, receive: Any) -> tuple[JSONResponse | None, Any]:
        """Read the whole body first (under the size limit and the deadline), then replay it.

        Returns (an error response, None), or (None, a `receive` that replays the body and then
        reports the client's later messages, e.g. a disconnect).
        """
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_big = error(413, f"request body over {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return too_big, None
        messages: list[dict] = []
        seen = 0
        with anyio.move_on_after(self.body_timeout) as scope_timer:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    return too_big, None
                if not message.get("more_body", False):
                    break
        if scope_timer.cancelled_caught:
            return error(
                408,
                f"request body not received within {self.body_timeout:g} s (--body-timeout)",
                {"connection": "close"},
            ), None

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        return None, replay


def header_timeout_protocol(seconds: float, write_timeout: float | None = None) -> type:
    """A uvicorn h11 protocol class that closes a connection when a request's line and headers
    have not all arrived `seconds` after the connection opened or the previous response ended,
    and (with `write_timeout`) aborts one whose client leaves a response unread longer than that
    in all (the time the transport's buffer stays over its high-water mark, summed per response).

    uvicorn's own keep-alive timer is cancelled by the first byte of a request, so a client that
    trickles its headers (or sends none after one byte) holds the connection forever; and it has
    no write timeout: a client that stops reading an 8 MB answer held its task, its buffer and a
    SIGTERM'd process for good. `abort()`, not `close()`: close waits for the buffer to drain.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):  # type: ignore[misc]
        _header_timer: Any = None
        _write_timer: Any = None
        _stalled = 0.0  # seconds this response has waited on the client to read
        _paused_at: float | None = None

        def pause_writing(self) -> None:
            super().pause_writing()
            if write_timeout is not None and self._write_timer is None:
                self._paused_at = self.loop.time()
                left = max(0.0, write_timeout - self._stalled)
                self._write_timer = self.loop.call_later(left, self._write_too_slow)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._disarm_write()

        def _disarm_write(self) -> None:
            if self._paused_at is not None:
                self._stalled += self.loop.time() - self._paused_at
                self._paused_at = None
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

        def _write_too_slow(self) -> None:
            self._write_timer = None
            log.info(
                "dropping %s: a response left unread for %g s (--write-timeout-seconds)",
                self.client,
                write_timeout,
            )
            self.transport.abort()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                log.info(
                    "closing %s: no complete request headers within %g s", self.client, seconds
                )
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a request's headers arrived: the app has it now
                self._disarm()
                self._stalled = 0.0  # a new response: its own write budget

        def on_response_complete(self) -> None:
            self._arm()  # before super(): a pipelined request handled there disarms it again
            super().on_response_complete()
            if self.transport.is_closing():
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._disarm_write()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
