"""Loop signals: normalisation, O(1) tracker values, stuck patterns, signal_matrix."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.normalise import call_key, normalise_command
from monitor.signals import (
    SIGNAL_NAMES,
    SignalTracker,
    is_edit,
    is_test_run,
    signal_matrix,
    signals_line,
)
from monitor.types import Step, Trajectory


def bash(i: int, cmd: str, obs: str = "", err: bool = False, **kw) -> Step:
    return Step(index=i, tool="bash", action=cmd, observation=obs, is_error=err, **kw)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("python -m pytest tests/test_x.py", "python  -m pytest   'tests/test_x.py'"),
        ("python -m pytest -v tests/test_x.py", 'python -m pytest "tests/test_x.py" -q'),
        ("grep -rn 'def foo' src", 'grep -rn "def foo" src'),
        ("pytest --tb=short -x a.py", "pytest -x a.py"),
    ],
)
def test_normalise_makes_equivalent_commands_equal(a: str, b: str) -> None:
    assert normalise_command(a) == normalise_command(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("pytest -x a.py", "pytest a.py"),  # -x changes what runs
        ("grep 'a b' f", "grep a b f"),  # quoting that changes the words stays distinct
        ("sed -n 1,20p f.py", "sed -n 20,40p f.py"),
    ],
)
def test_normalise_keeps_different_commands_apart(a: str, b: str) -> None:
    assert normalise_command(a) != normalise_command(b)


def test_call_key_shell_ignores_description_and_tool_case() -> None:
    k1 = call_key("Bash", "", {"command": "ls  -la", "description": "list"})
    k2 = call_key("bash", "ls -la")
    k3 = call_key("", "ls -la")
    assert k1 == k2 == k3
    assert call_key("Read", "", {"file_path": "a.py"}) != call_key(
        "Read", "", {"file_path": "b.py"}
    )


def test_tracker_counts_repeats_errors_edits_and_tests() -> None:
    fail = "FAILED tests/test_x.py::test_x\n1 failed in 0.1s"
    steps = [
        Step(0, tool="Read", args={"file_path": "t.py"}, action="Read t.py", observation="code"),
        *[bash(i, "python -m pytest tests/test_x.py", fail, True) for i in range(1, 5)],
        Step(
            5,
            tool="Edit",
            args={"file_path": "x.py", "old_string": "2", "new_string": "3"},
            action="Edit x.py",
            observation="ok",
        ),
        bash(6, "python -m pytest -v tests/test_x.py", fail, True),
    ]
    t = SignalTracker()
    for s in steps:
        t.update(s)
    v = t.values()
    assert v["steps"] == 7
    assert v["max_repeat"] == 5
    assert v["max_error_streak"] == 4
    assert v["error_streak"] == 1
    assert v["errors"] == 5
    assert v["edits"] == 1
    assert v["since_edit"] == 1
    assert v["test_runs"] == 5
    assert v["last_test_failed"] == 1
    # observations of steps 3..5 and 7 repeat step 2's output
    assert v["no_new_info"] == 4
    assert v["action_error_run"] == 1
    assert v["same_pair_run"] == 1
    assert v["stuck_hits"] == 2  # action_error reached 3, same_pair reached 4
    assert t.vector() == [v[n] for n in SIGNAL_NAMES]


def test_alternation_and_monologue_runs() -> None:
    t = SignalTracker()
    for i in range(6):
        cmd = "cat a.py" if i % 2 == 0 else "cat b.py"
        t.update(bash(i, cmd, f"out {i % 2}"))
    assert t.values()["alternation_run"] == 6
    assert t.values()["stuck_hits"] == 1
    for i in range(3):
        t.update(Step(6 + i, kind="message", thought="I am not sure what to do."))
    v = t.values()
    assert v["alternation_run"] == 6  # messages do not reset tool-call patterns
    assert v["monologue_run"] == 3
    assert v["stuck_hits"] == 2


def test_tokens_cost_wall_format_errors_and_compactions() -> None:
    t = SignalTracker()
    t.update(bash(0, "ls", "a", tokens_in=100, tokens_out=10, cost_usd=0.5, timestamp=1000.0))
    t.update(Step(1, kind="format_error", tokens_in=50, cost_usd=None, timestamp=1010.0))
    t.update(Step(2, kind="format_error"))
    t.update(Step(3, kind="compaction", timestamp=1030.5))
    v = t.values()
    assert v["tokens"] == 160
    assert v["cost_usd"] == pytest.approx(0.5)
    assert v["wall_seconds"] == pytest.approx(30.5)
    assert v["format_errors"] == 2
    assert v["format_error_streak"] == 2
    assert v["compactions"] == 1
    assert t.compaction_steps == [4]
    t.update(bash(4, "ls", "a"))
    assert t.values()["format_error_streak"] == 0


def test_signal_matrix_rows_are_prefix_values() -> None:
    steps = [bash(i, "ls", "same") for i in range(4)]
    m = signal_matrix(Trajectory(id="r", instance_id="i", agent="a", steps=steps))
    assert m.shape == (4, len(SIGNAL_NAMES))
    col = SIGNAL_NAMES.index("max_repeat")
    np.testing.assert_array_equal(m[:, col], [1, 2, 3, 4])
    np.testing.assert_array_equal(m[:, SIGNAL_NAMES.index("steps")], [1, 2, 3, 4])


def test_signals_line_is_short_and_has_counts() -> None:
    t = SignalTracker()
    for i in range(3):
        t.update(bash(i, "ls", "x", err=True))
    line = signals_line(t.values())
    assert line.startswith("[signals] steps=3 max_repeat=3 error_streak=3")
    assert "\n" not in line
    assert len(line) < 160


@pytest.mark.parametrize(
    ("step", "edit", "test"),
    [
        (bash(0, "sed -i 's/a/b/' x.py"), True, False),
        (bash(0, "cat > fix.py <<'EOF'\nx=1\nEOF"), True, False),
        (bash(0, "python -m pytest tests/ -x"), False, True),
        (bash(0, "./tests/runtests.py auth_tests"), False, True),
        (bash(0, "grep -n foo x.py 2>&1"), False, False),
        (Step(0, tool="str_replace_editor", args={"command": "view", "path": "a"}), False, False),
        (
            Step(0, tool="str_replace_editor", args={"command": "str_replace", "path": "a"}),
            True,
            False,
        ),
        (Step(0, tool="", action="edit 10:12\nfoo\nend_of_edit"), True, False),
    ],
)
def test_edit_and_test_detection(step: Step, edit: bool, test: bool) -> None:
    assert is_edit(step) is edit
    assert is_test_run(step) is test
