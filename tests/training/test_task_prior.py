"""The known-task screen (training.experiments.task_prior): a run's prior counts only other
agents' verdicts on its task, and the records gain `prior` and `monitor_prior`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.types import Trajectory
from training.data.records import RunRecord, load_records, save_records
from training.experiments.task_prior import leave_agent_out_priors, main, with_prior


def _run(rid: str, task: str, agent: str, resolved: bool | None) -> Trajectory:
    return Trajectory(id=rid, instance_id=task, agent=agent, resolved=resolved)


RUNS = [
    _run("a1", "t1", "A", True),
    _run("a2", "t1", "A", False),  # the same agent's other run on t1: never counted for a1
    _run("b1", "t1", "B", False),
    _run("c1", "t1", "C", False),
    _run("c2", "t2", "C", True),
    _run("d1", "t2", "D", None),  # no verdict: neither scored nor counted
]


def test_a_runs_prior_counts_only_other_agents_verdicts_on_its_task():
    p = leave_agent_out_priors(RUNS)
    p0 = 3 / 5  # unresolved among the five labelled runs
    assert set(p) == {"a1", "a2", "b1", "c1", "c2"}
    assert p["a1"] == pytest.approx((2 + p0) / 3)  # b1, c1 both unresolved; a2 not counted
    assert p["b1"] == pytest.approx((2 + p0) / 4)  # a1 resolved, a2 and c1 unresolved
    assert p["c2"] == pytest.approx(p0)  # no other labelled agent ran t2


def test_max_others_keeps_that_many_runs_and_is_seeded():
    many = [_run("x", "t", "X", True)] + [
        _run(f"o{i}", "t", f"O{i}", i % 2 == 0) for i in range(10)
    ]
    got = leave_agent_out_priors(many, max_others=2, seed=3)
    p0 = float(np.mean([not r.resolved for r in many]))
    assert got["x"] * 3 - p0 == pytest.approx(round(got["x"] * 3 - p0))  # 0, 1 or 2 failures
    assert got == leave_agent_out_priors(many, max_others=2, seed=3)
    seeds = {leave_agent_out_priors(many, max_others=2, seed=s)["x"] for s in range(20)}
    assert len(seeds) > 1


def test_no_labelled_run_is_refused():
    with pytest.raises(ValueError, match="no labelled runs"):
        leave_agent_out_priors([_run("d1", "t2", "D", None)])


def _record(rid: str, monitor: list[float]) -> RunRecord:
    n = len(monitor)
    return RunRecord(
        rid, "t1", "A", "s", True, np.full(n, 10, dtype=np.int64), {"monitor": np.array(monitor)}
    )


def test_monitor_prior_moves_the_monitors_odds_by_the_priors():
    rec = _record("a1", [0.5, 0.2, 0.9])
    (out,) = with_prior([rec], {"a1": 0.75}, weight=1.0)
    np.testing.assert_allclose(out.scores["prior"], [0.75] * 3)
    # odds 1 x 3 = 3 -> 0.75; 0.25 x 3 -> 0.4286; 9 x 3 = 27 -> 0.9643
    np.testing.assert_allclose(out.scores["monitor_prior"], [0.75, 3 / 7, 27 / 28], rtol=1e-9)
    np.testing.assert_array_equal(out.scores["monitor"], rec.scores["monitor"])
    (flat,) = with_prior([rec], {"a1": 0.75}, weight=0.0)
    np.testing.assert_allclose(flat.scores["monitor_prior"], rec.scores["monitor"], rtol=1e-9)


def test_a_record_without_a_labelled_run_is_refused_by_id():
    with pytest.raises(ValueError, match="zz"):
        with_prior([_record("zz", [0.5])], {"a1": 0.5})


def test_the_command_writes_each_views_records_and_the_pairs(tmp_path, monkeypatch):
    from training.evaluate.views import PAIRS_JSON

    a = tmp_path / "a"
    save_records(a / "instance" / "records.parquet", [_record("a1", [0.5, 0.6])])
    save_records(a / "time" / "records.parquet", [_record("b1", [0.4])])
    save_records(a / "time" / "calibration-0.parquet", [_record("c1", [0.3])])
    (a / "time" / PAIRS_JSON).write_text(json.dumps([["b1"]]))
    monkeypatch.setattr("monitor.corpus.load_corpus", lambda path: RUNS)
    out = tmp_path / "c"
    args = [str(a), "--corpus", "x", "--out", str(out), "--views", "instance", "time"]
    assert main([*args, "--min-runs", "1", "--own-agent"]) == 0
    (rec,) = load_records(out / "instance" / "records.parquet")
    assert set(rec.scores) == {"monitor", "prior", "monitor_prior"}
    (cal,) = load_records(out / "time" / "calibration-0.parquet")
    assert cal.run_id == "c1"
    assert "prior" in cal.scores
    assert json.loads((out / "time" / PAIRS_JSON).read_text()) == [["b1"]]


def test_own_agent_counts_the_agents_other_runs_but_never_the_run_itself():
    p = leave_agent_out_priors(RUNS, own_agent=True)
    p0 = 3 / 5
    assert p["a1"] == pytest.approx((3 + p0) / 4)  # a2, b1, c1: all unresolved
    assert p["a2"] == pytest.approx((2 + p0) / 4)  # a1 resolved, b1 and c1 not


def test_below_min_runs_a_task_gets_the_corpus_rate():
    p = leave_agent_out_priors(RUNS, min_runs=3)
    p0 = 3 / 5
    assert p["b1"] == pytest.approx((2 + p0) / 4)  # three other runs: a1, a2, c1
    assert p["a1"] == pytest.approx(p0)  # two: b1, c1
    assert p["c2"] == pytest.approx(p0)


def test_known_only_keeps_the_runs_of_known_tasks_and_their_pairs(tmp_path, monkeypatch):
    """--known-only --min-runs M: only runs with M or more other-agent runs stay, in the records,
    the calibration records and each pair's test ids (what the bundle's known-task choice is
    calibrated and served on)."""
    from training.evaluate.views import PAIRS_JSON

    a = tmp_path / "a"
    save_records(a / "time" / "records.parquet", [_record("b1", [0.4]), _record("c2", [0.5])])
    save_records(a / "time" / "calibration-0.parquet", [_record("a1", [0.3]), _record("c2", [0.2])])
    (a / "time" / PAIRS_JSON).write_text(json.dumps([["b1", "c2"]]))
    monkeypatch.setattr("monitor.corpus.load_corpus", lambda path: RUNS)
    out = tmp_path / "c"
    args = [str(a), "--corpus", "x", "--out", str(out), "--views", "time", "--known-only"]
    assert main([*args, "--min-runs", "2"]) == 0
    # b1 has three other-agent runs (a1, a2, c1), a1 two (b1, c1), c2 none (d1 is unlabelled)
    assert [r.run_id for r in load_records(out / "time" / "records.parquet")] == ["b1"]
    assert [r.run_id for r in load_records(out / "time" / "calibration-0.parquet")] == ["a1"]
    assert json.loads((out / "time" / PAIRS_JSON).read_text()) == [["b1"]]
    with pytest.raises(SystemExit):
        main([*args, "--min-runs", "0"])


def test_a_repository_prior_counts_the_repositorys_other_tasks_only():
    from training.experiments.task_prior import repo_priors

    runs = [
        _run("a1", "django__django-1", "A", True),
        _run("b1", "django__django-1", "B", False),  # the same task: never counted for a1
        _run("a2", "django__django-2", "A", False),
        _run("b2", "django__django-3", "B", False),
        _run("c1", "sympy__sympy-1", "C", True),
    ]
    p = repo_priors(runs)
    p0 = 3 / 5
    assert p["a1"] == pytest.approx((2 + p0) / 3)  # a2, b2
    assert p["a2"] == pytest.approx((2 + p0) / 4)  # a1, b1, b2
    assert p["c1"] == pytest.approx(p0)  # no other sympy task
    q = repo_priors(runs, own_agent=False)
    assert q["a1"] == pytest.approx((1 + p0) / 2)  # b2 only
    assert repo_priors(runs, min_runs=3)["a1"] == pytest.approx(p0)
