"""Runs rebuilt from decision logs and verdicts: calibration data without a dataset export.

A decision log (`failfast serve --decision-log`, `failfast watch --decision-log`, or a
monitor.decision_log.DecisionLog with a sink) holds, per closed run, one "end" record with the
score and tokens of every step it observed, and, from the service, one "verdict" record per
verdict reported. Verdicts may also come from separate files (`--verdicts`): JSON lines
`{"run" | "run_id" | "session" | "session_id": ..., "resolved": true|false}`, or one JSON object
`{run id: true|false}`.

A run becomes a RunRecord when it has an end record, a verdict and at least one scored step, and
it ran to its own end. A run stopped at step k that received no step after k (the harness obeyed
the stop) is left out: its scores end at the stop and its verdict, if it has one, is that of a
cut-short run, not of the run the monitor judged; a shadow run, or a verdict with
`"finished": true`, counts whole. Every run left out is counted, by reason, in the summary.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.data.records import RunRecord

EVENTS = ("start", "observe", "check", "end", "verdict")
"""The `event` values of decision-log lines."""


@dataclass
class LogRuns:
    """Records rebuilt from decision logs, and what was left out.

    Attributes:
        records: one per usable run (scorer "monitor").
        skipped: reason -> runs left out ("no verdict", "stop obeyed", "no scores",
            "verdict for no logged run", "bad line").
        starts: the "start" records of the logs (which bundle and graphs wrote them).
    """

    records: list[RunRecord] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    starts: list[dict[str, Any]] = field(default_factory=list)


def is_decision_log(path: str | Path) -> bool:
    """True when the file's first non-empty line is a decision-log record."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and rec.get("event") in EVENTS and "run" in rec
    except (OSError, ValueError):
        return False
    return False


def _lines(path: Path, skipped: Counter[str]) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped["bad line"] += 1
                continue
            if isinstance(rec, dict):
                yield rec
            else:
                skipped["bad line"] += 1


def _key_of(rec: dict[str, Any]) -> tuple[str, str]:
    """(session id, run id) of a record, either may be ""."""
    session = rec.get("session") or rec.get("session_id") or ""
    run = rec.get("run") if rec.get("run") is not None else rec.get("run_id")
    return str(session), str(run or "")


def read_verdicts(path: str | Path, skipped: Counter[str]) -> list[dict[str, Any]]:
    """Verdicts of a file: {"session", "run", "resolved", "finished"} per run."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "resolved" not in whole:  # {run id: verdict}
        return [
            {"session": "", "run": str(k), "resolved": bool(v), "finished": None}
            for k, v in whole.items()
            if isinstance(v, bool)
        ]
    rows = whole if isinstance(whole, list) else list(_lines(p, skipped))
    out = []
    for rec in rows:
        if not isinstance(rec, dict) or not isinstance(rec.get("resolved"), bool):
            skipped["bad line"] += 1
            continue
        session, run = _key_of(rec)
        out.append(
            {
                "session": session,
                "run": run,
                "resolved": rec["resolved"],
                "finished": rec.get("finished"),
            }
        )
    return out


def _score(x: Any) -> float:
    return float(x) if isinstance(x, int | float) else math.nan


def runs_from_logs(
    logs: Sequence[str | Path], verdicts: Sequence[str | Path] = (), *, shadow_only: bool = False
) -> LogRuns:
    """RunRecords of the runs in decision logs that have a verdict (in the logs or in
    `verdicts` files; a file's verdict wins over the log's), by the rules of this module.

    A verdict names its run by session id (service sessions) or by run id; a run id shared by
    several logged runs gives its verdict to the last of them. `shadow_only`: only shadow runs
    (a harness that obeys the other runs' stops selects them by the monitor's own decisions, so
    only the shadow runs are a fair sample).
    """
    out = LogRuns()
    ends: dict[str, dict[str, Any]] = {}  # key (session or run) -> end record, the last wins
    by_run: dict[str, str] = {}  # run id -> key of its last end record
    given: list[dict[str, Any]] = []
    for path in logs:
        for rec in _lines(Path(path), out.skipped):
            event = rec.get("event")
            session, run = _key_of(rec)
            if event == "start":
                out.starts.append(rec)
            elif event == "end":
                ends[session or run] = rec
                by_run[run] = session or run
            elif event == "verdict" and isinstance(rec.get("resolved"), bool):
                fields = {"resolved": rec["resolved"], "finished": rec.get("finished")}
                given.append({"session": session, "run": run, **fields})
    for path in verdicts:
        given += read_verdicts(path, out.skipped)
    verdict_of: dict[str, dict[str, Any]] = {}
    for v in given:  # later verdicts (files come after logs) win
        sid = str(v["session"])
        key = sid if sid and sid in ends else by_run.get(str(v["run"]))
        if key is None:
            out.skipped["verdict for no logged run"] += 1
            continue
        verdict_of[key] = v
    for key, end in ends.items():
        if shadow_only and not end.get("shadow"):
            out.skipped["not a shadow run"] += 1
            continue
        found = verdict_of.get(key)
        if found is None:
            out.skipped["no verdict"] += 1
            continue
        record, why = _record(key, end, found)
        if record is None:
            out.skipped[why] += 1
        else:
            out.records.append(record)
    return out


def _record(key: str, end: dict[str, Any], verdict: dict[str, Any]) -> tuple[RunRecord | None, str]:
    scores = [_score(x) for x in end.get("scores") or []]
    tokens = [int(t) for t in end.get("tokens") or []][: len(scores)]
    if not scores or all(math.isnan(s) for s in scores):
        return None, "no scores"
    stop = end.get("stop_step")
    finished = verdict.get("finished")
    if stop is not None and not end.get("shadow") and finished is not True:
        if finished is False or len(scores) <= int(stop):
            return None, "stop obeyed"
    tokens += [0] * (len(scores) - len(tokens))
    agent = str(end.get("agent") or "unknown")
    return (
        RunRecord(
            run_id=key,
            instance_id=str(end.get("run") or key),
            agent=agent,
            source=str(end.get("source") or agent),  # logs before sources were kept: the agent
            resolved=bool(verdict["resolved"]),
            step_tokens=np.asarray(tokens, dtype=np.int64),
            scores={"monitor": np.asarray(scores, dtype=np.float64)},
        ),
        "",
    )
