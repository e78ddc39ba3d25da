"""Review flags: scope_widening, unsupported_completion, spec_forgotten (issue 8)."""

from __future__ import annotations

from monitor.flags import FlagConfig, FlagTracker, diff_files, fit_scope_caps, task_files
from monitor.policy import PolicyConfig
from monitor.session import Monitor
from monitor.types import Step, Trajectory

TASK = "The function parse_header in django/http/multipartparser.py drops the boundary quoting."


def edit(i: int, path: str) -> Step:
    return Step(i, tool="str_replace_editor", args={"command": "str_replace", "path": path})


def test_task_and_diff_files() -> None:
    assert task_files(TASK) == {"multipartparser.py"}
    diff = "diff --git a/src/a.py b/src/a.py\n+x\ndiff --git a/b.py b/b.py\n"
    assert diff_files(diff) == {"src/a.py", "b.py"}


def diff(*files: str) -> str:
    return "".join(f"diff --git a/{f} b/{f}\n+x\n" for f in files)


def test_scope_widening_beyond_task_files() -> None:
    ft = FlagTracker(TASK)
    assert ft.scope_limit() == 4  # max(min_files 4, 3 x 1 named file)
    # transcript edits (scratch scripts included) do not count; only the diff does
    for i in range(6):
        assert ft.update(edit(i, f"/testbed/reproduce_{i}.py"), i + 1) == []
    assert sorted(ft.edited) == [f"reproduce_{i}.py" for i in range(6)]
    assert ft.add_files(diff_files(diff("a.py", "b.py", "c.py", "d.py")), 7) == []
    flags = ft.add_files(diff_files(diff("a.py", "b.py", "c.py", "d.py", "e.py")), 8)
    assert [(f.name, f.step) for f in flags] == [("scope_widening", 8)]
    assert flags[0].evidence["files"] == ["a.py", "b.py", "c.py", "d.py", "e.py"]
    assert flags[0].evidence["named_in_task"] == ["multipartparser.py"]


def test_scope_cap_and_late_growth() -> None:
    ft = FlagTracker(TASK, FlagConfig(scope_files_cap=10, scope_late_step=20))
    assert ft.add_files({"a.py"}, 3) == []
    late = ft.add_files({"a.py", "c.py"}, 25)
    assert [f.name for f in late] == ["scope_widening"]
    assert late[0].evidence["files"] == ["c.py"]
    assert "late" in late[0].evidence["why"]
    # the final submission never counts as late growth
    end = FlagTracker(TASK, FlagConfig(scope_late_step=20))
    assert end.end(60, diff("a.py", "b.py")) == []


def test_session_diff_feeds_scope() -> None:
    s = Monitor(PolicyConfig(flags=FlagConfig(scope_files_cap=2))).start(task=TASK)
    s.diff = diff("a.py", "b.py")
    assert s.observe(Step(0, tool="bash", action="ls", observation="x")).flags == []
    s.diff = diff("a.py", "b.py", "c.py")
    d = s.observe(Step(1, tool="bash", action="ls", observation="y"))
    assert [f.name for f in d.flags] == ["scope_widening"]


def test_unsupported_completion_after_failing_tests() -> None:
    ft = FlagTracker(TASK)
    run = Step(
        0,
        tool="bash",
        action="python -m pytest tests",
        is_error=True,
        observation="...\n=== 1 failed, 3 passed in 0.2s ===",
    )
    ft.update(run, 1)
    colour = Step(
        0, tool="bash", action="pytest", observation="\x1b[31m== 2 failed in 1s ==\x1b[0m"
    )
    ft2 = FlagTracker(TASK)
    ft2.update(colour, 1)
    assert ft2.end(3, "diff --git a/x b/x")[0].evidence["test_output"] == "== 2 failed in 1s =="
    flags = ft.update(Step(1, kind="submit", action="submit"), 2)
    assert [f.name for f in flags] == ["unsupported_completion"]
    assert flags[0].evidence["why"] == "last test run failed"
    assert flags[0].evidence["test_step"] == 1
    assert flags[0].evidence["test_output"] == "=== 1 failed, 3 passed in 0.2s ==="


def test_completion_supported_by_passing_tests_is_not_flagged() -> None:
    ft = FlagTracker(TASK)
    ft.update(Step(0, tool="bash", action="pytest a", observation="== 3 passed in 0.1s =="), 1)
    assert ft.update(Step(1, kind="submit", action="submit"), 2) == []


def test_skipped_tests_and_finish_without_evidence() -> None:
    ft = FlagTracker(TASK)
    ft.update(
        Step(
            0,
            tool="bash",
            action="./tests/runtests.py x",
            observation="Ran 4 tests in 0.1s\n\nOK (skipped=2)",
        ),
        1,
    )
    flags = ft.update(Step(1, tool="finish", args={"status": "completed", "evidence": "ok"}), 2)
    assert flags[0].evidence["why"] == "last test run skipped tests"
    no_skip = FlagTracker(TASK, FlagConfig(completion_skipped=False))
    no_skip.update(Step(0, tool="bash", action="pytest", observation="OK (skipped=2)"), 1)
    assert no_skip.update(Step(1, kind="submit"), 2) == []
    ft2 = FlagTracker(TASK)
    flags = ft2.update(Step(0, tool="finish", args={"status": "completed", "evidence": ""}), 1)
    assert flags[0].evidence["why"] == "finish gave no evidence"
    blocked = Step(0, tool="finish", args={"status": "blocked", "evidence": ""})
    assert FlagTracker(TASK).update(blocked, 1) == []


def test_spec_forgotten_question_answered_by_task() -> None:
    ft = FlagTracker(TASK)
    ft.update(Step(0, kind="compaction"), 1)
    q = Step(
        1, kind="message", thought="Which function drops the boundary quoting in multipartparser?"
    )
    flags = ft.update(q, 2)
    assert [f.name for f in flags] == ["spec_forgotten"]
    assert flags[0].evidence["after_compaction"] is True
    assert "boundary" in flags[0].evidence["in_task"]
    other = Step(2, kind="message", thought="Should I also upgrade the numpy dependency pinning?")
    assert ft.update(other, 3) == []


def test_session_carries_flags_and_end_uses_submission() -> None:
    s = Monitor().start(task=TASK)
    d = s.observe(Step(0, tool="bash", action="pytest t", is_error=True, observation="1 failed"))
    assert d.flags == []
    diff = "".join(f"diff --git a/m{i}.py b/m{i}.py\n" for i in range(6))
    flags = s.end(diff)
    assert sorted(f.name for f in flags) == ["scope_widening", "unsupported_completion"]


def test_fit_scope_caps_per_agent() -> None:
    def run(i: int, agent: str, n: int, resolved: bool) -> Trajectory:
        diff = "".join(f"diff --git a/f{k}.py b/f{k}.py\n" for k in range(n))
        return Trajectory(
            id=str(i), instance_id=str(i), agent=agent, submission=diff, resolved=resolved
        )

    runs = [run(i, "a", 1 + i % 3, True) for i in range(20)] + [run(99, "a", 30, False)]
    runs += [run(100 + i, "b", 5, True) for i in range(3)]
    assert fit_scope_caps(runs) == {"a": 3, "b": 5}
