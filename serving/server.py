"""Run the service under uvicorn with deadlines that hold whatever clients do (`failfast serve`).

- Per connection: request headers within `header_timeout_seconds`, and a response left unread
  at most `write_timeout_seconds` in all (serving.guard.header_timeout_protocol).
- On SIGTERM / SIGINT: no new connections; requests in progress get `shutdown_timeout_seconds`,
  then uvicorn cancels them; every open session is closed (its end record logged, as a DELETE
  would) and `serve` returns. A watchdog ends the process `HARD_EXIT_GRACE` seconds after that
  deadline if anything still holds it (a thread stuck in a model call, a socket that never
  drains), so the process is gone within a few seconds of the signal in every case.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from serving.limits import ServiceConfig

log = logging.getLogger(__name__)

HARD_EXIT_GRACE = 2.0
"""Seconds past the graceful-shutdown deadline after which the process exits regardless."""


def close_open_sessions(app: Any, *, lock_wait: float = 1.0) -> int:
    """Close every session still open (end record logged, remembered for a late verdict);
    returns how many. A session whose lock is held past `lock_wait` (a step still being scored)
    is left: shutdown must not wait on it."""
    from serving.verdicts import close_session

    table = getattr(app.state, "sessions", None)
    if table is None:
        return 0
    n = 0
    for sid, live in table.drain():
        if not live.lock.acquire(timeout=lock_wait):
            log.error("session %s: busy at shutdown, its end record is not logged", sid)
            continue
        live.lock.release()
        close_session(sid, live)
        n += 1
    return n


def _hard_exit_after(seconds: float) -> None:
    def fire() -> None:
        log.error("shutdown deadline passed by %g s: exiting now", HARD_EXIT_GRACE)
        sys.stderr.flush()
        os._exit(0)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket listening on host:port (port 0: any free one), as uvicorn would bind it
    (IPv6 when the host has a colon, else IPv4: `localhost` is 127.0.0.1, "" every interface).

    Raises:
        OSError: the address cannot be bound (in use, not this machine's, no permission), named.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)  # connections from now on wait for the server, none is refused
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def serve(
    app: Any,
    cfg: ServiceConfig,
    *,
    host: str,
    port: int,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve `app` (serving.app.create_app) until SIGTERM / SIGINT, within the deadlines above.
    The address is bound first (OSError when it cannot be); then `ready(port)` is called (the
    port bound, which port 0 picks), so "listening" is never said of an address in use."""
    import uvicorn

    from serving.guard import header_timeout_protocol

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=header_timeout_protocol(cfg.header_timeout_seconds, cfg.write_timeout_seconds),
        limit_concurrency=cfg.max_connections,
        timeout_graceful_shutdown=max(1, round(cfg.shutdown_timeout_seconds)),
    )

    class Server(uvicorn.Server):  # type: ignore[misc]
        _deadline_armed = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self._deadline_armed:
                self._deadline_armed = True
                _hard_exit_after(cfg.shutdown_timeout_seconds + HARD_EXIT_GRACE)
            super().handle_exit(sig, frame)

    sock = bind(host, port)
    if ready is not None:
        ready(sock.getsockname()[1])
    server = Server(config)
    # uvicorn re-raises the signal it caught once it has shut down; with the default handlers
    # that kills the process before the sessions below are closed, so take it quietly here.
    before = {sig: signal.signal(sig, _taken) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        closed = close_open_sessions(app)
        if closed:
            log.warning("closed %d open sessions at shutdown (end records logged)", closed)
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _taken(sig: int, frame: Any) -> None:
    """The signal uvicorn re-raises after its shutdown: already handled."""
