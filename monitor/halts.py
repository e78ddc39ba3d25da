"""Heuristic halts: the transcript-analyser rule, a six-check Budget, and the stuck patterns.

These are the baselines the learned monitor must beat, and the hard limits a harness keeps on
even with a model. Each check turns signal values (monitor.signals) into `Hit`s, one per limit
reached, labelled with a reason from monitor.types.HALT_REASONS.

Semantics of the limits:
- TranscriptRule limits are triggers: the rule fires when a value reaches its limit (the 3rd
  identical call, the 4th consecutive error, the 40th turn, 5 dollars).
- Budget caps are the most allowed: `Budget.before_call` stops a run when the next model call
  could take steps, tokens, dollars or wall clock past the cap (stop before exceeding, not
  after); repeats and steps with no new information depend on what the next call is, so
  `Budget.after_step` stops once they are past the cap (the harness can prevent the excess
  call itself with Session.guard_call).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
from pydantic import Field

from monitor.config import StrictModel
from monitor.signals import SignalTracker
from monitor.types import Trajectory


class Hit(NamedTuple):
    """One limit reached: halt reason label, the signal, its value, and the limit."""

    reason: str
    signal: str
    value: float
    limit: float

    def describe(self) -> str:
        """Short text such as "repeat_loop (max_repeat=5 >= 3)"."""
        return f"{self.reason} ({self.signal}={_num(self.value)} >= {_num(self.limit)})"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


class TranscriptRule(StrictModel):
    """The transcript-analyser rule: fixed triggers on turns, repeats, errors and dollars."""

    max_turns: int = Field(default=40, description="Fire at this many steps.")
    max_repeats: int = Field(
        default=3, description="Fire when one normalised call was made this often."
    )
    max_error_streak: int = Field(default=4, description="Fire at this many consecutive errors.")
    max_cost_usd: float = Field(
        default=5.0, description="Fire when the run has cost this many dollars."
    )

    def hits(self, values: dict[str, float]) -> list[Hit]:
        """Every trigger reached by these signal values (longest error streak so far counts)."""
        checks = (
            ("step_budget", "steps", self.max_turns),
            ("repeat_loop", "max_repeat", self.max_repeats),
            ("error_streak", "max_error_streak", self.max_error_streak),
            ("cost_budget", "cost_usd", self.max_cost_usd),
        )
        return [Hit(r, s, values[s], lim) for r, s, lim in checks if values[s] >= lim]


# Budget fields, the signal each one caps, and its halt reason.
BUDGET_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("max_steps", "steps", "step_budget"),
    ("max_tokens", "tokens", "token_budget"),
    ("max_cost_usd", "cost_usd", "cost_budget"),
    ("max_wall_seconds", "wall_seconds", "wall_clock"),
    ("max_repeats", "max_repeat", "repeat_loop"),
    ("max_no_new_info", "no_new_info", "no_progress"),
)
_BEFORE_CALL = ("max_steps", "max_tokens", "max_cost_usd", "max_wall_seconds")


def next_call_passes(value: Any, nxt: Any, cap: float) -> Any:
    """The before-call rule, on numbers or numpy arrays alike: the next call, estimated to add
    `nxt`, takes `value` past `cap` (or nothing is added and the cap is already reached)."""
    return (value + nxt > cap) | ((nxt == 0) & (value >= cap))


class Budget(StrictModel):
    """Six caps (None = unchecked); fit them with `fit_budget` (p95 of resolved runs)."""

    max_steps: int | None = Field(
        default=None, description="Most steps (model calls) a run may make."
    )
    max_tokens: int | None = Field(default=None, description="Most prompt+completion tokens.")
    max_cost_usd: float | None = Field(default=None, description="Most dollars.")
    max_wall_seconds: float | None = Field(default=None, description="Most seconds of wall clock.")
    max_repeats: int | None = Field(
        default=None, description="Most times one normalised call may run."
    )
    max_no_new_info: int | None = Field(
        default=None, description="Most steps whose observation was already seen."
    )

    def caps(self) -> dict[str, float]:
        """Configured caps by budget field name."""
        return {
            f: float(getattr(self, f)) for f, _, _ in BUDGET_CHECKS if getattr(self, f) is not None
        }

    def before_call(
        self, values: dict[str, float], last: dict[str, float] | None = None
    ) -> list[Hit]:
        """Caps the next model call could exceed.

        Args:
            values: current signals.
            last: the last step's increments (`tokens`, `cost_usd`, `wall_seconds`), used as
                the estimate of what the next call adds; zeros when None.
        """
        last = last or {}
        hits = []
        for field, signal, reason in BUDGET_CHECKS:
            cap = getattr(self, field)
            if cap is None or field not in _BEFORE_CALL:
                continue
            nxt = 1.0 if signal == "steps" else last.get(signal, 0.0)
            if next_call_passes(values[signal], nxt, cap):
                hits.append(Hit(reason, signal, values[signal], cap))
        return hits

    def after_step(self, values: dict[str, float]) -> list[Hit]:
        """Caps already exceeded after a step (repeats, no-new-info, and any other cap)."""
        hits = []
        for field, signal, reason in BUDGET_CHECKS:
            cap = getattr(self, field)
            if cap is not None and values[signal] > cap:
                hits.append(Hit(reason, signal, values[signal], cap))
        return hits

    def fractions(self, values: dict[str, float]) -> dict[str, float]:
        """Each configured cap's used fraction, by signal name (for the warn band)."""
        out = {}
        for field, signal, _ in BUDGET_CHECKS:
            cap = getattr(self, field)
            if cap:
                out[signal] = values[signal] / cap
        return out


