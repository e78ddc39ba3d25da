"""The Gemini CLI stream-json reader (`gemini -p ... --output-format stream-json`), on a capture
built event for event in the shape gemini-cli's `output/types.ts` defines
(tests/fixtures/gemini_cli_constructed_stream.jsonl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.formats import gemini_stream
from monitor.reading import detect, read_trajectory


@pytest.fixture
def stream(fixtures_dir: Path) -> Path:
    return fixtures_dir / "gemini_cli_constructed_stream.jsonl"


def test_a_stream_reads_as_its_calls(stream: Path) -> None:
    assert detect(stream) is gemini_stream
    t = read_trajectory(stream)
    assert (t.format, t.agent, t.exit_status) == ("gemini-stream", "gemini-cli", "success")
    assert t.id == "7d2e9b41-5c0a-4f8e-b3d6-0a1c9e8f2b54"
    assert t.model == "gemini-3-pro-preview"  # not the alias of `init`, nor the helper model
    assert t.task.startswith("Fix add() in calc.py")
    assert [s.tool for s in t.steps] == [
        "run_shell_command",
        "read_file",
        "replace",
        "replace",
        "run_shell_command",
        "",
    ]
    assert t.steps[0].thought == "I'll run the tests first to see the failure."  # its chunks
    assert t.steps[0].action == "python -m pytest tests/test_calc.py -q"
    assert t.steps[1].observation == "success"  # no output in the event: its status
    assert [s.is_error for s in t.steps] == [False, False, True, False, False, False]
    assert t.steps[5].kind == "message"


def test_tokens_are_estimated_and_scaled_to_the_runs_totals(stream: Path) -> None:
    t = read_trajectory(stream)
    assert all(s.tokens_estimated for s in t.steps)
    assert sum(s.tokens_in for s in t.steps) == t.totals.tokens_in == 52610
    assert sum(s.tokens_out for s in t.steps) == t.totals.tokens_out == 406


def test_a_stream_still_running_holds_its_pending_call(stream: Path, tmp_path: Path) -> None:
    lines = stream.read_text().splitlines(True)
    cut = next(i for i, x in enumerate(lines) if '"tool_result"' in x)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(lines[:cut]))
    t = read_trajectory(live)
    assert [s.tool for s in t.steps] == ["run_shell_command"]
    assert t.steps[0].observation == ""  # a watch holds it back until its result
    assert t.exit_status == ""
