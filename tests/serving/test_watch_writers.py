"""serving.watch against the ways real harnesses write their transcripts: a poll inside an
in-place rewrite, another run written over a file in place, a response written as two records, a
tool call started before its result, usage reported after its steps, a first save without the
task. Each scored step must be the finished run's step, once, in one run."""

from __future__ import annotations

import io
import json
import logging

from monitor.decision_log import DecisionLog
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from serving.transcripts import read_transcript
from serving.watch import TranscriptWatch
from tests.watch_helpers import append_lines, mini_run, saved_after


class _Recorder:
    """A Monitor that remembers each session's task and the calls it was shown."""

    def __init__(self) -> None:
        cfg = PolicyConfig(stuck={"enabled": False})  # no halts: count what is seen
        self.monitor = Monitor(cfg, scorer=ScriptedScorer([0.1]), log=DecisionLog(io.StringIO()))
        self.tasks: list[str] = []
        self.calls: list[tuple] = []

    def start(self, task: str = "", *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.tasks.append(task)
        session = self.monitor.start(task, *args, **kwargs)
        observe = session.observe

        def seen(step):  # noqa: ANN001, ANN202
            self.calls.append((step.kind, step.tool, step.action, step.observation, step.is_error))
            return observe(step)

        session.observe = seen  # type: ignore[method-assign]
        return session


def _saved(traj: dict, k: int) -> str:
    return json.dumps(saved_after(traj, k), indent=2)  # as mini-swe-agent writes it


def _calls(path, fmt: str) -> list[tuple]:
    steps = read_transcript(path, fmt).steps
    return [(s.kind, s.tool, s.action, s.observation, s.is_error) for s in steps]


def _appended(src, path, fmt: str):  # noqa: ANN001, ANN202
    """`src` written to `path` a line at a time as a stream harness writes it, the watch polling
    after each line, then the run ended: (the recorder, the watch)."""
    rec = _Recorder()
    watch = TranscriptWatch(path, rec, fmt=fmt)
    append_lines(path, src.read_text().splitlines(True), watch.poll)
    watch.poll(final=True)
    watch.end()
    return rec, watch


def test_a_poll_inside_an_in_place_rewrite_does_not_restart_the_run(data_dir, tmp_path):
    """`Path.write_text` truncates, then writes: a poll in between found the file shrunk and
    unreadable, ended the run, and the next poll scored every step again as a new run."""
    rec = _Recorder()
    traj = mini_run(data_dir, "astropy__astropy-12907")
    n = (len(traj["messages"]) - 2) // 2
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, rec, fmt="mini-swe-agent")
    for k in range(1, n + 1):
        path.write_text("")  # the truncation, seen by a poll
        watch.poll()
        path.write_text(_saved(traj, k))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "mini-swe-agent")


def test_another_run_written_over_a_file_in_place_is_a_new_run(data_dir, tmp_path):
    """Same inode, the same first line (`{`), a larger file: only the content says that another
    task's run was written over a killed one."""
    rec = _Recorder()
    first, other = (
        mini_run(data_dir, i) for i in ("astropy__astropy-12907", "astropy__astropy-13236")
    )
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, rec, fmt="mini-swe-agent")
    path.write_text(_saved(first, 1))
    assert len(watch.poll()) == 1
    path.write_text(_saved(other, 4))
    again = watch.poll()
    assert len(watch.runs) == 2
    assert [d.step for d in again][:1] == [1]
    assert len(rec.tasks) == 2
    assert rec.tasks[1] == read_transcript(path, "mini-swe-agent").task != rec.tasks[0]


def test_a_response_written_as_two_records_is_scored_as_its_call(fixtures_dir, tmp_path):
    """Claude Code writes a response's text and its tool_use as two lines of one message: a poll
    between them saw a prose step, and the call that replaced it was never scored."""
    path = tmp_path / "run.jsonl"
    rec, watch = _appended(
        fixtures_dir / "claude_code_constructed_stream.jsonl", path, "claude-code"
    )
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "claude-code")


