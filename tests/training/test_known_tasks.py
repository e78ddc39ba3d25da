"""The training side of known tasks (training.evaluate.known_tasks): the table, the records'
prior scores (equal to what a live session gives) and the known-task choice of candidates.json."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.types import Trajectory
from serving.choice import Choice
from serving.task_prior import MONITOR_PRIOR, PRIOR, TaskPrior
from training.data.records import RunRecord
from training.evaluate.known_tasks import (
    known_candidates,
    known_records,
    task_table,
    with_verdicts,
)


def _rec(rid: str, inst: str, agent: str, resolved: bool, n: int = 12) -> RunRecord:
    rng = np.random.default_rng(abs(hash(rid)) % 2**32)
    scores = {b: rng.uniform(0.1, 0.9, n) for b in ("monitor", "signals_lr", "tfidf_lr")}
    return RunRecord(rid, inst, agent, agent, resolved, np.full(n, 100, np.int64), scores)


AGENTS = ("A", "B", "C")


def _records(n_tasks: int = 30) -> list[RunRecord]:
    rng = np.random.default_rng(0)
    out = []
    for t in range(n_tasks):
        hard = rng.random() < 0.5
        for a in AGENTS:
            out.append(_rec(f"{a}/{t}", f"t{t}", a, bool(rng.random() < (0.2 if hard else 0.8))))
    return out


def _table(recs, min_runs=2):
    runs = [Trajectory(id=r.run_id, instance_id=r.instance_id, agent=r.agent,
                       resolved=r.resolved) for r in recs]  # fmt: skip
    return task_table(runs, min_runs=min_runs)


def test_known_records_carry_the_prior_and_the_live_combination() -> None:
    recs = _records()
    table = _table(recs)
    known = known_records(recs, table)
    assert len(known) == len(recs)  # every task has two other-agent runs
    for r in known:
        p = table.prior(r.instance_id, r.agent)
        assert np.all(r.scores[PRIOR] == p)
        live = [table.combine(float(m), p) for m in r.scores["monitor"]]
        np.testing.assert_allclose(r.scores[MONITOR_PRIOR], live, rtol=1e-12)
    assert known_records(recs, _table(recs, min_runs=3)) == []


def test_added_verdicts_count_for_other_agents_only() -> None:
    recs = _records()
    table = _table(recs[:30])
    more = with_verdicts(table, recs[30:])
    r = recs[40]
    assert table.prior(r.instance_id, r.agent) is None
    runs, fails = more.others(r.instance_id, r.agent)
    own = [x for x in recs[30:] if x.instance_id == r.instance_id and x.agent != r.agent]
    assert (runs, fails) == (len(own), sum(not x.resolved for x in own))


def test_known_candidates_load_as_the_bundles_known_choice() -> None:
    from monitor.schedule import Schedule
    from training.calibrate.thresholds import pick_thresholds

    recs = _records(60)
    table = _table(recs)
    th = pick_thresholds(
        recs, schedule=Schedule(min_steps=2), targets=[0.1], margin=2.0, fallback="none"
    )
    section = known_candidates(recs, th, scorers=["monitor", "signals_lr", "tfidf_lr"],
                               prior=table)  # fmt: skip
    assert {PRIOR, MONITOR_PRIOR, "monitor", "stack"} <= set(section["thresholds"])
    # the cap is the most other-agent runs a calibration run had (two here), the table unchanged
    assert section["prior"]["max_others"] == 2
    assert table.max_others == 0
    assert section["calibration_runs"] == len(recs)
    choice = Choice.from_json({"thresholds": {}, "known_tasks": section}, None)
    assert choice.known is not None
    assert choice.task_prior is not None
    assert set(choice.known.chosen) == set(AGENTS)
    assert all(e["as_unknown"] == [] or e["held_out_by_target"] for e in section["chosen"].values())
    best = {"held_out_by_target": {"0.1": 1.0}}  # an ordinary choice nothing beats
    gated = known_candidates(recs, th, scorers=["monitor", "signals_lr", "tfidf_lr"],
                             prior=table, ordinary={"chosen": {a: best for a in AGENTS}})  # fmt: skip
    assert all(e["as_unknown"] == ["0.1"] for e in gated["chosen"].values())
    with pytest.raises(ValueError, match="no calibration run"):
        known_candidates(recs, th, scorers=["monitor"], prior=_table(recs, min_runs=5))


def test_the_demo_prints_known_tasks_beside_the_served_choice() -> None:
    from training.pipeline.demo import known_tasks_line

    side = {"tokens_saved": 0.2, "realized_fpr": 0.03, "recall": 0.5}
    res = {
        "fpr05": {
            "target_fpr": 0.05,
            "known_tasks": {
                "known_runs": 7,
                "known_runs_served": 6,
                "overall": {
                    "runs": 9,
                    "served": {**side, "tokens_saved": 0.1},
                    "with_known_tasks": side,
                },
            },  # fmt: skip
        },
        "fpr10": {"target_fpr": 0.1, "known_tasks": {"known_runs": 0, "note": "none"}},
    }
    line = known_tasks_line(res)
    assert "7 of 9 test runs known, 6 served by the known-task choice; 20.0% saved at 3.0%" in line
    assert "without the verdicts: 10.0% at 3.0%" in line
    assert "0.1:" not in line
    assert known_tasks_line({"fpr10": res["fpr10"]}) == ""


def test_the_gate_serves_a_known_choice_only_where_it_saved_more_held_out() -> None:
    from training.evaluate.known_tasks import known_wins

    known = {"held_out_by_target": {"0.05": 0.20, "0.1": 0.10, "0.25": None}}
    ordinary = {"held_out_by_target": {"0.05": 0.15, "0.1": 0.10}}
    assert known_wins(known, ordinary, "0.05")
    assert not known_wins(known, ordinary, "0.1")  # a tie keeps the ordinary choice
    assert not known_wins(known, ordinary, "0.25")  # no known figure
    assert known_wins(known, None, "0.05")  # a group the ordinary choice does not hold
    assert known_wins(known, {"held_out_by_target": {}}, "0.05")
    assert not known_wins(None, ordinary, "0.05")


def test_added_verdicts_already_in_the_table_count_once() -> None:
    recs = _records()
    table = _table(recs)  # every run counted, with its digest
    assert with_verdicts(table, recs).counts == table.counts


def test_the_gated_comparison_takes_each_runs_path_by_its_groups_choices() -> None:
    from training.evaluate.candidates import SELECTED_PER_TARGET, Served
    from training.experiments.known_gate import gated

    recs = [_rec("A/0", "t0", "A", True), _rec("B/0", "t0", "B", False)]

    def served(stop_a: int, stop_b: int, saved: dict[str, float]) -> Served:
        stops = {SELECTED_PER_TARGET: {0.05: {"A/0": stop_a, "B/0": stop_b}}}
        choice = {g: {"held_out_by_target": {"0.05": v}} for g, v in saved.items()}
        return Served(recs, stops, [choice], {}, [])

    a = served(3, 4, {"A": 0.10, "B": 0.30})  # the ordinary path
    b = served(7, 8, {"A": 0.20, "B": 0.20})  # the known path: wins for A only
    out, counts = gated(a, {"A/0": 0, "B/0": 0}, b, {"A/0": 0, "B/0": 0}, "agent")
    assert out.stops[SELECTED_PER_TARGET][0.05] == {"A/0": 7, "B/0": 4}
    assert counts == {"0.05": {"known": 1, "ordinary": 1}}
    out, counts = gated(a, {"A/0": 0, "B/0": 0}, b, {"B/0": 0}, "agent")  # A/0: unknown task
    assert out.stops[SELECTED_PER_TARGET][0.05] == {"A/0": 3, "B/0": 4}
    assert counts == {"0.05": {"known": 0, "ordinary": 2}}
    assert b.stops[SELECTED_PER_TARGET][0.05] == {"A/0": 7, "B/0": 8}  # left as it was


def test_the_sharpness_stress_inflates_counts_and_drops_the_cap_only_when_asked() -> None:
    from monitor.schedule import Schedule
    from training.calibrate.thresholds import pick_thresholds
    from training.evaluate.shipped import shipped_candidates
    from training.experiments.prior_sharpness import inflated, markdown, stress

    recs = _records(60)
    cal, test = recs[:120], recs[120:]
    table = _table(cal)
    th = pick_thresholds(
        cal, schedule=Schedule(min_steps=2), targets=[0.1], margin=2.0, fallback="none"
    )
    scorers = ["monitor", "signals_lr", "tfidf_lr"]
    cands = shipped_candidates(cal, th, scorers=scorers)
    cands["known_tasks"] = known_candidates(cal, th, scorers=scorers, prior=table, ordinary=cands)
    capped = TaskPrior.from_json(cands["known_tasks"]["prior"])
    assert capped.max_others == 2
    big = inflated(capped, 5, capped=True)
    assert big.counts["t0"]["A"] == [5 * c for c in capped.counts["t0"]["A"]]
    assert big.prior("t0", "A") == pytest.approx(capped.prior("t0", "A"))  # the cap holds it
    assert inflated(capped, 5, capped=False).max_others == 0
    rows = stress(test, th, cands, factors=[1, 5], targets=[0.1])
    assert [(r["factor"], r["capped"]) for r in rows] == [
        (1, True),
        (1, False),
        (5, True),
        (5, False),
    ]
    assert rows[0]["overall"] == rows[1]["overall"]  # nothing to cap at factor 1
    assert rows[0]["overall"]["runs"] == len(test)  # every test task is known
    assert markdown(rows).count("\n") == 2 + len(rows)
