"""No regular expression applied to run text backtracks more than linearly.

Every compiled pattern at module level in monitor/ and serving/ is collected (a new one is
covered automatically) and run on 100 KB adversarial strings built from its own literals; each
call must end within a generous bound (a linear pattern takes milliseconds; the quadratic ones
took 6 s at 20 KB, the cubic ones hours). What the patterns find is pinned by examples below.
Times: bench/bench_regex.py.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bench_loader import load_bench

SIZE = 100_000
BOUND_S = 3.0  # generous: a linear pattern needs ~1-10 ms for 100 KB, a quadratic one minutes


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs longer than `seconds` (SIGALRM stops re)."""

    def expired(signum, frame):  # noqa: ARG001
        raise TimeoutError(f"{what} took over {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


BENCH = load_bench("bench_regex")  # it owns the pattern collection and the attack strings
PATTERNS = BENCH.patterns()


def test_patterns_were_collected():
    names = {f"{m}.{n}" for m, n, _ in PATTERNS}
    assert {
        "monitor.flags._TASK_FILE",
        "monitor.render._TRAILING",
        "monitor.shell._REDIRECT",
    } <= names
    assert len(PATTERNS) > 30


@pytest.mark.parametrize(
    ("module", "name", "pattern"), PATTERNS, ids=[f"{m}.{n}" for m, n, _ in PATTERNS]
)
def test_pattern_is_linear_on_adversarial_text(module, name, pattern):
    run = BENCH.matcher(module, name, pattern)
    for what, text in BENCH.adversarial(pattern, SIZE):
        data = text.encode() if isinstance(pattern.pattern, bytes) else text
        with deadline(BOUND_S, f"{module}.{name} on {what}"):
            run(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_a_literal_then_a_repeated_unit(data):
    """An opening that never closes: one literal of the pattern, then another literal (or a
    filler) and a filler repeated to 100 KB."""
    module, name, pattern = data.draw(st.sampled_from(PATTERNS))
    words = BENCH.literals(pattern) + BENCH.FILLERS
    head = data.draw(st.sampled_from(["", *words]))
    unit = data.draw(st.sampled_from(words)) + data.draw(st.sampled_from(["", *BENCH.FILLERS]))
    text = head + unit * (SIZE // len(unit))
    run = BENCH.matcher(module, name, pattern)
    with deadline(BOUND_S, f"{module}.{name} on {head!r}+{unit!r}*n"):
        run(text.encode() if isinstance(pattern.pattern, bytes) else text)


@pytest.mark.parametrize("case", list(BENCH.attacks(1)))
def test_known_attacks_are_fast(case):
    """The inputs of the issue (a task of 40,000 "a": 12.8 s) and those found since, at 100 KB,
    through the code that runs them (session open, observe, readers)."""
    attack = BENCH.attacks(SIZE)[case]
    with deadline(BOUND_S, case):
        attack()


def test_readers_are_fast_on_unclosed_tags(tmp_path):
    """Issue statements are cut out of the first message: an opening tag with no end and a long
    run of spaces (cubic for `<pr_description>\\s*(.*?)\\s*</pr_description>`: 31 s at 4 KB)."""
    import json

    from monitor.formats import minisweagent, sweagent

    content = "<pr_description>" + " " * SIZE + "<issue>" * 1000 + "ISSUE:\n" * 1000
    mini = tmp_path / "x.traj.json"
    mini.write_text(
        json.dumps(
            {
                "info": {"exit_status": "Submitted", "mini_version": "1.0"},
                "trajectory_format": "mini-swe-agent-1",
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": content},
                    {"role": "assistant", "content": "```bash\n" * 10_000},
                ],
            }
        )
    )
    swe = tmp_path / "y.traj"
    swe.write_text(
        json.dumps(
            {
                "trajectory": [{"action": "ls", "observation": "", "response": "", "thought": ""}],
                "history": [{"role": "user", "content": content}],
                "info": {},
            }
        )
    )
    with deadline(BOUND_S, "reading the runs"):
        assert minisweagent.read(mini).task.startswith("<pr_description>")
        sweagent.read(swe)


# --- what the patterns find ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "target"),
    [
        ("echo hi > out.txt", "out.txt"),
        ("cat a >> logs/run.log", "logs/run.log"),
        ("echo x | tee -a notes.md", "notes.md"),
        ("tee file.json", "file.json"),
        ("sed -i 's/a/b/' src/app.py", "src/app.py"),
        ("sed -i.bak -e 's/x/y/' a.py b.py", "b.py"),  # sed's last file
        ("ls -la", None),
        ("python x.py", None),  # reading a file is no write
        ("echo > ", None),
    ],
)
def test_written_file_names_the_file_a_command_writes(command, target):
    from monitor.shell import written_file

    assert written_file(command) == target


def test_flag_patterns_find_task_files_strip_prefixes_and_find_test_summaries():
    from monitor import flags, render

    task = "Fix /testbed/src/pkg/mod.py and tests/test_mod.py; see README.rst and ./setup.cfg, not foo.pyc"
    assert flags._TASK_FILE.findall(task) == [
        "/testbed/src/pkg/mod.py",
        "tests/test_mod.py",
        "README.rst",
        "./setup.cfg",
    ]
    for path in ("/testbed/a.py", "/workspace/django__django-1/a.py", "./a.py", "/repo/a.py",
                 "/app/a.py", "/astropy__astropy-12907/a.py"):  # fmt: skip
        assert flags._PATH_PREFIX.sub("", path) == "a.py", path
    assert flags._PATH_PREFIX.sub("", "src/e.py") == "src/e.py"
    out = "collected 3\n===== 2 passed, 1 failed in 0.1s =====\nRan 3 tests in 0.01s\nOK\nFAILED (failures=1)\nno"
    assert flags._SUMMARY.findall(out) == [
        "===== 2 passed, 1 failed in 0.1s =====",
        "Ran 3 tests in 0.01s",
        "OK",
        "FAILED (failures=1)",
    ]
    assert render._TRAILING.sub("\n", "a  \nb \n c\n") == "a\nb\n c\n"


def test_tag_cutting_finds_bash_blocks_thoughts_and_the_issue():
    from monitor.formats import minisweagent
    from monitor.textio import between

    text = "THOUGHT: look first\n```bash\nls -la\n```\nthen\n```bash\ncat x.py\n```"
    assert minisweagent._bash_blocks(text) == ["ls -la", "cat x.py"]
    assert minisweagent._bash_blocks("```bash\nnever closed") == []
    assert minisweagent._thought({"content": text}) == "look first"
    pr = "<pr_description>\nConsider the following PR description:\n  Make x 3 \n</pr_description>"
    cut = between(pr, "<pr_description>", "</pr_description>")
    assert cut is not None
    assert cut.strip().removeprefix(minisweagent._PR_LEAD).strip() == "Make x 3"
    assert between("<issue> bug </issue>", "<issue>", "</issue>") == " bug "
    assert between("<issue> never closed", "<issue>", "</issue>") is None
    assert between("no tags", "<issue>", "</issue>") is None


def test_bench_regex_runs(capsys, monkeypatch):
    """The bench script runs (small sizes) and prints a row per pattern set."""
    monkeypatch.setattr("sys.argv", ["bench_regex.py", "--sizes", "2000"])
    BENCH.main()
    out = capsys.readouterr().out
    assert "flags (" in out
    assert "observe: sed -i -i ..." in out
