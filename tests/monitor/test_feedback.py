"""Verdict feedback: which verdicts count, the closed-run record, status, metrics, drift line;
and the Session side (per-step scores in the end record, scoring after a stop, verdict)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from monitor.decision_log import DecisionLog
from monitor.errors import VerdictError
from monitor.feedback import Feedback, RunOutcome
from monitor.fpr_watches import OTHER
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from monitor.types import Step


def outcome(
    n: int, stop: int | None = None, *, agent: str = "a", shadow: bool = False, run: str = "r"
):
    return RunOutcome("", run, agent, n, stop, "predicted_failure" if stop else None, shadow)


def test_counting_rules() -> None:
    fb = Feedback(0.05, ["a"])
    got = fb.report(outcome(10), True)
    assert (got["counted"], got["stopped"], got["group"]) == (True, False, "a")
    # stopped at 4 with nothing after: the stop was obeyed, the verdict is not counted
    got = fb.report(outcome(4, 4), True)
    assert not got["counted"]
    assert "obeyed" in got["not_counted_because"]
    # steps after the stop: the harness let it run, a false positive
    got = fb.report(outcome(9, 4), True)
    assert got["counted"]
    assert got["watch"]["stopped_resolved"] == 1
    # the harness says it finished at the stop step
    assert fb.report(outcome(4, 4), False, finished=True)["counted"]
    # and that one did not finish although steps came after
    assert not fb.report(outcome(9, 4), True, finished=False)["counted"]
    # a shadow run counts whole
    assert fb.report(outcome(4, 4, shadow=True), True)["counted"]
    w = fb.watches["a"]
    assert (w.runs, w.resolved, w.stopped) == (4, 3, 2)
    assert fb.status()["groups"]["a"]["not_counted"] == 2
    assert fb.status()["groups"]["a"]["verdicts"] == 6


def test_shadow_sample_counts_shadow_runs_only() -> None:
    fb = Feedback(0.05, ["a"], sample="shadow")
    assert not fb.report(outcome(10), True)["counted"]
    assert fb.report(outcome(10, shadow=True), True)["counted"]
    assert fb.report(outcome(3, 3, shadow=True), True)["counted"]
    assert (fb.watches["a"].resolved, fb.watches["a"].stopped) == (2, 1)
    with pytest.raises(ValueError, match="sample"):
        Feedback(0.05, sample="some")


def test_second_verdict_is_refused_and_groups_are_bounded() -> None:
    fb = Feedback(0.05, ["a", "b"])
    o = outcome(5, agent="someone-new")
    assert fb.report(o, True)["group"] == OTHER
    with pytest.raises(VerdictError, match="already has a verdict"):
        fb.report(o, False)
    assert fb.groups == ["a", "b", OTHER]
    assert fb.group(None) == OTHER


def test_runs_count_in_their_source_group_when_groups_are_sources() -> None:
    fb = Feedback(0.05, ["swe-agent-gpt4", "moatless-claude"], group_by="source")
    o = RunOutcome("", "r1", "swe-agent", 10, source="swe-agent-gpt4")
    assert fb.report(o, True)["group"] == "swe-agent-gpt4"
    assert fb.group("swe-agent") == OTHER  # by agent alone: not one of the groups
    assert fb.group("moatless-claude", source="unknown-source") == "moatless-claude"
    # a Session opened with a source reports it
    # groups that are agents: a run's source plays no part (as in the thresholds lookup)
    by_agent = Feedback(0.05, ["a", "b"])
    assert by_agent.group("a", source="b") == "a"
    sink = io.StringIO()
    mon = Monitor(PolicyConfig(), feedback=fb, log=DecisionLog(sink))
    sess = mon.start("t", "moatless", source="moatless-claude")
    sess.observe(Step(index=0, action="ls", observation="x"))
    assert sess.verdict(True)["group"] == "moatless-claude"
    sess.end()
    end = [json.loads(x) for x in sink.getvalue().splitlines() if '"end"' in x][-1]
    assert end["source"] == "moatless-claude"  # so failfast calibrate can group logged runs


def test_closed_runs_are_remembered_within_bounds() -> None:
    fb = Feedback(0.05, keep=2)
    for i in range(3):
        fb.closed(RunOutcome(f"s{i}", f"run{i % 2}", None, 3))
    assert len(fb) == 2
    assert fb.find(session="s0") is None  # the oldest was forgotten
    assert fb.find(session="s1").run == "run1"
    assert fb.find(run="run0").session == "s2"  # the latest closed with that run id
    assert fb.find(run="run1").session == "s1"
    assert fb.find(run="nope") is None


def test_drift_flag_status_metrics_and_one_warning(caplog) -> None:
    sink = io.StringIO()
    fb = Feedback(0.05, ["a"], log=DecisionLog(sink))
    with caplog.at_level(logging.WARNING, logger="failfast.drift"):
        flagged_at = None
        for i in range(200):
            got = fb.report(outcome(10, 5 if i % 3 == 0 else None, run=f"r{i}"), True)
            if got["flagged_now"]:
                flagged_at = got["watch"]["flagged_at_resolved"]
    assert flagged_at is not None
    assert flagged_at < 60  # a third of resolved runs stopped: far above 5%
    warnings = [r for r in caplog.records if r.name == "failfast.drift"]
    assert len(warnings) == 1
    assert "drift: a realized FPR" in warnings[0].getMessage()
    st = fb.status()
    a = st["groups"]["a"]
    assert st["drift"] is True
    assert a["drift"] is True
    assert a["flagged_at"].endswith("Z")
    assert a["resolved"] == 200
    assert a["stopped_resolved"] == 67
    assert a["realized_fpr"] == pytest.approx(67 / 200)
    lo, hi = a["interval"]
    assert 0.05 < lo < 67 / 200 < hi
    text = fb.prometheus_text()
    assert 'failfast_fpr_drift{group="a"} 1' in text
    assert f'failfast_fpr_drift{{group="{OTHER}"}} 0' in text
    assert f'failfast_fpr_realized{{group="{OTHER}"}} NaN' in text
    assert 'failfast_fpr_realized{group="a"} 0.335' in text
    assert 'failfast_verdicts_total{group="a",outcome="resolved"} 200' in text
    assert "failfast_fpr_target 0.05" in text
    lines = [json.loads(x) for x in sink.getvalue().splitlines()]
    assert len(lines) == 200
    assert lines[0]["event"] == "verdict"
    assert lines[0]["resolved"] is True
    assert lines[0]["stop_step"] == 5


def steps(n: int) -> list[Step]:
    return [Step(index=i, tool="bash", action=f"cmd {i}", observation=f"out {i}") for i in range(n)]


def test_session_end_record_scores_after_a_stop_and_verdict() -> None:
    sink = io.StringIO()
    scorer = ScriptedScorer([0.1, 0.2, 0.9, 0.95, 0.3, 0.2], threshold=0.5)
    monitor = Monitor(PolicyConfig(min_steps=3, persist=2), scorer=scorer, log=DecisionLog(sink))
    s = monitor.start("task", "mini-swe-agent", run="run-1")
    actions = [s.observe(x).action for x in steps(6)]
    assert actions[:4] == ["continue", "continue", "warn", "stop"]
    assert actions[4:] == ["stop", "stop"]  # the stop decision repeats ...
    assert s.scores == pytest.approx([0.1, 0.2, 0.9, 0.95, 0.3, 0.2])  # ... scoring goes on
    s.end()
    end = [json.loads(x) for x in sink.getvalue().splitlines() if '"end"' in x][-1]
    assert end["event"] == "end"
    assert end["scores"] == pytest.approx([0.1, 0.2, 0.9, 0.95, 0.3, 0.2])
    assert end["tokens"] == [0] * 6
    assert (end["steps"], end["stop_step"], end["shadow"]) == (6, 4, False)
    got = s.verdict(True)  # steps came after the stop: counted, a false positive
    assert got["counted"]
    assert got["stopped"]
    assert got["group"] == OTHER  # a scripted scorer has no threshold groups
    assert monitor.feedback.watches[OTHER].stopped == 1
    with pytest.raises(VerdictError):
        s.verdict(True)


def test_session_verdict_of_an_obeyed_stop_is_not_counted() -> None:
    scorer = ScriptedScorer([0.9], threshold=0.5)
    monitor = Monitor(PolicyConfig(min_steps=1, persist=1), scorer=scorer)
    s = monitor.start("t", "a", run="r")
    assert s.observe(steps(1)[0]).stop
    got = s.verdict(False)
    assert not got["counted"]
    assert monitor.feedback.watches[OTHER].runs == 0


def test_known_task_runs_are_also_watched_apart(caplog: pytest.LogCaptureFixture) -> None:
    """Runs the known-task choice served count in their group and in its known_tasks watch;
    drift there alone (over-stopping known tasks, e.g. after `failfast known-tasks` added many
    verdicts) is flagged and named, while the group as a whole is not."""
    fb = Feedback(0.05, ["a"])
    assert "known_tasks" not in fb.status()["groups"]["a"]
    assert "failfast_known_tasks_fpr" not in fb.prometheus_text()
    for i in range(600):  # ordinary runs: never stopped
        fb.report(outcome(10, run=f"o{i}"), True)
    with caplog.at_level(logging.WARNING, logger="failfast.drift"):
        for i in range(60):  # known-task runs: a third of the resolved ones stopped
            o = outcome(10, 5 if i % 3 == 0 else None, run=f"k{i}")
            o.known_task = True
            got = fb.report(o, True)
            assert got["known_task"] is True
    a = fb.status()["groups"]["a"]
    assert (a["resolved"], a["stopped_resolved"]) == (660, 20)
    assert a["drift"] is False  # 3% over the group
    k = a["known_tasks"]
    assert (k["resolved"], k["stopped_resolved"], k["drift"]) == (60, 20, True)
    assert k["flagged_at"].endswith("Z")
    assert fb.status()["drift"] is True
    warnings = [r.getMessage() for r in caplog.records if r.name == "failfast.drift"]
    assert len(warnings) == 1
    assert "a (known tasks" in warnings[0]
    text = fb.prometheus_text()
    assert 'failfast_known_tasks_fpr_drift{group="a"} 1' in text
    assert 'failfast_fpr_drift{group="a"} 0' in text
