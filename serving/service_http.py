"""HTTP to a running `failfast serve`, standard library only: one deadline for the whole call.

Shared by the Claude Code hook's `--url` (serving.hooks.claude_code) and the session client
(serving.remote): `_post_within` sends a request (with the API key of `FAILFAST_API_KEY`) and
returns the answer's body or raises ServiceError; `decision_from_dict` reads a Decision back from
its JSON.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Any

from monitor.types import Decision, Flag, RestartPacket
from serving.keys import client_headers


class ServiceError(RuntimeError):
    """The scoring service could not be reached or gave an unusable answer."""


def _post_within(request: urllib.request.Request, timeout: float) -> bytes:
    """The answer's body, or ServiceError; the whole exchange must end within `timeout` seconds.

    The request carries `Authorization: Bearer $FAILFAST_API_KEY` when the variable is set (a
    service with `--api-key-file`); a 401 or 403 is a ServiceError like any other.

    urllib's timeout bounds each socket operation, so a service that sends a byte every few
    seconds would hold the hook forever; the call runs in a daemon thread and is abandoned at
    the deadline (the process exits right after the hook answers).
    """
    endpoint = request.full_url
    for name, value in client_headers().items():  # FAILFAST_API_KEY, on every call made here
        if not request.has_header(name):
            request.add_header(name, value)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            # No proxy from the environment: the transcript goes to the monitor service named by
            # --url and nowhere else (an http_proxy would otherwise receive loopback requests too).
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=timeout) as response:
                box["raw"] = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            hint = (
                " (set FAILFAST_API_KEY to a key of the service with the score scope)"
                if e.code in (401, 403)
                else ""
            )
            box["error"] = ServiceError(f"{endpoint} answered HTTP {e.code}: {detail}{hint}")
        except (urllib.error.URLError, OSError) as e:  # refused, DNS, timeout
            box["error"] = ServiceError(f"{endpoint} unreachable: {getattr(e, 'reason', e)}")
        except Exception as e:  # noqa: BLE001 - reported to the caller like any other failure
            box["error"] = ServiceError(f"{endpoint}: {e!r}")

    worker = threading.Thread(target=call, name="failfast-hook-post", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ServiceError(f"{endpoint} timed out: no full answer within {timeout:g} s (--timeout)")
    if "error" in box:
        raise box["error"]
    return box["raw"]


def decision_from_dict(d: dict[str, Any]) -> Decision:
    """A Decision from its `to_dict()` JSON (as /v1/score returns it); ValueError when malformed."""
    if not isinstance(d, dict) or d.get("action") not in ("continue", "warn", "stop"):
        raise ValueError(f"not a decision: {str(d)[:200]}")
    restart = d.get("restart")
    return Decision(
        action=d["action"],
        reason=str(d.get("reason", "ok")),
        score=None if d.get("score") is None else float(d["score"]),
        threshold=None if d.get("threshold") is None else float(d["threshold"]),
        step=int(d.get("step", 0)),
        evidence=dict(d.get("evidence") or {}),
        flags=[Flag(**f) for f in d.get("flags") or []],
        restart=RestartPacket(**restart) if restart else None,
    )