def test_a_codex_call_started_is_scored_with_its_result(fixtures_dir, tmp_path):
    """An mcp_tool_call's item.started (no result yet) read as the call's answer '""', so it was
    scored at once and its item.completed (an error) never was; and the turn's usage, reported
    after its steps in turn.completed, never reached the budgets' token count."""
    path = tmp_path / "run.jsonl"
    rec, watch = _appended(fixtures_dir / "codex_constructed_exec.jsonl", path, "codex")
    final = read_transcript(path, "codex")
    assert rec.calls == _calls(path, "codex")
    assert any(c[1] == "docs.search" and c[4] for c in rec.calls)  # its error
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) > 0


def test_a_codex_rollout_is_followed_call_by_call(fixtures_dir, tmp_path):
    """A Codex session rollout appended a line at a time: each call scored once, with its
    output (a call is written before its output, and two calls of one response before either
    output), and each response's recorded usage counted."""
    path = tmp_path / "rollout.jsonl"
    rec, watch = _appended(fixtures_dir / "codex_constructed_rollout.jsonl", path, "codex-rollout")
    final = read_transcript(path, "codex-rollout")
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "codex-rollout")  # as scored: none before its output
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) == 46502 + 444


def test_a_gemini_cli_session_is_followed_as_the_cli_appends_it(fixtures_dir, tmp_path):
    """Gemini CLI (v0.39+) appends a message again each time it changes (its calls once they
    ran) and drops a rewound one: each call scored once, with its result, the rewound reply
    never, and each recorded usage counted once."""
    path = tmp_path / "session.jsonl"
    src = fixtures_dir / "gemini_cli_constructed_session.jsonl"
    rec, watch = _appended(src, path, "gemini-cli")
    final = read_transcript(path, "gemini-cli")
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "gemini-cli")
    assert watch.totals["tokens"] == sum(s.tokens for s in final.steps) == 51747 + 353


def test_a_gemini_cli_json_session_rewritten_in_place_is_one_run(fixtures_dir, tmp_path):
    """Gemini CLI up to v0.38 rewrites its whole session JSON in place at every update (the
    genuine session, saved after each message)."""
    rec = _Recorder()
    doc = json.loads((fixtures_dir / "gemini_cli_session_pomodoro.json").read_text())
    path = tmp_path / "session-2025-10-21T20-04-0b23371a.json"
    watch = TranscriptWatch(path, rec, fmt="gemini-cli")
    for k in range(1, len(doc["messages"]) + 1):
        path.write_text(json.dumps({**doc, "messages": doc["messages"][:k]}, indent=2))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "gemini-cli")


def test_a_gemini_stream_is_followed_call_by_call(fixtures_dir, tmp_path):
    """`gemini -p --output-format stream-json` captured to a file: each call scored once with
    its result, the assistant's text chunks as the next call's thought."""
    path = tmp_path / "run.jsonl"
    src = fixtures_dir / "gemini_cli_constructed_stream.jsonl"
    rec, watch = _appended(src, path, "gemini-stream")
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "gemini-stream")


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
    rec, watch = _appended(src, tmp_path / "rollout.jsonl", "codex-rollout")
    assert rec.calls == _calls(tmp_path / "rollout.jsonl", "codex-rollout")
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
    rec, _ = _appended(src, tmp_path / "session.jsonl", "claude-code")
    assert rec.calls == _calls(tmp_path / "session.jsonl", "claude-code")
    assert [c[2] for c in rec.calls] == ["sleep 5; false", "echo quick", "true"]
    assert rec.calls[0][3:] == ("(no output)", True)
    assert rec.calls[2][3:] == ("(no output)", False)


def test_a_claude_code_call_never_answered_does_not_hold_back_the_rest(tmp_path):
    """A call whose answer the transcript lost, followed by a later model response: the model is
    only called again once every call of its last response is answered, so the lost one is
    scored as it is and the steps after it are scored as they come, not only when the run
    ends."""
    path = tmp_path / "session.jsonl"
    rec = _Recorder()
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


