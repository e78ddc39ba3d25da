"""Monitor / Session decisions with a scripted scorer, decision log, and the finish tool."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pytest

from monitor.decision_log import DecisionLog
from monitor.finish import FINISH_TOOL, NUDGE_TEXT, FinishError, validate_finish
from monitor.halts import Budget
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from monitor.types import Step


def bash(i: int, cmd: str, obs: str = "ok", err: bool = False, **kw) -> Step:
    return Step(index=i, tool="bash", action=cmd, observation=obs, is_error=err, **kw)


def test_check_stops_before_the_step_budget_is_exceeded() -> None:
    session = Monitor(PolicyConfig(budget=Budget(max_steps=5))).start(task="t")
    actions = []
    for i in range(10):
        d = session.check()
        actions.append(d.action)
        if d.stop:
            break
        session.observe(bash(i, f"ls {i}", f"o{i}"))
    # steps 1,2,3 free; 60% of 5 = 3 steps -> warn at checks 4 and 5; stop before a 6th call
    assert actions == ["continue", "continue", "continue", "warn", "warn", "stop"]
    assert session.k == 5
    assert d.reason == "step_budget"
    assert d.restart is not None
    assert session.check() is d  # sticky


def test_score_stops_only_at_checked_steps() -> None:
    scorer = ScriptedScorer([0.9, 0.9, 0.2, 0.6, 0.8], threshold=0.7, warn_threshold=0.5)
    m = Monitor(PolicyConfig(min_steps=3, every=2, persist=1), scorer=scorer)
    s = m.start(task="fix bug", agent="mini-swe-agent")
    out = [s.observe(bash(i, f"cmd {i}", f"o{i}")) for i in range(5)]
    assert [d.action for d in out] == ["warn", "warn", "continue", "warn", "stop"]
    assert out[0].reason == "predicted_failure"
    assert out[4].reason == "predicted_failure"
    assert out[4].score == pytest.approx(0.8)
    assert out[4].threshold == pytest.approx(0.7)
    assert out[4].step == 5
    assert scorer.started == [("fix bug", "mini-swe-agent")]


def test_config_threshold_overrides_scorer() -> None:
    scorer = ScriptedScorer([0.6], threshold=0.9, warn_threshold=0.8)
    s = Monitor(PolicyConfig(min_steps=1, threshold=0.5, persist=1), scorer=scorer).start()
    assert s.observe(bash(0, "ls")).action == "stop"


def test_persistence_needs_consecutive_checked_scores() -> None:
    # checked k = 3, 5, 7: 0.8 (spike), 0.2, 0.8, then 0.9 -> stop at 9 with persist 2
    scores = [0.1, 0.9, 0.8, 0.9, 0.2, 0.9, 0.8, 0.1, 0.9]
    scorer = ScriptedScorer(scores, threshold=0.7, warn_threshold=0.5)
    s = Monitor(PolicyConfig(min_steps=3, every=2, persist=2), scorer=scorer).start()
    out = [s.observe(bash(i, f"cmd {i}", f"o{i}")) for i in range(9)]
    assert [d.step for d in out if d.stop] == [9]
    assert out[8].evidence["checked_scores"] == [pytest.approx(0.8), pytest.approx(0.9)]
    # a failed score at a checked step breaks the streak
    scorer = ScriptedScorer([0.9] * 6, threshold=0.7, fail_at=2)
    s = Monitor(PolicyConfig(min_steps=1, persist=2), scorer=scorer).start()
    out = [s.observe(bash(i, f"cmd {i}", f"o{i}")) for i in range(6)]
    assert [d.reason for d in out[:2]] == ["predicted_failure", "monitor_error"]
    assert [d.step for d in out if d.stop][0] == 4  # 0.9 at 3 and 4, not 1 and 3


def test_default_policy_persists_over_two_checks() -> None:
    assert PolicyConfig().persist == 2


@pytest.mark.parametrize("persist", [1, 2, 3])
def test_live_session_agrees_with_offline_first_stop(persist: int) -> None:
    rng = np.random.default_rng(persist)
    for _ in range(60):
        n = int(rng.integers(1, 15))
        scores = rng.random(n).round(3).tolist()
        t = float(rng.choice([0.3, 0.5, 0.7, 0.9]))
        ms, ev = int(rng.integers(1, 5)), int(rng.integers(1, 3))
        cfg = PolicyConfig(min_steps=ms, every=ev, persist=persist, context_thrash_n=None)
        s = Monitor(cfg, scorer=ScriptedScorer(scores, threshold=t, warn_threshold=t)).start()
        live = None
        for i in range(n):
            d = s.observe(bash(i, f"cmd {i}", f"o{i}"))
            if d.stop and live is None:
                live = d.step
        assert live == cfg.first_stop(scores, t)


def test_failing_scorer_continues_with_monitor_error(caplog: pytest.LogCaptureFixture) -> None:
    scorer = ScriptedScorer([0.1], fail_at=2)
    log = DecisionLog()
    s = Monitor(scorer=scorer, log=log).start()
    s.observe(bash(0, "a"))
    with caplog.at_level(logging.ERROR):
        d = s.observe(bash(1, "b"))
    assert (d.action, d.reason) == ("continue", "monitor_error")
    assert "scorer failed at step 2" in caplog.text
    assert log.decisions[("continue", "monitor_error")] == 1
    assert "error" in d.evidence  # the cause, not only in the log
    assert s.observe(bash(2, "c")).reason == "ok"


def test_a_step_of_the_wrong_kind_gives_monitor_error_never_an_exception() -> None:
    log = DecisionLog()
    s = Monitor(scorer=ScriptedScorer([0.1]), log=log).start()
    d = s.observe({"tool": "bash"})  # type: ignore[arg-type]
    assert (d.action, d.reason) == ("continue", "monitor_error")
    assert "takes a monitor.types.Step, not dict" in d.evidence["error"]
    d = s.observe(Step(index=0, tool=5, action=b"ls", observation=None))  # type: ignore[arg-type]
    assert (d.action, d.reason) == ("continue", "monitor_error")
    assert d.evidence["error"]
    d = s.observe(Step(index=0, action="ls", tokens_in="5"))  # type: ignore[arg-type]
    assert "tokens_in must be an int" in d.evidence["error"]
    assert log.decisions[("continue", "monitor_error")] == 3
    d = s.observe(bash(1, "ls", "a.py"))  # the session goes on, as if the bad steps never came
    assert (d.action, d.step, d.score) == ("continue", 1, 0.1)
    assert s.scores == [0.1]


def test_stuck_pattern_stop_has_restart_packet_with_diff_and_summary() -> None:
    s = Monitor().start(task="make test_x pass")
    s.diff = "diff --git a/x.py b/x.py\n+fix\n"
    fail = "FAILED tests/test_x.py::test_x\n1 failed in 0.1s"
    decisions = [
        s.observe(bash(i, "python -m pytest tests/test_x.py", fail, True)) for i in range(3)
    ]
    d = decisions[-1]
    assert [x.action for x in decisions] == ["continue", "continue", "stop"]
    assert d.reason == "stuck_pattern"
    assert d.evidence["action_error_run"] == {"value": 3, "limit": 3, "reason": "stuck_pattern"}
    assert d.restart is not None
    assert d.restart.diff == s.diff
    assert d.restart.task == "make test_x pass"  # the packet alone can start the fresh run
    assert "Stopped after 3 steps (stuck_pattern)" in d.restart.summary
    assert "Most repeated call (3x): python -m pytest tests/test_x.py" in d.restart.summary
    assert "Last error: FAILED tests/test_x.py::test_x" in d.restart.summary


def test_context_thrash_restart_carries_the_task() -> None:
    s = Monitor(PolicyConfig(context_thrash_n=2, context_thrash_m=10)).start(task="THE TASK")
    s.observe(Step(0, kind="compaction"))
    s.observe(bash(1, "ls"))
    d = s.observe(Step(2, kind="compaction"))
    assert (d.action, d.reason) == ("stop", "context_thrash")
    assert d.restart is not None
    assert d.restart.task == "THE TASK"


def test_format_errors_stop_at_three() -> None:
    s = Monitor().start()
    out = [s.observe(Step(i, kind="format_error")) for i in range(3)]
    assert [d.action for d in out] == ["continue", "continue", "stop"]
    assert out[-1].reason == "format_errors"


def test_guard_call_counts_normalised_calls() -> None:
    s = Monitor(PolicyConfig(budget=Budget(max_repeats=2))).start()
    assert s.guard_call("bash", "pytest -q a.py") == 0
    s.observe(bash(0, "pytest a.py"))
    s.observe(Step(1, tool="Bash", args={"command": "pytest  'a.py'", "description": "x"}))
    assert s.guard_call("bash", "pytest -v a.py") == 2
    assert s.guard_call("Bash", {"command": "pytest a.py"}) == 2
    d = s.observe(bash(2, "pytest a.py"))
    assert (d.action, d.reason) == ("stop", "repeat_loop")


def test_decision_log_counts_and_writes_json_lines() -> None:
    sink = io.StringIO()
    log = DecisionLog(sink)
    m = Monitor(PolicyConfig(budget=Budget(max_steps=4)), log=log)
    s = m.start(task="t", agent="swe-agent", run="run-1")
    for i in range(4):
        if s.check().stop:
            break
        s.observe(bash(i, f"c{i}", f"o{i}"))
    assert s.check().stop
    lines = [json.loads(x) for x in sink.getvalue().splitlines()]
    # quiet continues are counted, not written: warns at steps 3 and 4, stop from check
    assert [(x["step"], x["action"], x["reason"]) for x in lines] == [
        (3, "warn", "step_budget"),
        (4, "warn", "step_budget"),
        (4, "stop", "step_budget"),
    ]
    assert lines[-1]["run"] == "run-1"
    assert lines[-1]["agent"] == "swe-agent"
    assert lines[-1]["event"] == "check"
    text = log.prometheus_text()
    assert 'failfast_decisions_total{action="continue",reason="ok"} 2' in text
    assert 'failfast_decisions_total{action="warn",reason="step_budget"} 2' in text
    assert 'failfast_decisions_total{action="stop",reason="step_budget"} 1' in text
    assert "# TYPE failfast_decisions_total counter" in text


def test_finish_validator() -> None:
    ok = validate_finish({"status": "completed", "summary": "fixed", "evidence": "3 passed"})
    assert (ok.status, ok.blocker) == ("completed", "")
    blocked = validate_finish(
        {"status": "blocked", "summary": "s", "evidence": "e", "blocker": "no network"}
    )
    assert blocked.blocker == "no network"
    with pytest.raises(FinishError, match="blocker is required when status is impossible"):
        validate_finish({"status": "impossible", "summary": "s", "evidence": "e"})
    with pytest.raises(FinishError, match=r"status must be one of.*'done'.*evidence is required"):
        validate_finish({"status": "done", "summary": "s", "evidence": " "})
    with pytest.raises(FinishError, match="unknown fields: extra"):
        validate_finish({"status": "completed", "summary": "s", "evidence": "e", "extra": 1})
    params = FINISH_TOOL["function"]["parameters"]
    assert params["properties"]["status"]["enum"] == ["completed", "blocked", "impossible"]
    assert "finish" in NUDGE_TEXT


def test_error_line_is_the_exception_not_the_last_line() -> None:
    from monitor.restart_summary import error_line

    out = (
        'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n'
        "    f()\nModuleNotFoundError: No module named 'astropy.extern'\n\n"
        "=== short test summary ===\n1 failed in 0.12s\n"
    )
    assert error_line(out) == "ModuleNotFoundError: No module named 'astropy.extern'"
    pytest_out = "    assert f() == 2\nE   assert 1 == 2\nE   AssertionError: bad\n1 failed in 0.1s"
    assert error_line(pytest_out) == "AssertionError: bad"
    assert error_line("FAILED t.py::test_a - x\n1 failed in 0.1s") == "FAILED t.py::test_a - x"
    assert error_line("bash: foo: command not found") == "bash: foo: command not found"
    assert error_line("") == ""


def test_steps_after_a_stop_keep_stopping_with_their_own_step_and_score() -> None:
    scorer = ScriptedScorer([0.1, 0.9, 0.95, 0.3, 0.2], threshold=0.5)
    s = Monitor(PolicyConfig(min_steps=2, persist=1), scorer=scorer).start("THE TASK", "a")
    ds = [s.observe(bash(i, f"cmd {i}")) for i in range(5)]
    assert [d.action for d in ds] == ["continue", "stop", "stop", "stop", "stop"]
    first = ds[1]
    assert [d.step for d in ds[1:]] == [2, 3, 4, 5]
    assert [d.score for d in ds[2:]] == pytest.approx([0.95, 0.3, 0.2])
    assert all(d.evidence["stopped_at_step"] == 2 for d in ds[2:])
    assert all(d.reason == first.reason and d.restart is first.restart for d in ds[2:])
    assert first.restart is not None
    assert first.restart.task == "THE TASK"
    assert (s.check().step, s.check().action) == (5, "stop")


def test_error_line_reads_inside_a_harness_wrapper() -> None:
    from monitor.restart_summary import error_line

    wrapped = "<returncode>1</returncode>\n<output>\nrunning\nError: boom\n</output>"
    assert error_line(wrapped) == "Error: boom"
    after = "<returncode>1</returncode>\n<output>\nfoo\nbar\n</output>\nsubmit your solution now"
    assert error_line(after) == "bar"  # not the closing tag, not the harness's instructions
    assert error_line("x\nfatal: not a git repository") == "fatal: not a git repository"
