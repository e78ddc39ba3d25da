"""Readers for the formats with no real files here, on fixtures built from their documented shapes.

Each fixture's numbers were chosen so that they can be checked by hand (see the fixture files).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from monitor.errors import TranscriptError
from monitor.formats import FORMATS, atif, claude_code, codex, openhands
from monitor.types import Trajectory

CONSTRUCTED = {
    "openhands_constructed_output.jsonl": "openhands",
    "claude_code_constructed_stream.jsonl": "claude-code",
    "claude_code_constructed_session.jsonl": "claude-code",
    "claude_code_constructed_loop.jsonl": "claude-code",
    "codex_constructed_exec.jsonl": "codex",
    "codex_constructed_rollout.jsonl": "codex-rollout",
    "gemini_cli_constructed_session.jsonl": "gemini-cli",
    "gemini_cli_session_pomodoro.json": "gemini-cli",
    "gemini_cli_constructed_stream.jsonl": "gemini-stream",
    "atif_constructed_v1.json": "atif",
    "aider_constructed_harness.md": "aider",
    "aider_constructed_history.md": "aider",
}


def _head(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data[: 64 * 1024]


def _gz_copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / (src.name + ".gz")
    dst.write_bytes(gzip.compress(src.read_bytes()))
    return dst


@pytest.mark.parametrize(("name", "fmt"), sorted(CONSTRUCTED.items()))
def test_sniff_picks_exactly_the_right_reader(fixtures_dir: Path, name: str, fmt: str) -> None:
    path = fixtures_dir / name
    hits = [n for n, mod in FORMATS.items() if mod.sniff(path, _head(path))]
    assert hits == [fmt]


@pytest.mark.parametrize(("name", "fmt"), sorted(CONSTRUCTED.items()))
def test_gzip_and_plain_read_alike(fixtures_dir: Path, tmp_path: Path, name: str, fmt: str) -> None:
    plain = FORMATS[fmt].read(fixtures_dir / name)
    gz_path = _gz_copy(fixtures_dir / name, tmp_path)
    assert FORMATS[fmt].sniff(gz_path, _head(gz_path))
    packed = FORMATS[fmt].read(gz_path)
    assert [s.to_dict() for s in packed.steps] == [s.to_dict() for s in plain.steps]
    assert packed.totals == plain.totals
    assert packed.path == str(gz_path)


# --- OpenHands -----------------------------------------------------------------------------


def test_openhands_values(fixtures_dir: Path) -> None:
    t = openhands.read(fixtures_dir / "openhands_constructed_output.jsonl")
    assert (t.id, t.instance_id, t.agent, t.format) == (
        "calc__calc-1",
        "calc__calc-1",
        "openhands",
        "openhands",
    )
    assert t.model == "anthropic/claude-3-5-sonnet-20241022"
    assert t.task.endswith("so that tests/test_calc.py passes.")
    assert t.submission.startswith("diff --git a/src/calc.py")
    assert t.exit_status == "finished"
    assert t.resolved is None  # not evaluated: test_result has no report
    assert [s.kind for s in t.steps] == [
        "action", "action", "action", "compaction", "action", "action", "action", "submit"
    ]  # fmt: skip
    assert [s.tool for s in t.steps] == [
        "execute_bash", "str_replace_editor", "execute_bash", "", "str_replace_editor",
        "execute_bash", "str_replace_editor", "finish",
    ]  # fmt: skip
    assert t.steps[0].action == "ls /workspace/calc"
    assert t.steps[0].thought == "Let me look at the repository."
    assert t.steps[0].observation == "src  tests"
    assert [s.index for s in t.steps if s.is_error] == [2, 6]  # exit code 1; error observation
    assert t.steps[3].observation.startswith("Listed repo, read calc.py")
    assert '"old_str":"return a - b"' in t.steps[4].action
    # per-step deltas of the accumulated llm_metrics; the condensation made no agent call
    assert [s.tokens_in for s in t.steps] == [5000, 5200, 5300, 0, 5500, 5000, 4500, 4500]
    assert [s.tokens_out for s in t.steps] == [100, 80, 70, 0, 270, 80, 50, 50]
    assert not any(s.tokens_estimated for s in t.steps)
    assert t.steps[4].cost_usd == pytest.approx(0.016)
    assert sum(s.cost_usd or 0 for s in t.steps) == pytest.approx(0.078)
    assert t.total_tokens == 35000 + 700
    assert (t.totals.tokens_in, t.totals.tokens_out, t.totals.api_calls) == (35000, 700, 7)
    assert t.totals.cost_usd == pytest.approx(0.078)


def _eval_output(instance_id: str, history: list, **extra: object) -> dict:
    return {
        "instance_id": instance_id,
        "test_result": {"git_patch": ""},
        "history": history,
        **extra,
    }


def test_openhands_read_all_and_multi_run_file(tmp_path: Path) -> None:
    run = {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls"}}
    obs = {"id": 2, "source": "agent", "cause": 1, "observation": "run", "content": "x",
           "extras": {"metadata": {"exit_code": 2}}}  # fmt: skip
    p = tmp_path / "output.jsonl"
    lines = [
        _eval_output(
            "a__a-1", [run, obs], test_result={"git_patch": "", "report": {"resolved": True}}
        ),
        _eval_output("b__b-2", [[run, obs]]),  # old format: [action, observation] pairs
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    runs = list(openhands.read_all(p))
    assert [r.instance_id for r in runs] == ["a__a-1", "b__b-2"]
    assert [r.resolved for r in runs] == [True, None]
    for r in runs:
        assert [(s.tool, s.action, s.is_error, s.tokens_estimated) for s in r.steps] == [
            ("execute_bash", "ls", True, True)
        ]
    with pytest.raises(TranscriptError, match="holds 2 OpenHands runs") as e:
        openhands.read(p)
    assert e.value.path == str(p)


def test_openhands_sniffs_a_line_longer_than_the_head(tmp_path: Path) -> None:
    big = _eval_output("c__c-3", [], instruction="x" * 100_000)
    p = tmp_path / "output.jsonl"
    p.write_text(json.dumps(big) + "\n")
    head = p.read_bytes()[: 64 * 1024]
    assert openhands.sniff(p, head)
    assert not claude_code.sniff(p, head)
    assert not codex.sniff(p, head)
    assert not atif.sniff(p, head)
    assert openhands.read(p).task == "x" * 100_000


# --- Claude Code ---------------------------------------------------------------------------


def test_claude_code_stream_values(fixtures_dir: Path) -> None:
    t = claude_code.read(fixtures_dir / "claude_code_constructed_stream.jsonl")
    assert (t.agent, t.format, t.model) == (
        "claude-code",
        "claude-code",
        "claude-sonnet-4-5-20250929",
    )
    assert t.id == "3f1c2a9e-5b7d-4c11-9e0a-0c2b7d4e8f10"
    assert t.exit_status == "success"
    # the subagent's Grep (parent_tool_use_id set) is not a main turn
    assert [s.tool for s in t.steps] == ["Read", "Task", "Edit", "", "Bash", "Bash", ""]
    assert [s.kind for s in t.steps] == [
        "action", "action", "action", "compaction", "action", "action", "message"
    ]  # fmt: skip
    assert "Grep" not in {s.tool for s in t.steps}
    assert t.steps[1].observation == "add() is called only from tests/test_calc.py."
    assert t.steps[3].action == "compact(auto)"
    assert t.steps[3].args == {"trigger": "auto", "pre_tokens": 155000}
    assert t.steps[4].action == "python -m pytest tests/test_calc.py -q"
    assert [s.index for s in t.steps if s.is_error] == [4]
    assert t.steps[0].thought == "I'll look at the code under test first."
    assert t.steps[5].thought == "The cache may be stale; rerun."
    assert t.steps[6].thought == "Fixed add(): it subtracted instead of adding."
    # prompt tokens = input + cache writes + cache reads, once per message id
    assert [s.tokens_in for s in t.steps] == [2012, 2105, 2153, 0, 1508, 1614, 1702]
    assert [s.tokens_out for s in t.steps] == [40, 60, 80, 0, 30, 25, 12]
    assert not any(s.tokens_estimated for s in t.steps)
    assert t.total_tokens == 11094 + 247
    assert (t.totals.tokens_in, t.totals.tokens_out, t.totals.api_calls) == (11094, 247, 7)
    assert t.totals.cost_usd == pytest.approx(0.0873)
    assert t.totals.wall_seconds == pytest.approx(45.2)


def test_claude_code_session_log_values(fixtures_dir: Path) -> None:
    t = claude_code.read(fixtures_dir / "claude_code_constructed_session.jsonl")
    assert t.id == "5e0d8c1b-2a3f-4e6d-9b8a-1c2d3e4f5a6b"
    assert t.task == "Fix the failing test in tests/test_calc.py"
    # sidechain Read excluded; compact summary is not a step; the cut last line is dropped
    assert [(s.kind, s.tool) for s in t.steps] == [
        ("action", "Bash"),
        ("action", "Task"),
        ("compaction", ""),
        ("action", "Edit"),
        ("message", ""),
    ]
    assert t.steps[0].is_error
    assert not any(s.is_error for s in t.steps[1:])
    assert t.steps[0].thought == "Run the test first."
    assert t.steps[2].action == "compact(manual)"
    assert t.steps[2].observation == "Conversation compacted"
    # msg_A is split over two lines; its usage counts once, with the final output count
    assert [s.tokens_in for s in t.steps] == [3010, 3206, 0, 1024, 1203]
    assert [s.tokens_out for s in t.steps] == [52, 70, 0, 90, 15]
    assert t.steps[0].timestamp == pytest.approx(1760954403.0)
    assert t.totals.cost_usd is None
    assert t.exit_status == ""


def test_claude_code_loop_fixture(fixtures_dir: Path) -> None:
    t = claude_code.read(fixtures_dir / "claude_code_constructed_loop.jsonl")
    assert [s.tool for s in t.steps] == ["Read", "Bash", "Bash", "Bash", "Bash", "Edit", "Bash"]
    bash = [s for s in t.steps if s.tool == "Bash"]
    assert {s.action for s in bash} == {"python -m pytest tests/test_x.py"}
    assert len(bash) == 5
    assert all(s.is_error for s in bash)
    assert [s.is_error for s in t.steps] == [False, True, True, True, True, False, True]
    assert t.totals.cost_usd == pytest.approx(1.42)
    assert t.exit_status == "error_max_turns"
    assert t.total_tokens == t.totals.tokens_in + t.totals.tokens_out == 30384 + 180


def test_claude_code_partial_first_records(tmp_path: Path) -> None:
    """A live transcript cut after a tool call: the call is a step with no observation yet."""
    src = Path(__file__).parents[1] / "fixtures" / "claude_code_constructed_stream.jsonl"
    lines = src.read_text().splitlines(keepends=True)
    p = tmp_path / "live.jsonl"
    p.write_text("".join(lines[:3]) + lines[3][:40])
    t = claude_code.read(p)
    assert [(s.tool, s.observation) for s in t.steps] == [("Read", "")]
    assert t.totals.cost_usd is None


# --- Codex ---------------------------------------------------------------------------------


def test_codex_values(fixtures_dir: Path) -> None:
    t = codex.read(fixtures_dir / "codex_constructed_exec.jsonl")
    assert (t.id, t.agent, t.format) == ("0199a213-81c0-7800-8aa1-bbab2a035a53", "codex", "codex")
    assert t.exit_status == "completed"
    # reasoning is folded into the next action; todo_list is not a step
    assert [s.tool for s in t.steps] == [
        "shell", "shell", "apply_patch", "docs.search", "shell", "", "shell", ""
    ]  # fmt: skip
    assert t.steps[0].thought == "**Inspecting the repository layout**"
    assert t.steps[0].observation == "src\ntests\n"  # the completed state, not item.started's
    assert t.steps[1].action == "bash -lc 'python -m pytest tests/test_calc.py -q'"
    assert t.steps[2].action == "apply_patch(update src/calc.py)"
    assert t.steps[3].observation == "server docs not reachable"
    assert [s.index for s in t.steps if s.is_error] == [1, 3]
    assert t.steps[5].kind == "message"
    assert "the test passes" in t.steps[5].thought
    # usage per turn, spread over the turn's steps (6 then 2), so estimated
    assert [s.tokens_in for s in t.steps] == [4127] * 5 + [4128, 15000, 15001]
    assert [s.tokens_out for s in t.steps] == [20] * 5 + [22, 30, 31]
    assert all(s.tokens_estimated for s in t.steps)
    assert (t.totals.tokens_in, t.totals.tokens_out) == (54764, 183)
    assert t.total_tokens == 54764 + 183


def test_codex_live_stream_and_failed_turn(tmp_path: Path) -> None:
    p = tmp_path / "exec.jsonl"
    item = {"id": "item_1", "type": "command_execution", "command": "bash -lc make",
            "aggregated_output": "", "exit_code": None, "status": "in_progress"}  # fmt: skip
    events = [
        {"type": "thread.started", "thread_id": "t1"},
        {"type": "turn.started"},
        {"type": "item.started", "item": item},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    ]
    p.write_text("".join(json.dumps(e) + "\n" for e in events))
    t = codex.read(p)
    assert [(s.action, s.is_error, s.tokens_estimated) for s in t.steps] == [
        ("bash -lc make", False, True)
    ]
    assert t.exit_status == "turn.failed: stream disconnected"
    assert t.totals.tokens_in is None


# --- ATIF ----------------------------------------------------------------------------------


def test_atif_values(fixtures_dir: Path) -> None:
    t = atif.read(fixtures_dir / "atif_constructed_v1.json")
    assert (t.id, t.instance_id, t.agent, t.model, t.format) == (
        "atif-calc-0001",
        "calc__calc-1",
        "openhands",
        "claude-sonnet-4-5",
        "atif",
    )
    assert t.task == "Fix add() in src/calc.py so that tests/test_calc.py passes."
    assert [s.kind for s in t.steps] == [
        "action", "action", "action", "compaction", "action", "action", "message"
    ]  # fmt: skip
    assert [s.tool for s in t.steps] == [
        "execute_bash", "str_replace_editor", "execute_bash", "", "str_replace_editor",
        "execute_bash", "",
    ]  # fmt: skip
    assert t.steps[0].thought == "Start by listing the files.\nLet me look at the repository."
    assert t.steps[2].action == "python -m pytest tests/test_calc.py"
    assert [s.index for s in t.steps if s.is_error] == [2]  # extra.exit_code 1
    assert t.steps[3].observation == "Summary: listed files; tests/test_calc.py fails in add()."
    # one ATIF step with two calls: its metrics go on the first
    assert [s.tokens_in for s in t.steps] == [4000, 4800, 0, 0, 3000, 3400, 3600]
    assert [s.tokens_out for s in t.steps] == [90, 150, 0, 0, 120, 40, 30]
    assert sum(s.cost_usd or 0 for s in t.steps) == pytest.approx(0.039)
    assert not any(s.tokens_estimated for s in t.steps)
    assert (t.totals.tokens_in, t.totals.tokens_out) == (18800, 430)
    assert t.total_tokens == 18800 + 430


def test_atif_rejects_other_json(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s", "steps": "none"}))
    with pytest.raises(TranscriptError, match="no steps") as e:
        atif.read(p)
    assert e.value.path == str(p)


# --- shared behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reader", "content"),
    [
        (openhands, b""),
        (claude_code, b"\n\n"),
        (codex, b'{"type": "assistant"}\n'),
        (atif, b"[1, 2]"),
        (claude_code, b"\x00\x01binary"),
        (openhands, b'{"instance_id": 1, "history": 5}\n{"no": "id"}\n'),
    ],
)
def test_bad_input_is_a_transcript_error_naming_the_file(
    tmp_path: Path, reader: object, content: bytes
) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(TranscriptError) as e:
        reader.read(p)  # type: ignore[attr-defined]
    assert e.value.path == str(p)


def test_readers_return_trajectories_with_indices_in_order(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    for name, fmt in CONSTRUCTED.items():
        path = tmp_path / name
        shutil.copy(fixtures_dir / name, path)
        t = FORMATS[fmt].read(path)
        assert isinstance(t, Trajectory)
        assert [s.index for s in t.steps] == list(range(len(t.steps)))
        assert Trajectory.from_dict(t.to_dict()).to_dict() == t.to_dict()


def test_aider_damaged_token_report_reads_with_its_usage_unknown(
    fixtures_dir: Path, tmp_path: Path
) -> None:
    # found by the slow reader fuzz: a flipped byte turned "2.1k sent" into "..1k sent", and
    # float("..1") crashed the reader; the step is read, only its token report is unknown
    from monitor.formats import aider

    src = (fixtures_dir / "aider_constructed_history.md").read_text()
    good = aider.read(fixtures_dir / "aider_constructed_history.md")
    bad_file = tmp_path / "aider_constructed_history.md"
    bad_file.write_text(src.replace("Tokens: 2.1k sent", "Tokens: ..1k sent", 1))
    bad = aider.read(bad_file)
    assert len(bad.steps) == len(good.steps)
    changed = [i for i, (a, b) in enumerate(zip(good.steps, bad.steps, strict=True))
               if (a.tokens_in, a.tokens_out) != (b.tokens_in, b.tokens_out)]  # fmt: skip
    assert len(changed) == 1
    assert all(s.tokens_in >= 0 and s.tokens_out >= 0 for s in bad.steps)
