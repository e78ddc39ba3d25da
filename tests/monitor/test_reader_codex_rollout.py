"""The Codex session rollout reader (`~/.codex/sessions/.../rollout-*.jsonl`), on a rollout built
line for line in the shape codex-rs writes (tests/fixtures/codex_constructed_rollout.jsonl: the
`shell`, `shell_command`, unified-exec and `apply_patch` outputs, two calls of one response, the
plan tool, a timeout, per-response token counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.errors import TranscriptError
from monitor.formats import codex, codex_rollout
from monitor.reading import detect, read_trajectory
from serving.transcripts import read_transcript

SESSION = "019af3c2-6e55-7b31-8f0a-52d4c1a9e7b3"


@pytest.fixture
def rollout(fixtures_dir: Path) -> Path:
    return fixtures_dir / "codex_constructed_rollout.jsonl"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_rollout_reads_as_its_calls(rollout: Path) -> None:
    assert detect(rollout) is codex_rollout
    t = read_trajectory(rollout)
    assert (t.format, t.agent, t.id, t.model) == ("codex-rollout", "codex", SESSION, "gpt-5-codex")
    assert t.task == "Fix add() in calc.py: add(2, 2) should be 4."  # not the environment context
    assert t.exit_status == "completed"
    assert [s.tool for s in t.steps] == [
        "shell_command",
        "shell",
        "apply_patch",
        "exec_command",
        "shell_command",
        "shell_command",
        "",
    ]  # the plan tool is not a step
    assert [s.kind for s in t.steps] == ["action"] * 6 + ["message"]
    assert t.steps[0].action == 'rg -n "def add" calc.py'
    assert t.steps[0].thought == "**Locating add()**"
    assert t.steps[1].action == "python -c 'import calc; assert calc.add(2, 2) == 4'"  # bash -lc
    assert t.steps[1].observation.startswith("Traceback")  # the JSON output's text
    assert t.steps[2].action.startswith("apply_patch\n*** Begin Patch")
    assert t.steps[3].action == "git diff --stat"
    assert t.steps[6].thought.endswith("The check passes.")
    # errors: exit code 1 in the shell tool's JSON metadata, the timeout; the rest exit 0
    assert [s.is_error for s in t.steps] == [False, True, False, False, True, False, False]


def test_tokens_are_each_responses_recorded_usage(rollout: Path) -> None:
    t = read_trajectory(rollout)
    assert not any(s.tokens_estimated for s in t.steps)
    assert [(s.tokens_in, s.tokens_out) for s in t.steps] == [
        (6120, 48),
        (6290, 71),
        (6512, 133),
        (0, 0),  # the second call of the same response
        (6790 + 6850, 40 + 36),  # the plan update's response, which made no step, and its own
        (6930, 52),
        (7010, 64),
    ]
    assert sum(s.tokens_in for s in t.steps) == t.totals.tokens_in == 46502
    assert sum(s.tokens_out for s in t.steps) == t.totals.tokens_out == 444


def test_end_events_mark_failures_an_output_does_not(rollout: Path, tmp_path: Path) -> None:
    """Newer files add `patch_apply_end` / `exec_command_end` by call id: a failed patch is an
    error though its output item says nothing of it."""
    lines = _lines(rollout)
    for x in lines:
        p = x["payload"]
        if p.get("type") == "patch_apply_end":
            p.update(success=False, status="failed", stderr="patch did not apply")
    t = read_trajectory(_write(tmp_path / "r.jsonl", lines))
    assert t.steps[2].is_error


def test_a_live_rollout_ends_in_a_call_not_answered_yet(rollout: Path, tmp_path: Path) -> None:
    text = rollout.read_text()
    cut = text.index('"call_id":"call_Qm2","output"')
    live = tmp_path / "live.jsonl"
    live.write_text(text[: text.rindex("\n", 0, cut) + 1] + text[cut - 60 : cut])  # a cut line
    t = read_trajectory(live)
    assert [s.tool for s in t.steps] == ["shell_command", "shell"]
    assert t.steps[1].observation == ""  # a watch holds it back until its output is written
    assert t.exit_status == "in_progress"


def test_the_oldest_rollouts_without_an_envelope_read(tmp_path: Path) -> None:
    """Mid-2025 Codex wrote a bare session meta line, then bare response items and
    `record_type: state` lines (codex-rs core/src/rollout/recorder.rs of the time)."""
    lines = [
        {"id": SESSION, "timestamp": "2025-06-02T09:00:00.000Z", "instructions": None},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it"}]},
        {
            "type": "function_call",
            "name": "shell",
            "arguments": json.dumps({"command": ["bash", "-lc", "ls"]}),
            "call_id": "call_1",
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": json.dumps({"output": "a.py\n", "metadata": {"exit_code": 0}}),
        },
        {"record_type": "state"},
    ]
    path = _write(tmp_path / "rollout-2025-06-02T09-00-00-old.jsonl", lines)
    assert detect(path) is codex_rollout
    t = read_trajectory(path)
    assert (t.id, t.task, [s.action for s in t.steps]) == (SESSION, "Fix it", ["ls"])
    assert t.steps[0].observation == "a.py\n"
    assert t.steps[0].tokens_estimated  # no token counts in these files


def test_an_exec_json_stream_is_not_a_rollout(fixtures_dir: Path) -> None:
    assert detect(fixtures_dir / "codex_constructed_exec.jsonl") is codex


def test_a_file_with_no_rollout_lines_is_said(tmp_path: Path) -> None:
    meta = {"timestamp": "2026-12-07T10:00:00Z", "type": "session_meta", "payload": {"id": "x"}}
    path = _write(tmp_path / "meta-only.jsonl", [meta])
    with pytest.raises(TranscriptError, match="no Codex rollout lines"):
        codex_rollout.read(path)


def test_a_rollout_where_codex_keeps_it_has_source_codex(rollout: Path, tmp_path: Path) -> None:
    """`~/.codex/sessions/2026/12/07/rollout-...jsonl`: the day's folder names no source."""
    day = tmp_path / "sessions" / "2026" / "12" / "07"
    day.mkdir(parents=True)
    kept = day / f"rollout-2026-12-07T10-00-00-{SESSION}.jsonl"
    kept.write_text(rollout.read_text())
    assert read_transcript(kept).source == "codex"
    harness = tmp_path / "my-codex"
    harness.mkdir()
    mine = harness / "django__django-11099.jsonl"
    mine.write_text(rollout.read_text())
    assert read_transcript(mine).source == "my-codex"


