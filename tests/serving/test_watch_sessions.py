"""serving.watch against the transcripts agent CLIs write as they go (Claude Code, Codex exec
streams and session rollouts, Gemini CLI sessions and streams): a response written as two records,
a call started before its result, parallel calls answered out of order or never, a session
rewritten in place. Each scored step must be the finished run's step, once, in one run."""

from __future__ import annotations

import json

from serving.transcripts import read_transcript
from serving.watch import TranscriptWatch
from tests.watch_helpers import Recorder, append_lines, appended, calls_of


def test_a_response_written_as_two_records_is_scored_as_its_call(fixtures_dir, tmp_path):
    """Claude Code writes a response's text and its tool_use as two lines of one message: a poll
    between them saw a prose step, and the call that replaced it was never scored."""
    path = tmp_path / "run.jsonl"
    rec, watch = appended(
        fixtures_dir / "claude_code_constructed_stream.jsonl", path, "claude-code"
    )
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "claude-code")


def test_a_codex_call_started_is_scored_with_its_result(fixtures_dir, tmp_path):
    """An mcp_tool_call's item.started (no result yet) read as the call's answer '""', so it was
    scored at once and its item.completed (an error) never was; and the turn's usage, reported
    after its steps in turn.completed, never reached the budgets' token count."""
    path = tmp_path / "run.jsonl"
    rec, watch = appended(fixtures_dir / "codex_constructed_exec.jsonl", path, "codex")
    final = read_transcript(path, "codex")
    assert rec.calls == calls_of(path, "codex")
    assert any(c[1] == "docs.search" and c[4] for c in rec.calls)  # its error
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) > 0


def test_a_codex_rollout_is_followed_call_by_call(fixtures_dir, tmp_path):
    """A Codex session rollout appended a line at a time: each call scored once, with its
    output (a call is written before its output, and two calls of one response before either
    output), and each response's recorded usage counted."""
    path = tmp_path / "rollout.jsonl"
    rec, watch = appended(fixtures_dir / "codex_constructed_rollout.jsonl", path, "codex-rollout")
    final = read_transcript(path, "codex-rollout")
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "codex-rollout")  # as scored: none before its output
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) == 46502 + 444


def test_a_gemini_cli_session_is_followed_as_the_cli_appends_it(fixtures_dir, tmp_path):
    """Gemini CLI (v0.39+) appends a message again each time it changes (its calls once they
    ran) and drops a rewound one: each call scored once, with its result, the rewound reply
    never, and each recorded usage counted once."""
    path = tmp_path / "session.jsonl"
    src = fixtures_dir / "gemini_cli_constructed_session.jsonl"
    rec, watch = appended(src, path, "gemini-cli")
    final = read_transcript(path, "gemini-cli")
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "gemini-cli")
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) == 51747 + 353


def test_a_gemini_cli_json_session_rewritten_in_place_is_one_run(fixtures_dir, tmp_path):
    """Gemini CLI up to v0.38 rewrites its whole session JSON in place at every update (the
    genuine session, saved after each message)."""
    rec = Recorder()
    doc = json.loads((fixtures_dir / "gemini_cli_session_pomodoro.json").read_text())
    path = tmp_path / "session-2025-10-21T20-04-0b23371a.json"
    watch = TranscriptWatch(path, rec, fmt="gemini-cli")
    for k in range(1, len(doc["messages"]) + 1):
        path.write_text(json.dumps({**doc, "messages": doc["messages"][:k]}, indent=2))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "gemini-cli")


def test_a_gemini_stream_is_followed_call_by_call(fixtures_dir, tmp_path):
    """`gemini -p --output-format stream-json` captured to a file: each call scored once with
    its result, the assistant's text chunks as the next call's thought."""
    path = tmp_path / "run.jsonl"
    src = fixtures_dir / "gemini_cli_constructed_stream.jsonl"
    rec, watch = appended(src, path, "gemini-stream")
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "gemini-stream")


