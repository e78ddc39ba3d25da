"""Stop points of score rules on recorded runs: at the monitor's thresholds, and baselines set to
the monitor's realized FPR.

A stop rule is reduced to one thing: for each run, the prefix length k after which it is stopped
(None = never). Score rules follow a check schedule (monitor.schedule, persistence included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from monitor.thresholds import ThresholdTable
from training.calibrate.thresholds import threshold_for_count
from training.data.records import RunRecord, Stops, group_records
from training.evaluate.ledger import ledger_metrics


def stopped_resolved(records: Sequence[RunRecord], stops: Mapping[str, int | None]) -> int:
    """How many resolved runs of `records` a rule stops (its false positives)."""
    return sum(1 for r in records if r.resolved and stops.get(r.run_id) is not None)


def score_stops(
    records: Sequence[RunRecord],
    thresholds: ThresholdTable,
    *,
    target: float,
    scorer: str = "monitor",
    group_by: str | None = None,
) -> tuple[Stops, dict[str, dict[str, Any]]]:
    """Stop points of a scorer at its thresholds (ThresholdTable.lookup per group) under the
    table's schedule. Runs are grouped by the record field the table is keyed by (its
    `group_by`) unless `group_by` names another.

    Returns:
        (stops, used) where used[group] = {"threshold": t (None: no stop by score),
        "from": agent | pooled | pooled-unknown-agent | refused}.
    """
    stops: Stops = {}
    used: dict[str, dict[str, Any]] = {}
    key = group_by or thresholds.group_by
    for r in records:
        g = str(getattr(r, key))
        if g not in used:
            th = thresholds.lookup(g, target)
            used[g] = {"threshold": th.stop if math.isfinite(th.stop) else None, "from": th.origin}
        stops[r.run_id] = thresholds.schedule.first_stop(r.scores[scorer], used[g]["threshold"])
    return stops, used


def matched_score_stops(
    records: Sequence[RunRecord],
    reference: Mapping[str, int | None],
    *,
    scorer: str,
    schedule: Schedule,
    group_by: str = "agent",
) -> tuple[Stops, dict[str, float]]:
    """A score baseline at equal realized FPR: per group, the lowest threshold that stops at most
    as many resolved runs as the reference rule did on the same runs (same check schedule).

    Returns:
        (stops, threshold per group).
    """
    stops: Stops = {}
    used: dict[str, float] = {}
    for g, rs in group_records(records, group_by).items():
        mx = np.array([schedule.max_checked_score(r.scores[scorer]) for r in rs])
        res = np.array([bool(r.resolved) for r in rs])
        t = threshold_for_count(mx[res], stopped_resolved(rs, reference), mx)
        used[g] = t
        for r in rs:
            stops[r.run_id] = schedule.first_stop(r.scores[scorer], t)
    return stops, used


def matched_knob_stops(
    records: Sequence[RunRecord],
    reference: Mapping[str, int | None],
    stops_at: Callable[[str, float], Stops],
    *,
    group_by: str = "agent",
    lo: float = 0.05,
    hi: float = 20.0,
    iters: int = 24,
) -> tuple[Stops, dict[str, float]]:
    """A rule with a scale knob (larger = fewer stops) at equal realized FPR: per group, the
    smallest scale (bisection in log space) whose stopped resolved runs are at most the reference's.

    Args:
        stops_at: (group, scale) -> stops of that group's runs at that scale.

    Returns:
        (stops, scale per group).
    """
    out: Stops = {}
    scales: dict[str, float] = {}
    for g, rs in group_records(records, group_by).items():
        budget = stopped_resolved(rs, reference)
        a, b = math.log(lo), math.log(hi)
        if stopped_resolved(rs, stops_at(g, lo)) <= budget:
            b = a
        for _ in range(iters):
            if b - a < 1e-3:
                break
            m = (a + b) / 2
            if stopped_resolved(rs, stops_at(g, math.exp(m))) <= budget:
                b = m
            else:
                a = m
        scales[g] = math.exp(b)
        out.update(stops_at(g, scales[g]))
    return out, scales


def tradeoff_curve(
    records: Sequence[RunRecord], *, scorer: str, schedule: Schedule, points: int = 60
) -> list[tuple[float, float]]:
    """(realized FPR, token savings) of one pooled threshold swept over the score's quantiles."""
    mx = np.array([schedule.max_checked_score(r.scores[scorer]) for r in records])
    finite = mx[np.isfinite(mx)]
    if not len(finite):
        return []
    grid = np.unique(np.quantile(finite, np.linspace(0, 1, points)))
    out = []
    for t in [*grid.tolist(), math.inf]:
        st = {r.run_id: schedule.first_stop(r.scores[scorer], t) for r in records}
        m = ledger_metrics(records, st)
        out.append((m["realized_fpr"] or 0.0, m["token_savings"] or 0.0))
    return sorted(out)