def test_exit_codes_are_read_only_where_the_tools_write_them(tmp_path: Path) -> None:
    """`Exit code: N` / `Process exited with code N` are the shell tools' headers: a file that
    prints them, or an MCP tool's answer, is no failed command; an aborted call is an error."""

    def line(kind: str, **payload: object) -> dict:
        return {"timestamp": "2026-12-07T10:00:00Z", "type": kind, "payload": payload}

    calls = [
        ("read_file", {"path": "log.txt"}, "build: Process exited with code 2\n"),
        ("docs__fetch", {"url": "x"}, "Exit code: 1 is what the docs say"),
        ("shell_command", {"command": "make"}, "Exit code: 0\nOutput:\nExit code: 1\n"),
        ("shell_command", {"command": "make test"}, "Exit code: 2\nOutput:\nFAILED\n"),
        ("shell_command", {"command": "sleep 100"}, "aborted"),
    ]
    lines = [line("session_meta", id="s", cwd="/w")]
    for k, (name, args, out) in enumerate(calls):
        lines.append(
            line(
                "response_item",
                type="function_call",
                name=name,
                call_id=f"c{k}",
                arguments=json.dumps(args),
            )
        )
        lines.append(
            line("response_item", type="function_call_output", call_id=f"c{k}", output=out)
        )
    t = read_trajectory(_write(tmp_path / "r.jsonl", lines))
    assert [s.is_error for s in t.steps] == [False, False, False, True, True]


def test_a_token_count_split_or_empty_is_read_as_it_says(rollout: Path, tmp_path: Path) -> None:
    """Without `last_token_usage` the growth of the running input and output totals is each
    call's; a count with nothing usable leaves the calls estimated, not at 0."""
    lines = _lines(rollout)
    for x in lines:
        info = x["payload"].get("info") if x["payload"].get("type") == "token_count" else None
        if isinstance(info, dict):
            info.pop("last_token_usage")
    t = read_trajectory(_write(tmp_path / "totals.jsonl", lines))
    assert [(s.tokens_in, s.tokens_out) for s in t.steps][:2] == [(6120, 48), (6290, 71)]
    for x in lines:
        if x["payload"].get("type") == "token_count" and x["payload"].get("info"):
            x["payload"]["info"] = {"total_token_usage": None, "last_token_usage": None}
    t = read_trajectory(_write(tmp_path / "empty.jsonl", lines))
    assert all(s.tokens_estimated for s in t.steps)


def test_a_compaction_takes_no_calls_usage(rollout: Path, tmp_path: Path) -> None:
    lines = _lines(rollout)
    at = next(i for i, x in enumerate(lines) if x["payload"].get("call_id") == "call_Qm2")
    compacted = {"timestamp": lines[at]["timestamp"], "type": "compacted"}
    compacted["payload"] = {"message": "Summary: add() subtracts; tests fail."}
    t = read_trajectory(_write(tmp_path / "c.jsonl", [*lines[:at], compacted, *lines[at:]]))
    assert t.steps[1].kind == "compaction"
    assert t.steps[1].tokens_estimated
    assert (t.steps[2].tokens_in, t.steps[2].tokens_out) == (6290, 71)  # the next call's own
