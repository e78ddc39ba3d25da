"""Decision counters (Prometheus text export) and one JSON log line per decision.

A `DecisionLog` is shared by every session of a Monitor. Counting is cheap; the JSON line is
built only when it goes somewhere (a sink, or the `failfast.decisions` logger at DEBUG), so an
unlogged monitor stays fast.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from typing import Any, TextIO

from monitor.escape import prom_label
from monitor.types import Decision

logger = logging.getLogger("failfast.decisions")


def decision_record(
    decision: Decision,
    *,
    run: str = "",
    agent: str | None = None,
    resolved: bool | None = None,
    event: str = "observe",
    session: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON-ready record of one decision (what one log line holds).

    Args:
        session: the service's session id ("" outside the service: not written).
        extra: more fields; the "end" record of a run carries its per-step `scores` and
            `tokens`, `steps`, `stop_step` and `shadow` (what `failfast calibrate` rebuilds a
            run from, training.data.decisions).
    """
    out: dict[str, Any] = {
        "ts": round(time.time(), 3),
        "event": event,
        "run": run,
    }
    if session:
        out["session"] = session
    return out | {
        "agent": agent,
        "resolved": resolved,
        "step": decision.step,
        "action": decision.action,
        "reason": decision.reason,
        "score": decision.score,
        "threshold": decision.threshold,
        "evidence": decision.evidence,
        "flags": [{"name": f.name, "step": f.step, "evidence": f.evidence} for f in decision.flags],
        **(extra or {}),
    }


class DecisionLog:
    """Counts decisions by (action, reason) and flags by name; writes JSON lines.

    Args:
        sink: a text stream that gets one JSON line per decision; None: the
            `failfast.decisions` logger at DEBUG level.
        log_continue: also write lines for plain "continue / ok" decisions (always counted);
            the "end" record of a run is always written, so a log lists every run.
    """

    def __init__(self, sink: TextIO | None = None, *, log_continue: bool = False) -> None:
        self.sink = sink
        self.log_continue = log_continue
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.flags: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def append_to(cls, path: str | None, start: dict[str, Any] | None = None) -> DecisionLog:
        """A log appending line-buffered to the file `path` (None: no file), that file's lines
        opened by `start` (the scorer's serving.bundle.start_record); the caller closes `sink`."""
        if not path:
            return cls()
        log = cls(open(path, "a", buffering=1))  # noqa: SIM115 - held for the log's life
        if start is not None:
            log.write(start)
        return log

    def record(
        self,
        decision: Decision,
        *,
        run: str = "",
        agent: str | None = None,
        resolved: bool | None = None,
        event: str = "observe",
        session: str = "",
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Count a decision and write its line (see `decision_record`)."""
        with self._lock:
            if event != "end":  # the end record repeats the last decision: count its flags only
                self.decisions[(decision.action, decision.reason)] += 1
            for f in decision.flags:
                self.flags[f.name] += 1
        quiet = decision.action == "continue" and decision.reason == "ok" and not decision.flags
        if quiet and event != "end" and not self.log_continue:
            return
        if self.sink is None and not logger.isEnabledFor(logging.DEBUG):
            return
        self.write(
            decision_record(
                decision,
                run=run,
                agent=agent,
                resolved=resolved,
                event=event,
                session=session,
                extra=extra,
            )
        )

    def write(self, record: dict[str, Any]) -> None:
        """Write one record that is not a decision (e.g. a verdict) as a JSON line."""
        if self.sink is None and not logger.isEnabledFor(logging.DEBUG):
            return
        line = json.dumps(record, default=str)
        if self.sink is not None:
            with self._lock:
                self.sink.write(line + "\n")
        else:
            logger.debug(line)

    def prometheus_text(self) -> str:
        """Counters in the Prometheus text exposition format (version 0.0.4)."""
        lines = [
            "# HELP failfast_decisions_total Monitor decisions by action and reason.",
            "# TYPE failfast_decisions_total counter",
        ]
        with self._lock:
            for (action, reason), n in sorted(self.decisions.items()):
                a, r = prom_label(action), prom_label(reason)
                lines.append(f'failfast_decisions_total{{action="{a}",reason="{r}"}} {n}')
            lines += [
                "# HELP failfast_flags_total Review flags raised, by flag.",
                "# TYPE failfast_flags_total counter",
            ]
            for name, n in sorted(self.flags.items()):
                lines.append(f'failfast_flags_total{{flag="{prom_label(name)}"}} {n}')
        return "\n".join(lines) + "\n"
