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

Lines are parsed through the typed records of training.data.log_records: a line that is not
UTF-8 or JSON, or a record with a wrong type or a score outside [0, 1], is a problem naming its
file and line, and is skipped; a second end record of one session is reported (the later wins).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.data.log_records import (
    EndRecord,
    LineProblem,
    StartRecord,
    VerdictRecord,
    json_lines,
    log_records,
    verdict_record,
)
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
        problems: every line left out or doubtful, with its file and line number.
    """

    records: list[RunRecord] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    starts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)


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


def read_verdicts(
    path: str | Path, skipped: Counter[str], problems: list[LineProblem] | None = None
) -> list[dict[str, Any]]:
    """Verdicts of a file: {"session", "run", "resolved", "finished"} per run; a bad entry is a
    line-numbered problem (and counted as a "bad line")."""
    p = Path(path)
    found: list[LineProblem] = []
    try:
        whole = json.loads(p.read_bytes().decode("utf-8"))
    except ValueError:  # not one JSON document (or not UTF-8 as a whole): JSON lines
        whole = None
    if isinstance(whole, dict) and "resolved" not in whole:  # {run id: verdict}
        out = []
        for k, v in whole.items():
            if isinstance(v, bool):
                out.append({"session": "", "run": str(k), "resolved": v, "finished": None})
            else:
                found.append(LineProblem(str(p), 1, f"verdict of {k!r} is not true/false"))
        rows: list[VerdictRecord | None] = []
    elif isinstance(whole, list):
        out = []
        rows = [verdict_record(r, p, 1, found) for r in whole]
    else:
        out = []
        rows = [verdict_record(r, p, n, found) for n, r in json_lines(p, found)]
    for v in rows:
        if v is not None:
            session, run = v.key()
            out.append(
                {"session": session, "run": run, "resolved": v.resolved, "finished": v.finished}
            )
    if found:
        skipped["bad line"] += len(found)
    if problems is not None:
        problems += found
    return out


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
    ends: dict[str, EndRecord] = {}  # key (session or run) -> end record, the last wins
    where: dict[str, str] = {}  # key -> "file:line" of its end record
    by_run: dict[str, str] = {}  # run id -> key of its last end record
    given: list[dict[str, Any]] = []
    for path in logs:
        found: list[LineProblem] = []
        for n, rec in log_records(Path(path), found):
            session, run = rec.key()
            if isinstance(rec, StartRecord):
                out.starts.append(rec.model_dump())
            elif isinstance(rec, EndRecord):
                key = session or run
                if key in ends:
                    out.skipped["duplicate end record"] += 1
                    out.problems.append(
                        LineProblem(
                            str(path),
                            n,
                            f"a second end record of {key!r} (first at "
                            f"{where[key]}); the later one is used",
                        )  # fmt: skip
                    )
                ends[key] = rec
                where[key] = f"{path}:{n}"
                by_run[run] = key
            else:
                fields = {"resolved": rec.resolved, "finished": rec.finished}
                given.append({"session": session, "run": run, **fields})
        if found:
            out.skipped["bad line"] += len(found)
            out.problems += found
    for path in verdicts:
        given += read_verdicts(path, out.skipped, out.problems)
    verdict_of: dict[str, dict[str, Any]] = {}
    for v in given:  # later verdicts (files come after logs) win
        sid = str(v["session"])
        target = sid if sid and sid in ends else by_run.get(str(v["run"]))
        if target is None:
            out.skipped["verdict for no logged run"] += 1
            continue
        verdict_of[target] = v
    for key, end in ends.items():
        if shadow_only and not end.shadow:
            out.skipped["not a shadow run"] += 1
            continue
        verdict = verdict_of.get(key)
        if verdict is None:
            out.skipped["no verdict"] += 1
            continue
        record, why = _record(key, end, verdict)
        if record is None:
            out.skipped[why] += 1
        else:
            out.records.append(record)
    return out


def _record(key: str, end: EndRecord, verdict: dict[str, Any]) -> tuple[RunRecord | None, str]:
    if end.scorer != "monitor":  # scored by a chosen candidate, not the LM probe
        return None, f"scored by {end.scorer}, not the LM probe"
    scores = [math.nan if x is None else x for x in end.scores]
    tokens = end.tokens[: len(scores)]
    if not scores or all(math.isnan(s) for s in scores):
        return None, "no scores"
    stop = end.stop_step
    finished = verdict.get("finished")
    if stop is not None and not end.shadow and finished is not True:
        if finished is False or len(scores) <= stop:
            return None, "stop obeyed"
    tokens += [0] * (len(scores) - len(tokens))
    agent = end.agent or "unknown"
    return (
        RunRecord(
            run_id=key,
            instance_id=end.run or key,
            agent=agent,
            source=end.source or agent,  # logs before sources were kept: the agent
            resolved=bool(verdict["resolved"]),
            step_tokens=np.asarray(tokens, dtype=np.int64),
            scores={"monitor": np.asarray(scores, dtype=np.float64)},
        ),
        "",
    )
