"""Threshold picker: run-level stops, Clopper-Pearson bound, refusals, per-agent thresholds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.schedule import Schedule
from training.calibrate.bounds import fpr_upper_bound, resolved_runs_needed
from training.calibrate.thresholds import (
    ThresholdPicker,
    calibration_summary,
    pick_thresholds,
    run_false_positive_rate,
)
from training.config import ThresholdConfig
from training.data.records import RunRecord

EVERY_STEP = Schedule(min_steps=1, every=1, persist=1)


def S(min_steps: int = 1, every: int = 1, persist: int = 1) -> Schedule:
    return Schedule(min_steps=min_steps, every=every, persist=persist)


def stop_at(th, agent, target):
    """(stop threshold or None, where it came from) by the one lookup rule."""
    t = th.lookup(agent, target)
    return (None if np.isinf(t.stop) else t.stop), t.origin


def rec(i, agent, resolved, scores, inst=None):
    s = np.asarray(scores, dtype=float)
    return RunRecord(
        f"{agent}/r{i}",
        inst or f"i{i}",
        agent,
        f"src-{agent}",
        resolved,
        np.full(len(s), 10),
        {"monitor": s},
    )


def test_clopper_pearson_values():
    # 0 of n: closed form 1 - alpha^(1/n)
    assert fpr_upper_bound(0, 59) == pytest.approx(1 - 0.05 ** (1 / 59))
    assert fpr_upper_bound(0, 59) < 0.05 < fpr_upper_bound(0, 58)
    assert resolved_runs_needed(0.05) == 59
    assert resolved_runs_needed(0.01) == 299
    assert resolved_runs_needed(0.25) == 11
    assert resolved_runs_needed(0.05, mode="empirical") == 20
    # known value: 2 of 100 at 95% one-sided ~ 0.0616
    assert fpr_upper_bound(2, 100) == pytest.approx(0.0616, abs=5e-4)


def test_refuses_with_count_when_too_few_resolved():
    rng = np.random.default_rng(0)
    recs = [rec(i, "a", True, rng.random(8)) for i in range(30)] + [
        rec(100 + i, "a", False, rng.random(8)) for i in range(10)
    ]
    th = pick_thresholds(recs, schedule=EVERY_STEP, targets=[0.05, 0.25], method="clopper-pearson")
    a = th.groups["a"]
    assert a.n_resolved == 30
    msg = a.stop["0.05"].refused
    assert "59" in msg
    assert "30" in msg
    assert a.stop["0.25"].threshold is not None
    assert stop_at(th, "a", 0.05) == (None, "refused")


@pytest.mark.parametrize("persist", [1, 2, 3])
def test_bound_mode_never_exceeds_target_on_calibration(persist):
    rng = np.random.default_rng(1)
    recs = []
    for agent, n_res in (("a", 400), ("b", 150)):
        for i in range(n_res):
            recs.append(rec(i, agent, True, rng.beta(2, 5, size=rng.integers(3, 30))))
        for i in range(200):
            recs.append(rec(1000 + i, agent, False, rng.beta(5, 2, size=rng.integers(3, 30))))
    targets = [0.01, 0.02, 0.05, 0.1, 0.25]
    sched = S(2, 2, persist)
    th = pick_thresholds(recs, schedule=sched, targets=targets, method="clopper-pearson")
    assert th.schedule == sched
    for agent in ("a", "b"):
        group = [r for r in recs if r.agent == agent]
        for t in targets:
            entry = th.groups[agent].stop[f"{t:g}"]
            if entry.refused:
                assert th.groups[agent].n_resolved < resolved_runs_needed(t)
                continue
            fpr = run_false_positive_rate(group, entry.threshold, schedule=sched)
            assert fpr == pytest.approx(entry.fpr_val)
            n = th.groups[agent].n_resolved
            assert fpr_upper_bound(round(fpr * n), n) <= t
            assert entry.fpr_upper_bound <= t
    # b has 150 resolved: 1% (299 needed) refused, 2% (149) certified
    assert th.groups["b"].stop["0.01"].refused
    assert th.groups["b"].stop["0.02"].threshold is not None


def test_per_agent_thresholds_differ_and_pooled_fallback():
    rng = np.random.default_rng(2)
    recs = [rec(i, "low", True, rng.uniform(0.0, 0.3, 10)) for i in range(120)]
    recs += [rec(200 + i, "high", True, rng.uniform(0.5, 0.9, 10)) for i in range(120)]
    recs += [rec(400 + i, "few", True, rng.uniform(0, 1, 10)) for i in range(5)]
    th = pick_thresholds(recs, schedule=EVERY_STEP, targets=[0.05])
    assert th.group_by == "agent"  # serving needs to know what the per_agent keys name
    t_low, src_low = stop_at(th, "low", 0.05)
    t_high, _ = stop_at(th, "high", 0.05)
    assert src_low == "agent"
    assert t_low < 0.31 < 0.5 < t_high
    # an agent that could not certify the target and an unknown agent use the pooled threshold
    assert stop_at(th, "few", 0.05) == (th.pooled.stop["0.05"].threshold, "pooled")
    assert stop_at(th, "nobody", 0.05)[1] == "pooled-unknown-agent"
    # a pooled threshold stops nearly every "high" good run: why thresholds are per agent
    low = [r for r in recs if r.agent == "low"]
    assert run_false_positive_rate(low, t_high, schedule=EVERY_STEP) == 0.0


def test_empirical_mode_and_warn_below_stop():
    rng = np.random.default_rng(3)
    recs = [rec(i, "a", True, rng.random(6)) for i in range(100)]
    recs += [rec(500 + i, "a", False, rng.random(6) + 0.5) for i in range(50)]
    th = pick_thresholds(
        recs, schedule=EVERY_STEP, targets=[0.05, 0.1], mode="empirical", warn_fraction=0.3
    )
    e = th.groups["a"].stop["0.05"]
    assert th.method == "empirical"
    assert e.fpr_val == pytest.approx(0.05)
    assert th.groups["a"].warn <= e.threshold
    assert run_false_positive_rate(recs, th.groups["a"].warn, schedule=EVERY_STEP) <= 0.3 + 1e-9


def test_picker_fitted_attributes():
    rng = np.random.default_rng(4)
    recs = [rec(i, "a", True, rng.random(5)) for i in range(80)] + [
        rec(100 + i, "a", False, np.full(5, 0.999)) for i in range(20)
    ]
    p = ThresholdPicker(ThresholdConfig(targets=[0.05], group_by="agent"), schedule=EVERY_STEP).fit(
        recs
    )
    assert p.n_resolved_ == {"a": 80}
    assert p.stop_step(recs[-1], 0.05) == 1
    assert p.thresholds_.schedule.persist == 1
    assert sum(p.stop_step(r, 0.05) is not None for r in recs[:80]) <= 4


def test_conformal_bound_needs_fewer_runs_and_holds_on_calibration():
    assert resolved_runs_needed(0.05, method="conformal") == 19
    assert resolved_runs_needed(0.05, method="clopper-pearson") == 59
    rng = np.random.default_rng(4)
    # 30 resolved runs: Clopper-Pearson refuses 5%, conformal certifies it with at most
    # j stopped where (j + 1) / 31 <= 0.05, i.e. j = 0.
    recs = [rec(i, "a", True, rng.random(8)) for i in range(30)]
    recs += [rec(100 + i, "a", False, rng.random(8) + 0.3) for i in range(30)]
    th = pick_thresholds(recs, schedule=EVERY_STEP, targets=[0.05, 0.25])
    assert th.method == "conformal"
    e = th.groups["a"].stop["0.05"]
    assert e.fpr_val == 0.0
    assert e.fpr_upper_bound == pytest.approx(1 / 31)
    e25 = th.groups["a"].stop["0.25"]
    # (j + 1) / 31 <= 0.25 -> j <= 6
    assert e25.fpr_val == pytest.approx(6 / 30)
    assert e25.fpr_upper_bound == pytest.approx(7 / 31)
    assert run_false_positive_rate(recs, e25.threshold, schedule=EVERY_STEP) == pytest.approx(
        6 / 30
    )
    few = [rec(i, "b", True, rng.random(8)) for i in range(10)]
    th_few = pick_thresholds(few, schedule=EVERY_STEP, targets=[0.05])
    assert "19" in th_few.groups["b"].stop["0.05"].refused


@pytest.mark.parametrize("persist", [1, 2])
def test_conformal_threshold_is_valid_out_of_sample(persist):
    """Marginal guarantee: over many calibration draws, the mean FPR on fresh runs <= target."""
    rng = np.random.default_rng(5)
    fprs = []
    for _ in range(200):
        cal = [rec(i, "a", True, rng.random(5)) for i in range(40)]
        sched = S(min_steps=2, persist=persist)
        th = pick_thresholds(cal, schedule=sched, targets=[0.1])
        e = th.groups["a"].stop["0.1"]
        assert e.fpr_upper_bound <= 0.1  # on the calibration runs themselves
        fresh = [rec(i, "a", True, rng.random(5)) for i in range(200)]
        fprs.append(run_false_positive_rate(fresh, e.threshold, schedule=sched))
    assert float(np.mean(fprs)) <= 0.1 + 0.01


def test_threshold_is_finite_when_runs_never_reach_a_check():
    import math

    from training.calibrate.thresholds import threshold_for_count

    assert threshold_for_count(np.array([-math.inf] * 30), 1) == 1.0
    t = threshold_for_count(np.array([0.4] + [-math.inf] * 29), 1, np.array([0.9, -math.inf]))
    assert math.isfinite(t)
    assert t <= 0.4


def test_thresholds_json_is_the_typed_table_and_names_its_calibration_runs():
    rng = np.random.default_rng(6)
    recs = [rec(i, "a", True, rng.random(6)) for i in range(30)]
    recs += [rec(100 + i, "b", i % 2 == 0, rng.random(6)) for i in range(40)]
    th = pick_thresholds(recs, schedule=S(2, 1, 2), targets=[0.05, 0.1])
    data = th.to_json()
    assert list(data) == [
        "mode", "confidence", "method", "schedule", "group_by", "targets", "groups", "pooled",
        "margin", "fallback",
    ]  # fmt: skip
    assert data["schedule"] == {"min_steps": 2, "every": 1, "persist": 2}
    assert (data["margin"], data["fallback"]) == (1.0, "pooled")
    assert set(data["groups"]["a"]["stop"]["0.05"]) == {
        "threshold",
        "fpr_val",
        "fpr_upper_bound",
    }
    summary = calibration_summary(recs, "val")
    assert summary == {
        "records": "val",
        "per_agent": {"a": {"runs": 30, "resolved": 30}, "b": {"runs": 40, "resolved": 20}},
    }


def test_margin_fits_a_smaller_target_and_fallback_none_refuses():
    rng = np.random.default_rng(7)
    recs = [rec(i, "a", True, rng.random(6)) for i in range(60)]
    recs += [rec(100 + i, "a", False, rng.random(6) + 0.5) for i in range(60)]
    recs += [rec(300 + i, "few", True, rng.random(6)) for i in range(5)]
    plain = pick_thresholds(recs, schedule=S(2, 1, 1), targets=[0.1])
    safe = pick_thresholds(recs, schedule=S(2, 1, 1), targets=[0.1], margin=2.0, fallback="none")
    assert safe.groups["a"].stop_at(0.1) > plain.groups["a"].stop_at(0.1)
    assert safe.groups["a"].stop["0.1"].fpr_val <= 0.05
    assert plain.lookup("few", 0.1).origin == "pooled"
    assert plain.lookup("nobody", 0.1).origin == "pooled-unknown-agent"
    for group, why in (("few", "refused"), ("nobody", "unknown-group")):
        refused = safe.lookup(group, 0.1)
        assert (refused.origin, refused.stop) == (why, math.inf)


def test_adaptive_margin_relaxes_large_groups_only():
    """adaptive_margin 8: a group with n resolved calibration runs is fitted at
    target / min(margin, 1 + 8 / sqrt(n)); a small group keeps the full margin, a large one gets
    a smaller margin (a lower threshold), and each stop entry records the margin it used."""
    from training.calibrate.thresholds import group_margin

    cfg = ThresholdConfig(margin=2.0, adaptive_margin=8.0)
    assert group_margin(cfg, 16) == 2.0  # 1 + 8/4 = 3, capped at the margin
    assert group_margin(cfg, 64) == 2.0
    assert group_margin(cfg, 256) == pytest.approx(1.5)
    assert group_margin(cfg, 10**6) >= 1.0
    assert group_margin(ThresholdConfig(margin=2.0), 10**4) == 2.0  # off: the margin everywhere
    rng = np.random.default_rng(3)
    recs = []
    for g, n in (("small", 60), ("large", 400)):
        recs += [rec(i, g, True, rng.random(8), inst=f"{g}{i}") for i in range(n)]
        recs += [rec(10_000 + i, g, False, rng.random(8) + 0.4, inst=f"{g}f{i}") for i in range(n)]
    fixed = pick_thresholds(recs, schedule=S(2, 1, 1), targets=[0.1], margin=2.0)
    adapt = pick_thresholds(
        recs, schedule=S(2, 1, 1), targets=[0.1], margin=2.0, adaptive_margin=8.0
    )
    assert adapt.groups["small"].stop_at(0.1) == fixed.groups["small"].stop_at(0.1)
    assert adapt.groups["large"].stop_at(0.1) < fixed.groups["large"].stop_at(0.1)
    entry = adapt.groups["large"].stop["0.1"]
    assert entry.margin == pytest.approx(1 + 8 / math.sqrt(400))
    assert entry.fpr_val <= 0.1 / entry.margin
    assert fixed.groups["large"].stop["0.1"].margin is None
    assert adapt.adaptive_margin == 8.0
    # the table round-trips through thresholds.json with the per-entry margins
    from monitor.thresholds import ThresholdTable

    again = ThresholdTable.model_validate_json(adapt.model_dump_json())
    assert again.groups["large"].stop["0.1"].margin == entry.margin
