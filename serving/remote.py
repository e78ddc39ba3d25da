"""A monitor whose sessions live in a running `failfast serve` (`--url`), standard library only.

`RemoteMonitor(url).start(task, agent, run=, source=)` opens `POST /v1/sessions`; the session's
`observe(step)` posts the step (`/v1/sessions/{id}/steps`), `check()` asks `/check`, `end()`
deletes it (the service logs its end record). A service that is down, slow or answers badly gives
a `continue` decision with reason `monitor_error` (logged), never an exception: the run goes on.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from monitor.types import Decision, Step
from serving.service_http import ServiceError, _post_within, decision_from_dict

log = logging.getLogger(__name__)


def _call(url: str, method: str, body: dict[str, Any] | None, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method=method
    )
    raw = _post_within(request, timeout)
    return json.loads(raw) if raw else None


class RemoteSession:
    """One run's session in the service."""

    def __init__(self, base: str, sid: str, timeout: float) -> None:
        self.base, self.sid, self.timeout = base, sid, timeout
        self.k = 0

    def _decision(self, path: str, body: dict[str, Any] | None) -> Decision:
        try:
            return decision_from_dict(
                _call(f"{self.base}/v1/sessions/{self.sid}/{path}", "POST", body, self.timeout)
            )
        except (ServiceError, ValueError, TypeError) as e:
            log.error("monitor_error: %s; the run goes on", e)
            return Decision("continue", "monitor_error", step=self.k, evidence={"error": str(e)})

    def observe(self, step: Step) -> Decision:
        self.k += 1
        return self._decision("steps", step.to_dict())

    def check(self) -> Decision:
        return self._decision("check", None)

    def end(self) -> None:
        try:
            _call(f"{self.base}/v1/sessions/{self.sid}", "DELETE", None, self.timeout)
        except ServiceError as e:
            log.error("monitor_error: could not close session %s: %s", self.sid, e)


class NoSession:
    """What `start` gives when the service cannot open a session: every step is monitor_error."""

    def __init__(self, why: str = "the service could not open a session") -> None:
        self.k = 0
        self.why = why

    def observe(self, step: Step) -> Decision:
        self.k += 1
        return Decision("continue", "monitor_error", step=self.k, evidence={"error": self.why})

    def check(self) -> Decision:
        return Decision("continue", "monitor_error", step=self.k, evidence={"error": self.why})

    def end(self) -> None:
        return None


class RemoteMonitor:
    """Opens sessions in the `failfast serve` at `url` (each call within `timeout` seconds)."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def start(
        self,
        task: str = "",
        agent: str | None = None,
        *,
        run: str = "",
        source: str = "",
        instance_id: str = "",
    ) -> RemoteSession | NoSession:
        body = {"task": task, "agent": agent, "run": run, "source": source}
        if instance_id:  # sent only when named (a server before known tasks ignores it)
            body["instance_id"] = instance_id
        try:
            out = _call(f"{self.url}/v1/sessions", "POST", body, self.timeout)
            return RemoteSession(self.url, str(out["session_id"]), self.timeout)
        except (ServiceError, ValueError, KeyError, TypeError) as e:
            log.error("monitor_error: could not open a session at %s: %s", self.url, e)
            return NoSession(f"could not open a session at {self.url}: {e}")
