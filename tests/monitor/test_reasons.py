"""Halt-reason report: replay runs, read decision logs, per-agent counts and the tuning note."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from monitor.decision_log import DecisionLog
from monitor.policy import PolicyConfig
from monitor.reasons import (
    format_report,
    is_decision_log,
    outcomes_from_log,
    reason_table,
    replay,
    replay_runs,
)
from monitor.session import Monitor
from monitor.types import Step, Trajectory

FAIL = "FAILED t.py::x\n1 failed in 0.1s"


def looping(i: int, resolved: bool | None, agent: str = "a") -> Trajectory:
    steps = [
        Step(k, tool="bash", action="pytest t.py", observation=FAIL, is_error=True)
        for k in range(4)
    ]
    return Trajectory(
        id=f"loop{i}", instance_id=f"i{i}", agent=agent, steps=steps, resolved=resolved
    )


def clean(i: int, resolved: bool, agent: str = "a") -> Trajectory:
    steps = [Step(k, tool="bash", action=f"cat f{k}.py", observation=f"src {k}") for k in range(5)]
    return Trajectory(id=f"ok{i}", instance_id=f"j{i}", agent=agent, steps=steps, resolved=resolved)


def test_replay_records_first_stop_and_audit_rules() -> None:
    out = replay(looping(0, False), PolicyConfig(), audit=True)
    assert out.fired["stop:stuck_pattern"] == 3
    assert out.fired["rule:stuck.action_error_run"] == 3
    assert out.fired["rule:analyser.max_repeat"] == 3
    assert out.fired["rule:analyser.max_error_streak"] == 4
    assert out.fired["rule:stuck.same_pair_run"] == 4
    assert "rule:analyser.steps" not in out.fired
    assert replay(clean(0, True), PolicyConfig()).fired == {}


def test_table_counts_by_label_and_flags_tuning_problem() -> None:
    runs = [looping(i, True) for i in range(3)] + [
        looping(9, False),
        clean(0, False),
        looping(7, None),
    ]
    runs += [looping(20, False, agent="b")]
    rows = reason_table(replay_runs(runs, PolicyConfig()), min_runs=4)
    row = next(r for r in rows if r.agent == "a" and r.item == "stop:stuck_pattern")
    assert (row.fired, row.resolved, row.unresolved, row.unknown) == (5, 3, 1, 1)
    assert row.share_resolved == 0.75
    assert row.tuning_problem
    row_b = next(r for r in rows if r.agent == "b" and r.item == "stop:stuck_pattern")
    assert (row_b.fired, row_b.share_resolved, row_b.tuning_problem) == (1, 0.0, False)
    text = format_report(replay_runs(runs, PolicyConfig()), rows)
    assert "agent=a runs=6 resolved=3 (60.0% of labelled) unknown=1" in text
    assert "TUNING: fires mostly on resolved runs" in text.split("agent=b")[0]
    assert "TUNING" not in text.split("agent=b")[1]
    few = reason_table(replay_runs(runs, PolicyConfig()), min_runs=5)
    assert not any(r.tuning_problem for r in few)
    assert "(mostly resolved, but under 5 runs)" in format_report(
        replay_runs(runs, PolicyConfig()), few
    )


def test_decision_log_round_trip(tmp_path: Path) -> None:
    sink = io.StringIO()
    log = DecisionLog(sink)
    m = Monitor(log=log)
    for i, (traj, resolved) in enumerate([(looping(0, False), False), (clean(1, True), True)]):
        s = m.start(task="", agent="swe-agent", run=f"r{i}")
        for step in traj.steps:
            s.observe(step)
        s.end(traj.submission, resolved=resolved)
    path = tmp_path / "decisions.jsonl"
    path.write_text(sink.getvalue())
    assert is_decision_log(path)
    outs = outcomes_from_log(path)
    by_run = {o.run: o for o in outs}
    assert by_run["r0"].fired == {"stop:stuck_pattern": 3}
    assert by_run["r0"].resolved is False
    assert by_run["r1"].fired == {}
    assert by_run["r1"].resolved is True


def test_transcript_is_not_a_decision_log(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"type": "system", "subtype": "init"}) + "\n")
    assert not is_decision_log(p)
    assert not is_decision_log(tmp_path)


@pytest.mark.data
def test_reasons_cli_on_real_runs(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from training.cli import main

    out = tmp_path / "rows.json"
    src = data_dir / "swe-bench-verified/mini-swe-agent-gemini-3-pro"
    assert main(["reasons", str(src), "--audit", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "agent=mini-swe-agent runs=300 resolved=223 (74.3% of labelled) unknown=0" in text
    rows = {r["item"]: r for r in json.loads(out.read_text())}
    # the transcript-analyser rule's repeat trigger fires on most good runs of this agent
    rep = rows["rule:analyser.max_repeat"]
    assert rep["fired"] == rep["resolved"] + rep["unresolved"]
    assert rep["share_resolved"] > 0.5
    assert rep["tuning_problem"] is True
