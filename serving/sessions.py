"""The live sessions of the HTTP service, with a quota per client and eviction of the idlest.

Why: without limits one client can open every session and lock the others out for the idle TTL.
Two rules bound what one client can take:

1. Quota per client: one client (the peer address, or the `X-Failfast-Client` header when the
   service is told to trust it behind a proxy) holds at most `max_per_client` open sessions;
   one more is a 429 for that client only.
2. Eviction of the idlest when full: when all `max_sessions` are taken, the session unused for
   longest is closed to make room, provided it has been idle at least `evict_idle_seconds`
   (default 60 s: a run between two steps is rarely silent that long, a leaked or abandoned
   session always is). Only when every session was used within that window is the answer 429.

A flood from many addresses therefore costs the other clients at most their idle sessions, and
only those idle over a minute; an evicted or expired session answers 404, and the harness can
open a new one (scores of a run can be recomputed: `POST /v1/score`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Live:
    """A session of the service: the monitor Session, its lock, its owner and its last use."""

    def __init__(self, session: Any, score_session: Any, client: str) -> None:
        self.session = session
        self.score_session = score_session
        self.client = client
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.steps = 0


class Full(Exception):
    """No room for another session (the message says which limit)."""


class SessionTable:
    """Open sessions by id, with the limits above. Thread-safe.

    Args:
        max_sessions: most open sessions in all.
        max_per_client: most open sessions of one client (0: no per-client limit).
        idle_seconds: a session unused this long expires.
        evict_idle_seconds: when the table is full, the idlest session is evicted if it has been
            unused at least this long.
        on_close: called with (id, session) for every session that expires or is evicted
            (outside the table's lock); `pop` leaves closing to its caller.
    """

    def __init__(
        self,
        *,
        max_sessions: int,
        max_per_client: int,
        idle_seconds: float,
        evict_idle_seconds: float,
        on_close: Callable[[str, Live], None] | None = None,
    ) -> None:
        self.on_close = on_close
        self.max_sessions = max_sessions
        self.max_per_client = max_per_client
        self.idle_seconds = idle_seconds
        self.evict_idle_seconds = evict_idle_seconds
        self._live: dict[str, Live] = {}
        self._closing: dict[str, Live] = {}  # taken out by `close`, its end not yet logged
        self._reserved: Counter[str] = Counter()  # slots taken by sessions being opened
        self._lock = threading.Lock()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._live)

    def expire(self) -> None:
        """Drop sessions idle longer than `idle_seconds`."""
        now = time.monotonic()
        gone: list[tuple[str, Live]] = []
        with self._lock:
            for sid in [s for s, v in self._live.items() if now - v.last_used > self.idle_seconds]:
                gone.append((sid, self._live.pop(sid)))
                log.info("session %s expired after %.0f s idle", sid, self.idle_seconds)
        self._closed(gone)

    def _closed(self, gone: list[tuple[str, Live]]) -> None:
        for sid, live in gone:
            if self.on_close is not None:
                try:
                    self.on_close(sid, live)
                except Exception:  # closing bookkeeping must never fail a request
                    log.exception("closing session %s failed", sid)

    def reserve(self, client: str) -> None:
        """Take a slot for `client` before the (slow) scorer start; Full when there is none."""
        self.expire()
        gone: list[tuple[str, Live]] = []
        with self._lock:
            mine = self._reserved[client] + sum(v.client == client for v in self._live.values())
            if self.max_per_client and mine >= self.max_per_client:
                raise Full(
                    f"this client has {mine} open sessions, the most one client may hold "
                    f"(--max-sessions-per-client {self.max_per_client}); close some first"
                )
            if len(self._live) + sum(self._reserved.values()) >= self.max_sessions:
                gone.append(self._evict_idlest())
            self._reserved[client] += 1
        self._closed(gone)

    def _evict_idlest(self) -> tuple[str, Live]:
        now = time.monotonic()
        idlest = min(self._live.items(), key=lambda kv: kv[1].last_used, default=None)
        if idlest is None or now - idlest[1].last_used < self.evict_idle_seconds:
            raise Full(
                f"too many open sessions ({self.max_sessions}, all used within the last "
                f"{self.evict_idle_seconds:g} s); close some first"
            )
        del self._live[idlest[0]]
        self.evicted += 1
        log.info(
            "session %s of %s evicted after %.0f s idle: the table is full",
            idlest[0],
            idlest[1].client,
            now - idlest[1].last_used,
        )
        return idlest

    def add(self, client: str, session: Any, score_session: Any) -> str:
        """Turn `client`'s reservation into an open session; returns its id."""
        sid = uuid.uuid4().hex
        with self._lock:
            self._release(client)
            self._live[sid] = Live(session, score_session, client)
        return sid

    def cancel(self, client: str) -> None:
        """Give back a reservation whose session could not be opened."""
        with self._lock:
            self._release(client)

    def _release(self, client: str) -> None:
        self._reserved[client] -= 1
        if self._reserved[client] <= 0:
            del self._reserved[client]

    def get(self, sid: str) -> Live | None:
        """The open session `sid` (its last use set to now), or None."""
        self.expire()
        with self._lock:
            live = self._live.get(sid)
            if live is not None:
                live.last_used = time.monotonic()
        return live

    def pop(self, sid: str) -> Live | None:
        with self._lock:
            return self._live.pop(sid, None)

    def close(self, sid: str) -> Live | None:
        """Take `sid` out and close it (`on_close`); None when it is not open. While it closes
        it stays findable through `closing`, so a verdict racing the close reaches the session
        instead of a 404 (the session's lock orders the two)."""
        with self._lock:
            live = self._live.pop(sid, None)
            if live is None:
                return None
            self._closing[sid] = live
        try:
            self._closed([(sid, live)])
        finally:
            with self._lock:
                self._closing.pop(sid, None)
        return live

    def closing(self, sid: str) -> Live | None:
        """A session being closed right now (see `close`), or None."""
        with self._lock:
            return self._closing.get(sid)

    def drain(self) -> list[tuple[str, Live]]:
        """Take every open session out of the table (shutdown); closing is the caller's."""
        with self._lock:
            gone = list(self._live.items())
            self._live.clear()
        return gone

    def find_run(self, run: str) -> tuple[str, Live] | None:
        """The open session of harness run id `run` (the latest opened when several share it)."""
        with self._lock:
            found = [(sid, v) for sid, v in self._live.items() if v.session.run == run]
        return found[-1] if found else None
