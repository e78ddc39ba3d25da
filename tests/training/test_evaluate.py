"""Evaluation ledger on constructed runs with known answers; restarts; baselines; the command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.schedule import Schedule
from training.calibrate.thresholds import pick_thresholds
from training.config import EvalConfig
from training.data.records import RunRecord, save_records
from training.evaluate.auroc import auroc_at_fractions
from training.evaluate.ledger import ledger_metrics, oracle_stops, restart_outcomes
from training.evaluate.report import evaluate, markdown_table
from training.evaluate.stops import matched_score_stops


def R(rid, inst, resolved, tokens, scores=None, agent="a", source="s", encoded=0, **more):
    sc = {"monitor": np.asarray(scores if scores is not None else [0.0] * len(tokens), float)}
    sc.update({k: np.asarray(v, float) for k, v in more.items()})
    return RunRecord(rid, inst, agent, source, resolved, np.asarray(tokens), sc, encoded)


def test_ledger_arithmetic_known_answers():
    recs = [
        R("r1", "i1", True, [10, 10, 10, 10]),  # resolved, stopped at 3: FP, saves 10
        R("r2", "i2", True, [5, 5]),  # resolved, not stopped
        R("r3", "i3", False, [20, 20, 20, 20, 20]),  # unresolved, stopped at 2: saves 60
        R("r4", "i4", False, [50]),  # unresolved, not stopped
    ]
    stops = {"r1": 3, "r2": None, "r3": 2, "r4": None}
    m = ledger_metrics(recs, stops, monitor_token_price=0.5)
    total = 40 + 10 + 100 + 50
    assert m["runs"] == 4
    assert m["realized_fpr"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(0.5)
    assert m["token_savings"] == pytest.approx(70 / total)
    assert m["resolution_before"] == pytest.approx(0.5)
    assert m["resolution_after"] == pytest.approx(0.25)
    # single-run instances: stopped ones stay stopped = unresolved, no tokens added
    assert m["resolution_after_restart"] == pytest.approx(0.25)
    assert m["tokens_after_restart"] == pytest.approx((total - 70) / total)
    lo, hi = m["fpr_ci"]
    assert lo < 0.5 < hi
    recs[0].encoded_tokens = 40
    m2 = ledger_metrics(recs, stops, monitor_token_price=0.5)
    assert m2["net_token_savings"] == pytest.approx((70 - 20) / total)


def test_restart_counts_tokens_of_both_runs():
    recs = [
        R("a1", "x", False, [100, 100, 100]),  # stopped at 1
        R("a2", "x", True, [7, 7]),  # the replacement: resolves, 14 tokens
        R("a3", "x", False, [1, 1, 1, 1]),  # stopped at 2 -> replaced by a1 (wraps), stopped -> a2
        R("b1", "y", False, [9, 9]),  # stopped, no other run of y
    ]
    stops = {"a1": 1, "a2": None, "a3": 2, "b1": 1}
    rs = restart_outcomes(recs, stops)
    assert rs["tokens"]["a1"] == 100 + 14
    assert rs["resolved"]["a1"] is True
    assert rs["restarts"]["a1"] == 1
    # a3: its 2 tokens, then a1 (stopped: 100), then a2 (14, resolved)
    assert rs["tokens"]["a3"] == 2 + 100 + 14
    assert rs["restarts"]["a3"] == 2
    assert rs["resolved"]["a3"] is True
    assert rs["resolved"]["b1"] is False
    assert rs["tokens"]["b1"] == 9
    m = ledger_metrics(recs, stops)
    assert m["resolution_after_restart"] == pytest.approx(3 / 4)
    assert m["resolution_after"] == pytest.approx(1 / 4)
    total = 300 + 14 + 4 + 18
    assert m["tokens_after_restart"] == pytest.approx((114 + 14 + 116 + 9) / total)


def test_restart_when_every_sibling_is_stopped_stays_unresolved():
    recs = [R("a1", "x", True, [3, 3]), R("a2", "x", True, [4, 4])]
    rs = restart_outcomes(recs, {"a1": 1, "a2": 1})
    assert rs["resolved"] == {"a1": False, "a2": False}
    assert rs["tokens"]["a1"] == 3 + 4


def test_restart_uses_only_runs_of_the_same_agent():
    recs = [
        R("a1", "x", False, [5, 5], agent="swe-agent"),
        R("b1", "x", True, [2, 2], agent="coder"),  # same instance, another agent: not a restart
        R("a2", "x", True, [3], agent="swe-agent"),
    ]
    rs = restart_outcomes(recs, {"a1": 1, "b1": None, "a2": None})
    assert rs["restarts"]["a1"] == 1
    assert rs["tokens"]["a1"] == 5 + 3
    assert rs["resolved"]["a1"] is True
    lone = restart_outcomes(recs[:2], {"a1": 1, "b1": None})
    assert lone["resolved"]["a1"] is False
    assert lone["tokens"]["a1"] == 5


def test_oracle_stops_only_unresolved_at_min_steps():
    recs = [
        R("r1", "i1", False, [10] * 5),
        R("r2", "i2", True, [10] * 5),
        R("r3", "i3", False, [10]),
    ]
    st = oracle_stops(recs, min_steps=2)
    assert st == {"r1": 2, "r2": None, "r3": None}
    m = ledger_metrics(recs, st)
    assert m["realized_fpr"] == 0.0
    assert m["token_savings"] == pytest.approx(30 / 110)


def test_auroc_at_fractions():
    recs = [
        R("r1", "i1", False, [1] * 4, scores=[0.1, 0.9, 0.9, 0.9]),
        R("r2", "i2", True, [1] * 4, scores=[0.2, 0.1, 0.1, 0.95]),
    ]
    a = auroc_at_fractions(recs, scorer="monitor")
    assert a == {"0.25": 0.0, "0.5": 1.0, "0.75": 1.0}


def test_matched_score_baseline_has_at_most_monitor_false_positives():
    rng = np.random.default_rng(0)
    recs = [
        R(f"r{i}", f"i{i}", i % 3 == 0, [5] * 8, rng.random(8), lr=rng.random(8)) for i in range(90)
    ]
    mon = {r.run_id: (4 if (r.resolved and int(r.run_id[1:]) < 9) else None) for r in recs}
    fp_mon = sum(1 for r in recs if r.resolved and mon[r.run_id])
    st, th = matched_score_stops(recs, mon, scorer="lr", schedule=Schedule(min_steps=1, persist=1))
    fp_lr = sum(1 for r in recs if r.resolved and st[r.run_id])
    assert fp_lr == fp_mon == 3
    assert set(th) == {"a"}


def _split(n_inst, rng, agent="a", source="s"):
    out = []
    for i in range(n_inst):
        for j in range(2):
            bad = rng.random() < 0.5
            base = 0.7 if bad else 0.3
            sc = np.clip(base + 0.2 * rng.standard_normal(10), 0, 1)
            out.append(
                R(
                    f"{source}/{agent}/run{j}/{i}",
                    f"{agent}-{i}",
                    not bad,
                    rng.integers(50, 150, 10),
                    sc,
                    agent=agent,
                    source=source,
                    encoded=300,
                    signals_lr=np.clip(sc + 0.3 * rng.standard_normal(10), 0, 1),
                )
            )
    return out


def test_evaluate_report_shape_and_loopbrake(tmp_path):
    rng = np.random.default_rng(5)
    val, test = _split(150, rng), _split(80, rng)
    th = pick_thresholds(
        val, schedule=Schedule(min_steps=2, every=1, persist=1), targets=[0.05, 0.25]
    )
    res = evaluate(
        test,
        th,
        config=EvalConfig(target_fpr=0.25, score_baselines=["signals_lr"]),
        calibration=val,
    )
    for key in ("monitor", "baselines", "oracle", "target_fpr", "threshold", "per_source"):
        assert key in res
    for m in [res["monitor"], res["oracle"], *res["baselines"].values()]:
        for key in (
            "realized_fpr",
            "fpr_upper_bound",
            "recall",
            "token_savings",
            "resolution_before",
            "resolution_after",
            "resolution_after_restart",
            "runs",
        ):
            assert key in m
    assert set(res["baselines"]) == {"signals_lr", "loopbrake"}
    fp = lambda m: round(m["realized_fpr"] * m["resolved_runs"])  # noqa: E731
    assert fp(res["baselines"]["signals_lr"]) <= fp(res["monitor"])
    assert res["oracle"]["realized_fpr"] == 0.0
    assert res["oracle"]["recall"] == 1.0
    assert res["threshold"]["a"]["from"] == "agent"
    assert res["monitor"]["resolution_after_restart"] >= res["monitor"]["resolution_after"]
    table = markdown_table(res)
    assert "| overall | monitor |" in table
    assert "| s | loopbrake (fixed rule) |" in table
    json.dumps(res)  # serialisable


def test_evaluate_with_thresholds_keyed_by_source():
    # Two sources of one agent: the report, the baselines' FPR matching and the p95 budgets all
    # follow the table's grouping (a table keyed by source once crashed the report: KeyError).
    from monitor.halts import Budget

    rng = np.random.default_rng(7)
    val = _split(120, rng, source="s1") + _split(120, rng, source="s2")
    test = _split(60, rng, source="s1") + _split(60, rng, source="s2")
    th = pick_thresholds(
        val, schedule=Schedule(min_steps=2, every=1, persist=1), targets=[0.25], group_by="source"
    )
    from monitor.signals import SIGNAL_NAMES

    def steps_only(n):
        m = np.zeros((n, len(SIGNAL_NAMES)))
        m[:, SIGNAL_NAMES.index("steps")] = np.arange(1, n + 1)
        return m

    sigs = {r.run_id: steps_only(len(r.scores["monitor"])) for r in test}
    budgets = {g: Budget(max_steps=4) for g in ("s1", "s2")}
    res = evaluate(
        test,
        th,
        config=EvalConfig(target_fpr=0.25, score_baselines=["signals_lr"]),
        calibration=val,
        signals=sigs,
        budgets=budgets,
    )
    assert set(res["threshold"]) == {"s1", "s2"}
    assert all(v["from"] == "agent" for v in res["threshold"].values())
    assert set(res["per_source"]["s1"]["threshold"]) == {"s1"}
    assert set(res["baselines"]["signals_lr"]["info"]["value"]) == {"s1", "s2"}
    # Budgets found under the source keys: a missing budget never stops, so its matched scale
    # stays at the bisection's floor (0.05); a found 4-step cap must be scaled past 10 steps.
    scales = res["baselines"]["budget_p95"]["info"]["value"]
    assert set(scales) == {"s1", "s2"}
    assert min(scales.values()) > 2


def test_evaluate_command_on_saved_records(tmp_path):
    from training.cli import main

    rng = np.random.default_rng(6)
    val, test = _split(150, rng), _split(60, rng, agent="b", source="t") + _split(60, rng)
    out = tmp_path / "train"
    save_records(out / "records" / "val.parquet", val)
    save_records(out / "records" / "test.parquet", test)
    th = pick_thresholds(val, schedule=Schedule(min_steps=1, every=1, persist=1), targets=[0.25])
    (out / "thresholds.json").write_text(json.dumps(th.to_json()))
    rc = main(
        [
            "evaluate",
            "--train-dir",
            str(out),
            "--target-fpr",
            "0.25",
            "--json",
            str(tmp_path / "eval.json"),
            "--plots",
            str(tmp_path / "plots"),
        ]
    )
    assert rc == 0
    res = json.loads((tmp_path / "eval.json").read_text())
    assert set(res["per_source"]) == {"s", "t"}
    # agent b has no thresholds of its own: the pooled one is used and said so
    assert res["per_source"]["t"]["threshold"]["b"]["from"] == "pooled-unknown-agent"
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["roc_by_fraction.png", "score_over_steps.png", "tokens_saved_vs_fpr.png"]
    assert (tmp_path / "eval.md").read_text().startswith("Target run-level FPR 0.25")


def test_group_of_prefers_a_known_group():
    """A source-keyed table looks a run up by its source; a folder name that is no group does not
    hide an agent name that is one (a group named by `failfast calibrate --agent`)."""
    from monitor.thresholds import ThresholdTable

    rng = np.random.default_rng(8)
    val = _split(100, rng, source="s1") + _split(100, rng, agent="G", source="G")
    th = pick_thresholds(val, schedule=Schedule(min_steps=2), targets=[0.25], group_by="source")
    assert isinstance(th, ThresholdTable)
    assert th.group_of("a", "s1") == "s1"
    assert th.group_of("G", "some-folder") == "G"
    assert th.group_of("a", "some-folder") == "some-folder"  # unknown: refused/pooled by name
    assert th.group_of("a", "") == "a"


def test_plain_summary_names_lost_good_runs_and_warns_near_chance():
    from monitor.thresholds import ThresholdTable
    from training.evaluate.summary import plain_summary

    rng = np.random.default_rng(3)
    recs = [  # scores unrelated to the label: near chance; one good run climbs over 0.9
        R(f"r{i}", f"i{i}", i % 2 == 0, np.full(6, 10), rng.random(6) * 0.8) for i in range(40)
    ]
    recs[0].scores["monitor"] = np.array([0.1, 0.2, 0.95, 0.97, 0.99, 0.99])
    table = ThresholdTable.model_validate(
        {
            "mode": "bound",
            "confidence": 0.95,
            "method": "conformal",
            "schedule": {"min_steps": 2, "every": 1, "persist": 1},
            "targets": [0.05],
            "group_by": "source",
            "fallback": "none",
            "groups": {"s": {"n_resolved": 50, "stop": {"0.05": {"threshold": 0.9}}, "warn": 0.5}},
            "pooled": {"n_resolved": 50, "stop": {"0.05": {"threshold": 0.9}}, "warn": 0.5},
        }
    )
    res = evaluate(recs, table, config=EvalConfig(target_fpr=0.05, score_baselines=[]))
    text = plain_summary(res, recs, table)
    assert "on these 40 runs (target FPR 0.05)" in text
    assert "WARNING: near chance" in text
    assert "group s: stop threshold 0.900 (agent)" in text
    assert "and 1 of 20 good runs (realized FPR 5.0%)" in text
    assert "good runs it would have lost: r0 (step 3 of 6)" in text
    assert "not a promise the monitor broke" in text
    assert "after restart = after: every instance here has one recorded run" in text
    for r in recs:  # a group the table lacks is said so
        r.source = "mine"
    res = evaluate(recs, table, config=EvalConfig(target_fpr=0.05, score_baselines=[]))
    assert "group mine: NO stop by score: the thresholds have no such group" in plain_summary(
        res, recs, table
    )
