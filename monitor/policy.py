"""The decision policy: signal values (+ an optional score) -> continue / warn / stop.

Order of precedence when several reasons fire at once: budgets, then the error streak, stuck
patterns, context thrash, format errors, the transcript-analyser rule, and last the learned
score. The learned score follows the check schedule (monitor.schedule: min_steps, every,
persist); the heuristic halts are hard limits and apply at every step.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from monitor.flags import FlagConfig
from monitor.halts import Budget, Hit, StuckLimits, TranscriptRule
from monitor.schedule import Schedule


class AnalyserConfig(TranscriptRule):
    """The transcript-analyser rule as a halt; off by default: it stops many runs that would have
    succeeded (docs/RESULTS.md)."""

    enabled: bool = Field(
        default=False, description="Stop when the transcript-analyser rule fires."
    )


class PolicyConfig(Schedule):
    """How the monitor decides: the check schedule of the score (Schedule's fields) and the
    halts. Every halt can be switched off; budgets are off until set."""

    threshold: float | None = Field(
        default=None, description="Stop threshold on the score; None: the scorer session's own."
    )
    warn_threshold: float | None = Field(
        default=None, description="Warn threshold on the score; None: the scorer session's own."
    )
    warn_fraction: float = Field(
        default=0.6, gt=0, le=1, description="Warn once any budget is this fraction used."
    )
    budget: Budget = Field(
        default_factory=lambda: Budget(), description="Six caps (None = unchecked)."
    )
    stuck: StuckLimits = Field(
        default_factory=lambda: StuckLimits(), description="Stuck-pattern halts."
    )
    analyser: AnalyserConfig = Field(
        default_factory=lambda: AnalyserConfig(),
        description="Transcript-analyser rule (off by default).",
    )
    max_error_streak: int | None = Field(
        default=None, description="Stop at this many consecutive errors (None: off)."
    )
    context_thrash_n: int | None = Field(
        default=3,
        description="Stop after this many compactions within context_thrash_m steps (None: off).",
    )
    context_thrash_m: int = Field(
        default=40, ge=1, description="Window (steps) for context_thrash_n."
    )
    format_errors: int | None = Field(
        default=3, description="Stop at this many consecutive unparsable outputs (None: off)."
    )
    flags: FlagConfig = Field(
        default_factory=lambda: FlagConfig(), description="Review flags (monitor.flags)."
    )


def heuristic_hits(
    values: dict[str, float], cfg: PolicyConfig, compaction_steps: list[int] | None = None
) -> list[Hit]:
    """Every heuristic halt that fires on these signal values, in precedence order."""
    hits = list(cfg.budget.after_step(values))
    if cfg.max_error_streak is not None and values["error_streak"] >= cfg.max_error_streak:
        hits.append(
            Hit("error_streak", "error_streak", values["error_streak"], cfg.max_error_streak)
        )
    hits.extend(cfg.stuck.hits(values))
    if cfg.context_thrash_n is not None and compaction_steps:
        k = values["steps"]
        recent = sum(1 for s in compaction_steps if s > k - cfg.context_thrash_m)
        if recent >= cfg.context_thrash_n:
            hits.append(Hit("context_thrash", "compactions", recent, cfg.context_thrash_n))
    if cfg.format_errors is not None and values["format_error_streak"] >= cfg.format_errors:
        hits.append(
            Hit(
                "format_errors",
                "format_error_streak",
                values["format_error_streak"],
                cfg.format_errors,
            )
        )
    if cfg.analyser.enabled:
        hits.extend(cfg.analyser.hits(values))
    return hits


def warn_evidence(
    values: dict[str, float],
    cfg: PolicyConfig,
    *,
    score: float | None = None,
    warn_threshold: float | None = None,
) -> dict[str, Any]:
    """What puts the run in the warn band: budgets >= warn_fraction used, or a high score."""
    ev: dict[str, Any] = {}
    for signal, used in cfg.budget.fractions(values).items():
        if used >= cfg.warn_fraction:
            ev[f"{signal}_used"] = round(used, 3)
    if score is not None and warn_threshold is not None and score >= warn_threshold:
        ev["score"] = score
    return ev


_WARN_REASON = {
    "steps": "step_budget",
    "tokens": "token_budget",
    "cost_usd": "cost_budget",
    "wall_seconds": "wall_clock",
    "max_repeat": "repeat_loop",
    "no_new_info": "no_progress",
}
"""The warn reason of each budget signal in the warn band."""


def warn_reason(warn: dict[str, Any]) -> str:
    """The reason of a budget warning (`warn_evidence` without a score): the budget most used."""
    signal = max(
        (k.removesuffix("_used") for k in warn if k.endswith("_used")),
        key=lambda s: warn[f"{s}_used"],
    )
    return _WARN_REASON[signal]


def hits_evidence(hits: list[Hit]) -> dict[str, Any]:
    """Evidence dict of the hits: signal -> {value, limit, reason}."""
    return {h.signal: {"value": h.value, "limit": h.limit, "reason": h.reason} for h in hits}