class StuckLimits(StrictModel):
    """The OpenHands stuck patterns as halts (lengths of the current pattern run)."""

    enabled: bool = Field(default=True, description="Stop on a stuck pattern.")
    same_pair: int = Field(
        default=4, description="Same action and same observation this many times."
    )
    action_error: int = Field(
        default=3, description="Same action ending in an error this many times."
    )
    monologue: int = Field(default=3, description="Same agent message this many times in a row.")
    alternation: int = Field(default=6, description="A-B-A-B alternation over this many steps.")

    def hits(self, values: dict[str, float]) -> list[Hit]:
        """Stuck patterns whose current run reached its limit."""
        if not self.enabled:
            return []
        checks = (
            ("same_pair_run", self.same_pair),
            ("action_error_run", self.action_error),
            ("monologue_run", self.monologue),
            ("alternation_run", self.alternation),
        )
        return [Hit("stuck_pattern", s, values[s], lim) for s, lim in checks if values[s] >= lim]


def final_values(traj: Trajectory) -> dict[str, float]:
    """Signals after the whole run; wall clock falls back to the reported total."""
    tracker = SignalTracker()
    for step in traj.steps:
        tracker.update(step)
    values = tracker.values()
    if values["wall_seconds"] == 0 and traj.totals.wall_seconds:
        values["wall_seconds"] = float(traj.totals.wall_seconds)
    if values["cost_usd"] == 0 and traj.totals.cost_usd:
        values["cost_usd"] = float(traj.totals.cost_usd)
    return values


def fit_budget(trajs: Iterable[Trajectory], *, quantile: float = 0.95) -> tuple[Budget, int]:
    """Fit Budget caps as a quantile of the resolved runs' final values.

    A cap is left None when no resolved run reports that quantity (e.g. no costs, no
    timestamps). Integer caps are rounded up.

    Returns:
        (budget, number of resolved runs used).
    """
    rows = [final_values(t) for t in trajs if t.resolved is True]
    caps: dict[str, float | int | None] = {}
    for field, signal, _ in BUDGET_CHECKS:
        xs = np.array([r[signal] for r in rows], dtype=np.float64)
        if field in ("max_cost_usd", "max_wall_seconds", "max_tokens"):
            xs = xs[xs > 0]  # zero means "not reported" for these
        if xs.size == 0:
            caps[field] = None
            continue
        q = float(np.quantile(xs, quantile))
        caps[field] = round(q, 4) if field in ("max_cost_usd", "max_wall_seconds") else math.ceil(q)
    return Budget.model_validate(caps), len(rows)
