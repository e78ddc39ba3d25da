"""The sessions a service's decision log remembers from before its start: what a verdict may
still name after a restart, and which of them already have one.

A verdict is taken only for a session that is open, or that closed and is remembered
(monitor.feedback keeps the last `recent_runs`); without this module a restart forgot every
closed session (a verdict for it was 404) and every verdict given (a second one was taken). At
start the service reads its `--decision-log` once and remembers, as closed, the last
`recent_runs` sessions with an "end" record that were scored by the same bundle (the sha256 of
the "start" record before them), each with its verdict when the log has one. Sessions another
bundle scored are not restored: their stops say nothing of this bundle's FPR.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from monitor.feedback import RunOutcome

log = logging.getLogger(__name__)


def _outcome(rec: dict[str, Any]) -> RunOutcome | None:
    """The RunOutcome of an "end" record of a service session (None: not one)."""
    sid, steps, stop = rec.get("session"), rec.get("steps"), rec.get("stop_step")
    if not isinstance(sid, str) or not sid or not isinstance(steps, int):
        return None
    agent = rec.get("agent")
    return RunOutcome(
        session=sid,
        run=str(rec.get("run") or ""),
        agent=agent if isinstance(agent, str) else None,
        steps=steps,
        stop_step=stop if isinstance(stop, int) else None,
        stop_reason=str(rec.get("reason")) if isinstance(stop, int) else None,
        shadow=rec.get("shadow") is True,
        source=str(rec.get("source") or ""),
        known_task=rec.get("known_task") is True,
    )


def closed_sessions(path: str | Path, bundle_sha256: str | None, keep: int) -> list[RunOutcome]:
    """The last `keep` sessions of the decision log at `path` that ended, scored by the bundle
    with `bundle_sha256`, oldest first, with their verdicts ([] when the file does not exist).

    Lines that are not JSON (a process killed mid-line) are skipped and counted in the log.
    """
    p = Path(path)
    if keep <= 0 or not p.is_file():
        return []
    t0 = time.monotonic()
    ended: OrderedDict[str, RunOutcome] = OrderedDict()
    pending: OrderedDict[str, bool] = OrderedDict()  # verdicts given while the session was open
    same_bundle = False
    bad = 0
    with open(p, "rb") as f:
        for line in f:
            # only these records matter; the test on the bytes skips parsing the others
            if b'"event": "end"' not in line and b'"event": "verdict"' not in line:
                if b'"event": "start"' not in line:
                    continue
            try:
                rec = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not isinstance(rec, dict):
                bad += 1
                continue
            event = rec.get("event")
            if event == "start":
                same_bundle = rec.get("bundle_sha256") == bundle_sha256
            elif event == "end" and same_bundle and (o := _outcome(rec)) is not None:
                o.verdict = pending.pop(o.session, None)
                ended.pop(o.session, None)
                ended[o.session] = o
                while len(ended) > keep:
                    ended.popitem(last=False)
            elif event == "verdict" and isinstance(rec.get("resolved"), bool):
                sid = rec.get("session")
                if not isinstance(sid, str) or not sid:
                    continue
                if sid in ended:
                    ended[sid].verdict = rec["resolved"]
                else:
                    pending[sid] = rec["resolved"]
                    while len(pending) > keep:
                        pending.popitem(last=False)
    out = list(ended.values())
    if out or bad:
        log.info(
            "%s: %d closed sessions remembered from before this start (%d with a verdict), "
            "%d unreadable lines skipped, in %.1f s",
            p,
            len(out),
            sum(o.verdict is not None for o in out),
            bad,
            time.monotonic() - t0,
        )
    return out