def test_parallel_codex_calls_answered_out_of_order_are_scored_with_their_outputs(tmp_path):
    """Two calls of one response, the second answered first: the first was scored with no
    output (its exit code 1 came later), since only a last step was held back."""

    def line(kind: str, **payload: object) -> str:
        return json.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload})

    def call(cid: str, cmd: str) -> str:
        args = json.dumps({"command": cmd})
        return line(
            "response_item", type="function_call", name="shell_command", call_id=cid, arguments=args
        )

    def output(cid: str, text: str) -> str:
        return line("response_item", type="function_call_output", call_id=cid, output=text)

    src = tmp_path / "src.jsonl"
    lines = [
        line("session_meta", id="sess-1", cwd="/x"),
        line("event_msg", type="user_message", message="fix it"),
        call("a", "sleep 5; false"),
        call("b", "echo quick"),
        output("b", "Exit code: 0\nOutput:\nquick\n"),
        output("a", "Exit code: 1\nOutput:\n"),
        call("c", "ls"),
        output("c", "Exit code: 0\nOutput:\n"),
    ]
    src.write_text("".join(x + "\n" for x in lines))
    rec, watch = appended(src, tmp_path / "rollout.jsonl", "codex-rollout")
    assert rec.calls == calls_of(tmp_path / "rollout.jsonl", "codex-rollout")
    assert rec.calls[0][4]  # scored with its exit code 1


def _claude_lines(*records: tuple) -> list[str]:
    """Claude Code session-log lines: ("task", text), ("call", message id, call id, command)
    and ("result", call id, text, is_error), each record one line as Claude Code appends them
    (a response's calls share its message id and repeat its usage)."""
    out = []
    for rec in records:
        base = {"sessionId": "s-1", "isSidechain": False, "cwd": "/repo"}
        if rec[0] == "task":
            out.append({**base, "type": "user", "message": {"role": "user", "content": rec[1]}})
        elif rec[0] == "call":
            _, msg, cid, cmd = rec
            block = {"type": "tool_use", "id": cid, "name": "Bash", "input": {"command": cmd}}
            usage = {"input_tokens": 1000, "output_tokens": 20}
            message = {"id": msg, "role": "assistant", "content": [block], "usage": usage}
            out.append({**base, "type": "assistant", "message": message})
        else:
            _, cid, text, err = rec
            block = {"type": "tool_result", "tool_use_id": cid, "content": text, "is_error": err}
            out.append({**base, "type": "user", "message": {"role": "user", "content": [block]}})
    return [json.dumps(x) + "\n" for x in out]


def test_parallel_claude_code_calls_answered_out_of_order_are_scored_with_their_outputs(
    tmp_path,
):
    """Two Bash calls of one response, the second answered first, the first failing with no
    output: before Claude Code was read as answered by id the first was scored as a call still
    waiting (no output, no error). A command that printed nothing is answered with content ""
    (real session logs): it reads as "(no output)", not as a call still waiting."""
    src = tmp_path / "src.jsonl"
    src.write_text(
        "".join(
            _claude_lines(
                ("task", "fix it"),
                ("call", "msg_1", "a", "sleep 5; false"),
                ("call", "msg_1", "b", "echo quick"),
                ("result", "b", "quick", False),
                ("result", "a", "", True),
                ("call", "msg_2", "c", "true"),
                ("result", "c", "", False),
            )
        )
    )
    rec, _ = appended(src, tmp_path / "session.jsonl", "claude-code")
    assert rec.calls == calls_of(tmp_path / "session.jsonl", "claude-code")
    assert [c[2] for c in rec.calls] == ["sleep 5; false", "echo quick", "true"]
    assert rec.calls[0][3:] == ("(no output)", True)
    assert rec.calls[2][3:] == ("(no output)", False)


def test_a_claude_code_call_never_answered_does_not_hold_back_the_rest(tmp_path):
    """A call whose answer the transcript lost, followed by a later model response: the model is
    only called again once every call of its last response is answered, so the lost one is
    scored as it is and the steps after it are scored as they come, not only when the run
    ends."""
    path = tmp_path / "session.jsonl"
    rec = Recorder()
    watch = TranscriptWatch(path, rec, fmt="claude-code")
    lines = _claude_lines(
        ("task", "fix it"),
        ("call", "msg_1", "a", "lost"),
        ("call", "msg_2", "b", "ls"),
        ("result", "b", "a.py", False),
        ("call", "msg_3", "c", "pytest"),
        ("result", "c", "1 passed", False),
    )
    append_lines(path, lines, watch.poll)
    assert [c[2:4] for c in rec.calls] == [("lost", ""), ("ls", "a.py"), ("pytest", "1 passed")]
    watch.poll(final=True)
    watch.end()
    assert len(rec.calls) == 3
