"""Heuristic halts: transcript-analyser rule, Budget (before/after, fitting), stuck limits, policy."""

from __future__ import annotations

import pytest

from monitor.halts import Budget, StuckLimits, TranscriptRule, final_values, fit_budget
from monitor.policy import PolicyConfig, heuristic_hits, warn_evidence
from monitor.signals import SIGNAL_NAMES
from monitor.types import Step, Trajectory


def vals(**kw: float) -> dict[str, float]:
    v = dict.fromkeys(SIGNAL_NAMES, 0.0)
    v.update(kw)
    return v


def test_transcript_rule_triggers_at_limits() -> None:
    rule = TranscriptRule()
    assert rule.hits(vals(steps=39, max_repeat=2, max_error_streak=3, cost_usd=4.99)) == []
    hits = rule.hits(vals(steps=40, max_repeat=3, max_error_streak=4, cost_usd=5.0))
    assert [h.reason for h in hits] == ["step_budget", "repeat_loop", "error_streak", "cost_budget"]
    assert hits[1].describe() == "repeat_loop (max_repeat=3 >= 3)"
    assert hits[3].describe() == "cost_budget (cost_usd=5 >= 5)"


def test_budget_before_call_stops_before_exceeding() -> None:
    b = Budget(max_steps=10, max_tokens=1000, max_cost_usd=1.0)
    assert b.before_call(vals(steps=9)) == []
    assert [h.reason for h in b.before_call(vals(steps=10))] == ["step_budget"]
    # 900 tokens used, the last call took 150: the next one would exceed 1000
    hits = b.before_call(vals(steps=5, tokens=900), {"tokens": 150.0})
    assert [h.reason for h in hits] == ["token_budget"]
    assert b.before_call(vals(steps=5, tokens=900), {"tokens": 50.0}) == []
    assert [h.reason for h in b.before_call(vals(cost_usd=0.95), {"cost_usd": 0.1})] == [
        "cost_budget"
    ]


def test_budget_after_step_repeats_and_no_progress() -> None:
    b = Budget(max_repeats=4, max_no_new_info=10)
    assert b.after_step(vals(max_repeat=4, no_new_info=10)) == []
    hits = b.after_step(vals(max_repeat=5, no_new_info=11))
    assert [h.reason for h in hits] == ["repeat_loop", "no_progress"]
    assert b.fractions(vals(max_repeat=3)) == {"max_repeat": 0.75, "no_new_info": 0.0}


def _run(i: int, n: int, resolved: bool | None, cost: float = 0.01) -> Trajectory:
    steps = [
        Step(
            k, tool="bash", action=f"cmd {k % 3}", observation=f"o{k}", tokens_in=100, cost_usd=cost
        )
        for k in range(n)
    ]
    return Trajectory(id=f"r{i}", instance_id=f"i{i}", agent="a", steps=steps, resolved=resolved)


def test_fit_budget_is_p95_of_resolved_runs_only() -> None:
    runs = [_run(i, n=10 + i, resolved=True) for i in range(20)]  # 10..29 steps
    runs.append(_run(99, n=500, resolved=False))
    runs.append(_run(98, n=400, resolved=None))
    budget, n = fit_budget(runs)
    assert n == 20
    # numpy linear quantile of 10..29 at 0.95 = 28.05 -> ceil 29
    assert budget.max_steps == 29
    assert budget.max_tokens == 2805  # p95 of 1000..2900
    assert budget.max_cost_usd == pytest.approx(0.2805, abs=1e-4)
    assert budget.max_wall_seconds is None  # no timestamps anywhere
    assert budget.max_repeats == 10  # ceil(p95 of ceil(n/3)) for n = 10..29
    assert budget.max_no_new_info == 0  # every observation was new


def test_final_values_fall_back_to_reported_totals() -> None:
    t = _run(0, 3, True, cost=None)  # type: ignore[arg-type]
    t.totals.cost_usd = 2.5
    t.totals.wall_seconds = 60.0
    v = final_values(t)
    assert v["cost_usd"] == 2.5
    assert v["wall_seconds"] == 60.0


def test_stuck_limits_and_switch() -> None:
    v = vals(same_pair_run=4, action_error_run=2, monologue_run=3, alternation_run=5)
    assert [h.signal for h in StuckLimits().hits(v)] == ["same_pair_run", "monologue_run"]
    assert StuckLimits(enabled=False).hits(v) == []


def test_policy_defaults_and_precedence() -> None:
    cfg = PolicyConfig()
    assert cfg.analyser.enabled is False
    assert cfg.budget.caps() == {}
    # analyser-level values fire nothing by default
    assert heuristic_hits(vals(steps=60, max_repeat=3, max_error_streak=5, cost_usd=9), cfg) == []
    cfg = PolicyConfig(budget=Budget(max_repeats=2), max_error_streak=3, format_errors=3)
    v = vals(max_repeat=3, error_streak=3, format_error_streak=3, same_pair_run=4)
    reasons = [h.reason for h in heuristic_hits(v, cfg)]
    assert reasons == ["repeat_loop", "error_streak", "stuck_pattern", "format_errors"]


def test_context_thrash_counts_compactions_within_window() -> None:
    cfg = PolicyConfig(context_thrash_n=3, context_thrash_m=20)
    assert heuristic_hits(vals(steps=30), cfg, [5, 15, 30]) == []  # 5 is outside (10, 30]
    hits = heuristic_hits(vals(steps=30), cfg, [12, 15, 30])
    assert [(h.reason, h.value) for h in hits] == [("context_thrash", 3)]


def test_warn_band_from_budget_fraction_and_score() -> None:
    cfg = PolicyConfig(budget=Budget(max_steps=10))
    assert warn_evidence(vals(steps=5), cfg) == {}
    assert warn_evidence(vals(steps=6), cfg) == {"steps_used": 0.6}
    assert warn_evidence(vals(steps=1), cfg, score=0.4, warn_threshold=0.3) == {"score": 0.4}
