"""Rule baselines replayed on recorded runs: the heuristic halts of monitor.halts and LoopBrake.

Each turns a run's signal matrix (monitor.signals.signal_matrix: row k-1 = signals after steps
1..k) into the prefix length at which the rule stops it, under the monitor's check schedule: a
rule that fired at step j stops the run at the first checked k >= j (the harness acts at its next
check; the rules' values are cumulative or latched, so nothing is lost between checks).

LoopBrake 0.6.0 (external baseline, `loopbrake.conformal`): its stuck score is the step count; its
stop line is the conformal quantile ceil((n+1)(1-alpha))-th smallest length of n successful
calibration runs, one per task (the first by run id), and a run is stopped once it passes the
line, i.e. at step line+1. Calibrated here per agent on the validation split at its own alpha.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from monitor.halts import BUDGET_CHECKS, Budget, next_call_passes
from monitor.schedule import Schedule
from monitor.signals import SIGNAL_NAMES
from training.data.records import RunRecord, Stops

_COL = {name: i for i, name in enumerate(SIGNAL_NAMES)}
_BEFORE_CALL = {"max_steps", "max_tokens", "max_cost_usd", "max_wall_seconds"}


class Rule(Protocol):
    """A heuristic halt that reads signal values (monitor.halts.TranscriptRule, StuckLimits)."""

    def hits(self, values: dict[str, float]) -> list[Any]: ...


def latched_stop(fired: np.ndarray, *, schedule: Schedule) -> int | None:
    """First checked k at or after the first step whose rule fired (fired[k-1]); None if never."""
    hits = np.nonzero(np.asarray(fired, dtype=bool))[0]
    if not len(hits):
        return None
    ks = schedule.checked_steps(len(fired))
    later = ks[ks >= hits[0] + 1]
    return int(later[0]) if len(later) else None


def rule_fired(sig: np.ndarray, rule: Rule) -> np.ndarray:
    """Per step: does `rule` fire on the signal values after that step (rows of `sig`)."""
    return np.array(
        [bool(rule.hits(dict(zip(SIGNAL_NAMES, row, strict=True)))) for row in sig], dtype=bool
    )


def budget_fired(sig: np.ndarray, budget: Budget, *, scale: float = 1.0) -> np.ndarray:
    """Per step k: would the Budget (caps times `scale`) stop the run after step k.

    Budget.before_call's rule (monitor.halts.next_call_passes, the next call estimated by the last
    step's increment) and Budget.after_step's (a cap already passed), vectorised over steps.
    """
    n = len(sig)
    fired = np.zeros(n, dtype=bool)
    if not n:
        return fired
    for field, signal, _ in BUDGET_CHECKS:
        cap = getattr(budget, field)
        if cap is None:
            continue
        cap = cap * scale
        if isinstance(getattr(budget, field), int):
            cap = math.ceil(cap)
        v = sig[:, _COL[signal]]
        fired |= v > cap
        if field in _BEFORE_CALL:
            nxt = np.ones(n) if signal == "steps" else np.diff(v, prepend=0.0)
            fired |= next_call_passes(v, nxt, cap)
    return fired


def rule_stops(
    signals: Mapping[str, np.ndarray],
    fired_fn: Callable[[np.ndarray], np.ndarray],
    *,
    schedule: Schedule,
) -> Stops:
    """Stops of a rule given as signal matrix -> per-step fired flags."""
    return {rid: latched_stop(fired_fn(sig), schedule=schedule) for rid, sig in signals.items()}


def loopbrake_stops(
    calibration: Sequence[RunRecord],
    records: Sequence[RunRecord],
    *,
    alpha: float,
    schedule: Schedule,
    group_by: str = "agent",
) -> tuple[Stops, dict[str, int | None]]:
    """LoopBrake's conformal step limit, calibrated per group on `calibration` (resolved runs,
    one per instance), applied to `records`. None line = too few runs: watch only, never stops.

    Returns:
        (stops, stop line per group).
    """
    from loopbrake import conformal

    lengths: dict[str, dict[str, int]] = {}
    for r in sorted(calibration, key=lambda r: r.run_id):
        if r.resolved and r.n_steps:
            lengths.setdefault(str(getattr(r, group_by)), {}).setdefault(r.instance_id, r.n_steps)
    lines: dict[str, int | None] = {}
    for g, per_task in lengths.items():
        line = conformal.threshold(list(per_task.values()), alpha)
        lines[g] = None if line == math.inf else int(line)
    stops: Stops = {}
    for r in records:
        line = lines.get(str(getattr(r, group_by)))
        if line is None:
            stops[r.run_id] = None
            continue
        fired = np.arange(1, r.n_steps + 1) > line
        stops[r.run_id] = latched_stop(fired, schedule=schedule)
    return stops, lines
