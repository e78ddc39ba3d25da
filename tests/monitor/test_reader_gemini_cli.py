"""The Gemini CLI session reader, on a genuine session file of the JSON encoding (Gemini CLI
~v0.10, gemini-2.5-pro: tests/fixtures/gemini_cli_session_pomodoro.json, from
yoavf/ai-sessions, MIT; see tests/fixtures/THIRD_PARTY.md) and on a JSONL session built line for
line in the shape v0.39+ appends it (tests/fixtures/gemini_cli_constructed_session.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.errors import TranscriptError
from monitor.formats import gemini_cli
from monitor.reading import detect, read_trajectory
from serving.transcripts import read_transcript


@pytest.fixture
def legacy(fixtures_dir: Path) -> Path:
    return fixtures_dir / "gemini_cli_session_pomodoro.json"


@pytest.fixture
def session(fixtures_dir: Path) -> Path:
    return fixtures_dir / "gemini_cli_constructed_session.jsonl"


def test_a_genuine_json_session_reads_as_its_calls(legacy: Path) -> None:
    assert detect(legacy) is gemini_cli
    t = read_trajectory(legacy)
    assert (t.format, t.agent, t.model) == ("gemini-cli", "gemini-cli", "gemini-2.5-pro")
    assert t.id == "0b23371a-ce2e-4b1c-81a0-44af5d94d9ce"
    assert t.task.startswith("Build a simple Pomodoro timer web app")
    calls = [s for s in t.steps if s.kind == "action"]
    assert len(calls) == 11  # every tool call of the file
    assert [s.tool for s in calls[:3]] == ["write_file"] * 3
    assert calls[0].observation.startswith("Successfully created and wrote to new file")
    assert calls[0].thought.startswith("Beginning the Build")  # the message's thoughts and text
    # the one call whose status is "error": a replace the edit check refused
    assert [s.is_error for s in calls] == [False] * 10 + [True]
    assert calls[-1].observation.startswith("A secondary check by an LLM determined")
    # the first message's usage is all zeros in the file: estimated; the others recorded
    assert calls[0].tokens_estimated
    assert (t.steps[3].tokens_in, t.steps[3].tokens_out) == (7269, 46)
    assert not t.steps[3].tokens_estimated


def test_a_jsonl_session_is_replayed_as_the_cli_replays_it(session: Path) -> None:
    assert detect(session) is gemini_cli
    t = read_trajectory(session)
    assert t.task == "Fix add() in calc.py: add(2, 2) should be 4. Run tests/test_calc.py."
    assert [s.tool for s in t.steps] == [
        "run_shell_command",
        "read_file",
        "replace",
        "replace",
        "run_shell_command",
        "",
    ]  # the re-appended message once, with its call; the rewound reply gone; tool responses
    # recorded as user messages are not steps
    assert t.steps[0].action == "python -m pytest tests/test_calc.py -q"
    # a shell command that exited 1 is recorded as "success": its Exit Code says it failed;
    # no Exit Code line (v0.27+) is 0
    assert [s.is_error for s in t.steps] == [True, False, True, False, False, False]
    assert [(s.tokens_in, s.tokens_out) for s in t.steps][:2] == [(8120, 61), (8405, 40)]
    assert t.totals.tokens_in == sum(s.tokens_in for s in t.steps) == 51747


def test_the_file_where_gemini_keeps_it_has_source_gemini_cli(
    session: Path, tmp_path: Path
) -> None:
    chats = tmp_path / ".gemini" / "tmp" / "calc" / "chats"
    chats.mkdir(parents=True)
    kept = chats / "session-2026-11-20T14-02-4f0c2a8e.jsonl"
    kept.write_text(session.read_text())
    assert read_transcript(kept).source == "gemini-cli"
    mine = tmp_path / "my-gemini" / "django__django-11099.jsonl"
    mine.parent.mkdir()
    mine.write_text(session.read_text())
    assert read_transcript(mine).source == "my-gemini"


def test_a_line_being_appended_is_left_for_later(session: Path, tmp_path: Path) -> None:
    text = session.read_text()
    live = tmp_path / "live.jsonl"
    live.write_text(text[: len(text) - 40])  # the last line cut mid-write
    assert len(read_trajectory(live).steps) == len(read_trajectory(session).steps)


def test_a_checkpoint_keeps_the_steps_it_leaves_out(session: Path, tmp_path: Path) -> None:
    """A compression appends `$set.messages` with the compressed history only (a summary, the
    latest turns): the CLI's model sees that, but the run is what happened, and a watch must
    not lose the steps it already scored."""
    lines = [json.loads(x) for x in session.read_text().splitlines()]
    summary = {
        "id": "u-snap",
        "timestamp": "2026-11-20T14:03:00.000Z",
        "type": "user",
        "content": [{"text": "<state_snapshot>Fixed add(); tests pass.</state_snapshot>"}],
    }
    synthetic = {"id": "g-ack", "timestamp": "2026-11-20T14:03:00.500Z", "type": "gemini"}
    synthetic["content"] = "Got it. Thanks for the additional context!"
    kept = [summary, synthetic, *[x for x in lines if x.get("id") == "g-7"]]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"$set": {"messages": kept}}]))
    t, before = read_trajectory(path), read_trajectory(session)
    assert [s.action for s in t.steps] == [s.action for s in before.steps]
    assert t.task == before.task


def test_odd_lines_and_values_are_skipped(session: Path, tmp_path: Path) -> None:
    """A bad line in the middle (the CLI skips it), `$rewindTo: null`, a call that is not an
    object, a result given as a bare part."""
    text = session.read_text().splitlines(True)
    odd = [
        "{not json\n",
        json.dumps({"$rewindTo": None}) + "\n",
        json.dumps(
            {
                "id": "g-8",
                "timestamp": "2026-11-20T14:04:00.000Z",
                "type": "gemini",
                "model": "gemini-3-pro-preview",
                "content": [{"text": "One more check."}],
                "toolCalls": [
                    "not a call",
                    {
                        "id": "c-8",
                        "name": "run_shell_command",
                        "args": {"command": "printf 'Exit Code: 3' && true"},
                        "status": "success",
                        "result": {
                            "functionResponse": {
                                "id": "c-8",
                                "response": {"output": ("Output: Exit Code: 3\nSignal: 15")},
                            }
                        },
                    },
                ],
            }
        )
        + "\n",
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(text[:5] + odd[:2] + text[5:] + odd[2:]))
    t = read_trajectory(path)
    assert len(t.steps) == len(read_trajectory(session).steps) + 1
    last = t.steps[-1]
    assert last.thought == "One more check."
    assert last.observation.startswith("Output: Exit Code: 3")
    assert last.is_error  # killed by signal 15 (its printed "Exit Code: 3" is no line of its own)


def test_a_file_with_neither_header_nor_messages_is_said(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"projectHash": "ab", "sessionId": ""}\n')
    with pytest.raises(TranscriptError, match="no Gemini CLI session"):
        gemini_cli.read(path)