def test_a_run_is_opened_once_its_task_is_known(fixtures_dir, tmp_path):
    """An ATIF file first saved with its system step only (no task yet): the session was opened
    with an empty task, or the run split in two when the task appeared."""
    rec = _Recorder()
    doc = json.loads((fixtures_dir / "atif_constructed_v1.json").read_text())
    path = tmp_path / "trajectory.json"
    watch = TranscriptWatch(path, rec, fmt="atif")
    for k in range(1, len(doc["steps"]) + 1):
        tmp = path.with_name("trajectory.json.tmp")
        tmp.write_text(json.dumps({**doc, "steps": doc["steps"][:k]}))
        tmp.replace(path)
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    assert rec.tasks == [read_transcript(path, "atif").task]
    assert rec.tasks[0]


def test_a_file_that_stops_reading_is_said_once(fixtures_dir, tmp_path, caplog):
    """OpenHands appends a second instance's line to output.jsonl: the file holds two runs and
    no longer reads as one; the watch said nothing and scored nothing more."""
    rec = _Recorder()
    line = (fixtures_dir / "openhands_constructed_output.jsonl").read_text().splitlines(True)[0]
    path = tmp_path / "output.jsonl"
    path.write_text(line)
    watch = TranscriptWatch(path, rec, fmt="openhands")
    assert watch.poll(final=True)
    with open(path, "a") as f:
        f.write(line.replace('"instance_id": "', '"instance_id": "other-', 1))
    with caplog.at_level(logging.WARNING, logger="serving.watch"):
        for _ in range(3):
            assert watch.poll() == []
    said = [r for r in caplog.records if "waiting for it to read again" in r.getMessage()]
    assert len(said) == 1
    assert "2 OpenHands runs" in said[0].getMessage()


def test_an_aider_reply_is_scored_with_the_output_that_follows_it(fixtures_dir, tmp_path):
    """aider appends a reply, then its edits applied, lint errors and test output: a reply was
    scored at its first output line, and the failing lint that followed never reached it."""
    path = tmp_path / "astropy__astropy-12907.md"
    rec, watch = _appended(fixtures_dir / "aider_constructed_harness.md", path, "aider")
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "aider")


def test_a_step_saved_before_its_answer_is_scored_with_it(data_dir, tmp_path):
    """A mini-swe-agent harness that saves a step before the message answering it (a format
    error's text, the submission) is appended: such a step was scored with nothing answered."""
    from monitor.formats.minisweagent import _FORMAT_ERROR

    rec = _Recorder()
    traj = mini_run(data_dir, "django__django-15127")
    msgs = traj["messages"]
    replies = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, rec, fmt="mini-swe-agent")
    late = 0
    for k, i in enumerate(replies):
        answer = msgs[i + 1]["content"] if i + 1 < len(msgs) else ""
        if isinstance(answer, str) and answer.lstrip().startswith(_FORMAT_ERROR):
            late += 1
            path.write_text(json.dumps({**traj, "messages": msgs[: i + 1], "info": {}}))
            watch.poll()  # the step saved before its answer
        cut = replies[k + 1] if k + 1 < len(replies) else len(msgs)
        path.write_text(json.dumps({**traj, "messages": msgs[:cut], "info": {}}))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert late  # the run has a format error answered late
    assert len(watch.runs) == 1
    assert rec.calls == _calls(path, "mini-swe-agent")


def _openhands_calls(data_dir) -> list[dict]:  # noqa: ANN001
    """An OpenHands run of ../shared/data as its per-call completion logs: call k's file holds
    the conversation sent on call k and its response (the last call's file is the run's)."""
    import gzip

    folder = data_dir / "swe-bench-verified" / "openhands-claude-3.5-sonnet" / "trajs"
    last = json.loads(gzip.open(next((folder / "astropy__astropy-12907").glob("*.json.gz"))).read())
    msgs = last["messages"]
    task = next(i for i, m in enumerate(msgs) if m["role"] == "user" and "NEW TASK" in str(m))
    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > task]
    calls = []
    for i in turns:
        answer = {"choices": [{"message": {"role": "assistant", "content": msgs[i]["content"]}}]}
        calls.append({"messages": msgs[:i], "response": answer})
    return [*calls, {"messages": msgs, "response": last["response"]}]


