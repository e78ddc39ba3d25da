"""serving.watch against the ways real harnesses write their transcripts: a poll inside an
in-place rewrite, another run written over a file in place, a first save without the task, a
reply whose output follows it, a step saved before its answer, OpenHands call files and SDK
events. Each scored step must be the finished run's step, once, in one run. The agent CLIs'
sessions and streams are in test_watch_sessions.py."""

from __future__ import annotations

import json
import logging

from serving.transcripts import read_transcript
from serving.watch import TranscriptWatch
from tests.watch_helpers import Recorder, appended, calls_of, mini_run, saved_after


def _saved(traj: dict, k: int) -> str:
    return json.dumps(saved_after(traj, k), indent=2)  # as mini-swe-agent writes it


def test_a_poll_inside_an_in_place_rewrite_does_not_restart_the_run(data_dir, tmp_path):
    """`Path.write_text` truncates, then writes: a poll in between found the file shrunk and
    unreadable, ended the run, and the next poll scored every step again as a new run."""
    rec = Recorder()
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
    assert rec.calls == calls_of(path, "mini-swe-agent")


def test_another_run_written_over_a_file_in_place_is_a_new_run(data_dir, tmp_path):
    """Same inode, the same first line (`{`), a larger file: only the content says that another
    task's run was written over a killed one."""
    rec = Recorder()
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


def test_a_run_is_opened_once_its_task_is_known(fixtures_dir, tmp_path):
    """An ATIF file first saved with its system step only (no task yet): the session was opened
    with an empty task, or the run split in two when the task appeared."""
    rec = Recorder()
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
    rec = Recorder()
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
    rec, watch = appended(fixtures_dir / "aider_constructed_harness.md", path, "aider")
    assert len(watch.runs) == 1
    assert rec.calls == calls_of(path, "aider")


def test_a_step_saved_before_its_answer_is_scored_with_it(data_dir, tmp_path):
    """A mini-swe-agent harness that saves a step before the message answering it (a format
    error's text, the submission) is appended: such a step was scored with nothing answered."""
    from monitor.formats.minisweagent import _FORMAT_ERROR

    rec = Recorder()
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
    assert rec.calls == calls_of(path, "mini-swe-agent")


def _openhandscalls_of(data_dir) -> list[dict]:  # noqa: ANN001
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
    calls = _openhandscalls_of(data_dir)
    rerun = json.loads(json.dumps(calls).replace("I'll help", "(again) I'll help"))
    folder = tmp_path / "llm_completions" / "astropy__astropy-12907"
    folder.mkdir(parents=True)
    rec = Recorder()
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
    assert rec.calls[10:] == calls_of(folder, "openhands-completions")


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
    calls = _openhandscalls_of(data_dir)
    folder = tmp_path / "llm_completions" / "astropy__astropy-12907"
    folder.mkdir(parents=True)
    rec = Recorder()
    watch = TranscriptWatch(folder, rec, fmt="openhands-completions")
    for k, doc in enumerate(_condensed(calls, 12, 4)):
        (folder / f"claude-{1743400000 + k}.000000.json").write_text(json.dumps(doc))
        watch.poll()
    watch.poll(final=True)
    watch.end()
    assert len(watch.runs) == 1
    whole = tmp_path / "whole.json"  # the run's last call, never condensed
    whole.write_text(json.dumps(calls[-1]))
    assert rec.calls == calls_of(whole, "openhands-completions")
    assert watch.totals["steps"] == len(calls)


def test_an_openhands_sdk_conversation_is_followed_event_by_event(fixtures_dir, tmp_path):
    """A persisted OpenHands SDK conversation grows one event file at a time (a call, then
    the file of its observation): each call is scored once, with its observation."""
    import shutil

    done = next((fixtures_dir / "openhands_sdk_conversation").iterdir())
    live = tmp_path / "conversations" / done.name
    (live / "events").mkdir(parents=True)
    shutil.copy(done / "base_state.json", live)
    rec = Recorder()
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
    assert rec.calls == calls_of(done, "openhands-sdk")
    assert len(rec.calls) == 8