def test_a_rerun_beside_a_crashed_attempts_call_files_is_a_new_run(data_dir, tmp_path):
    """OpenHands' llm_completions/<instance>/ keeps a crashed attempt's call files when the
    instance is run again: the longest conversation (the old attempt's, until the rerun
    outgrew it) was read, then the rerun's later calls were spliced onto the old run."""
    calls = _openhands_calls(data_dir)
    rerun = json.loads(json.dumps(calls).replace("I'll help", "(again) I'll help"))
    folder = tmp_path / "llm_completions" / "astropy__astropy-12907"
    folder.mkdir(parents=True)
    rec = _Recorder()
    watch = TranscriptWatch(folder, rec, fmt="openhands-completions")
    for start, attempt in ((1743400000, calls[:10]), (1743500000, rerun)):
        for k, doc in enumerate(attempt):
            (folder / f"claude-{start + k}.000000.json").write_text(json.dumps(doc))
            watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 2
    assert watch.totals["steps"] == 10 + len(rerun)
    last = read_transcript(folder, "openhands-completions")  # the rerun's latest call
    assert last.steps[0].thought.startswith("(again)")
    assert rec.calls[10:] == _calls(folder, "openhands-completions")


def _condensed(calls: list[dict], at: int, keep: int) -> list[dict]:
    """`calls` as OpenHands' LLMSummarizingCondenser leaves them from call `at` on: the system
    prompt, the task, the summary as a user message, then the turns from `at - keep` on (its
    `keep_first` head, the summary at `summary_offset`, the latest events: memory/view.py)."""
    out = []
    for k, call in enumerate(calls):
        msgs = call["messages"]
        task = next(i for i, m in enumerate(msgs) if m["role"] == "user" and "NEW TASK" in str(m))
        turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > task]
        if k < at:
            out.append(call)
            continue
        summary = {"role": "user", "content": "\n\nUSER_CONTEXT: fix separability_matrix"}
        kept = msgs[: task + 1] + [summary] + msgs[turns[at - keep] :]
        out.append({**call, "messages": kept})
    return out


def test_a_condensed_openhands_history_is_the_same_run(data_dir, tmp_path):
    """A condenser shortens the history sent from call 12 on (a summary, the latest 4 turns):
    the latest call file holds fewer steps than were seen, yet it is the run gone on, not a
    rerun; each step is scored once, with the result it got."""
    calls = _openhands_calls(data_dir)
    folder = tmp_path / "llm_completions" / "astropy__astropy-12907"
    folder.mkdir(parents=True)
    rec = _Recorder()
    watch = TranscriptWatch(folder, rec, fmt="openhands-completions")
    for k, doc in enumerate(_condensed(calls, 12, 4)):
        (folder / f"claude-{1743400000 + k}.000000.json").write_text(json.dumps(doc))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    whole = tmp_path / "whole.json"  # the run's last call, never condensed
    whole.write_text(json.dumps(calls[-1]))
    assert rec.calls == _calls(whole, "openhands-completions")
    assert watch.totals["steps"] == len(calls)


def test_an_openhands_sdk_conversation_is_followed_event_by_event(fixtures_dir, tmp_path):
    """A persisted OpenHands SDK conversation grows one event file at a time (a call, then
    the file of its observation): each call is scored once, with its observation."""
    import shutil

    done = next((fixtures_dir / "openhands_sdk_conversation").iterdir())
    live = tmp_path / "conversations" / done.name
    (live / "events").mkdir(parents=True)
    shutil.copy(done / "base_state.json", live)
    rec = _Recorder()
    watch = TranscriptWatch(live, rec)
    for event in sorted((done / "events").iterdir()):
        text = event.read_text()
        (live / "events" / event.name).write_text(text[: len(text) // 2])  # caught mid-write
        watch.poll()
        (live / "events" / event.name).write_text(text)
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    assert rec.tasks == ["Fix add() in calc.py: add(2, 2) should be 4."]
    assert rec.calls == _calls(done, "openhands-sdk")
    assert len(rec.calls) == 8
