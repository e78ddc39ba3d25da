"""The library watch loop (serving.watch): growth, and a truncated or replaced file is a new run,
never spliced onto the old one (issue 25, item 5)."""

from __future__ import annotations

import io
import json
import os

import pytest

from monitor.decision_log import DecisionLog
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from serving.watch import TranscriptReplaced, TranscriptWatch
from tests.watch_helpers import mini_run, saved_after


def _monitor() -> tuple[Monitor, io.StringIO]:
    sink = io.StringIO()
    cfg = PolicyConfig(stuck={"enabled": False})  # score all steps, no stop: count what is seen
    return Monitor(cfg, scorer=ScriptedScorer([0.1]), log=DecisionLog(sink)), sink


def _ends(sink: io.StringIO) -> list[dict]:
    records = [json.loads(x) for x in sink.getvalue().splitlines()]
    return [r for r in records if r.get("event") == "end"]


def _lines(fixtures_dir, name: str) -> list[str]:
    return (fixtures_dir / f"claude_code_constructed_{name}.jsonl").read_text().splitlines(True)


def test_watch_follows_growth_step_by_step(fixtures_dir, tmp_path):
    monitor, sink = _monitor()
    path = tmp_path / "run.jsonl"
    watch = TranscriptWatch(path, monitor, fmt="claude-code")
    assert watch.poll() == []  # not there yet
    lines = _lines(fixtures_dir, "loop")
    path.write_text("".join(lines[:5]))
    first = watch.poll()
    with open(path, "a") as f:
        f.write("".join(lines[5:]))
    rest = watch.poll()
    assert watch.poll() == []
    watch.end()
    assert [d.step for d in first + rest] == list(range(1, 8))
    assert watch.runs == ["9a7e0f44-1d2b-4b3a-8c55-7e6f1a2b3c4d"]
    assert [e["steps"] for e in _ends(sink)] == [7]


@pytest.mark.parametrize("how", ["rename", "truncate"])
def test_replaced_transcript_is_a_new_run(fixtures_dir, tmp_path, how):
    """The old probe: a rotated file's steps were scored as steps k+1.. of the old run."""
    monitor, sink = _monitor()
    path = tmp_path / "run.jsonl"
    path.write_text("".join(_lines(fixtures_dir, "loop")))
    told: list[tuple[str, str]] = []
    watch = TranscriptWatch(path, monitor, on_new_run=lambda r, w: told.append((r, w)))
    assert len(watch.poll()) == 7
    new = "".join(_lines(fixtures_dir, "stream")[:9])  # a shorter, different run
    if how == "rename":
        tmp = tmp_path / "new.jsonl"
        tmp.write_text(new)
        os.replace(tmp, path)
    else:
        with open(path, "r+") as f:  # same inode
            f.truncate(0)
            f.write(new)
    decisions = watch.poll()
    watch.end()
    assert decisions
    assert decisions[0].step == 1  # counted from the new run's first step
    assert watch.runs == [
        "9a7e0f44-1d2b-4b3a-8c55-7e6f1a2b3c4d",
        "3f1c2a9e-5b7d-4c11-9e0a-0c2b7d4e8f10",
    ]
    ends = _ends(sink)
    assert [(e["run"], e["steps"]) for e in ends] == [
        (watch.runs[0], 7),
        (watch.runs[1], len(decisions)),
    ]
    assert told[1][0] == watch.runs[1]
    assert ("new inode" if how == "rename" else "shrank") in told[1][1]


def test_rewritten_with_the_same_run_id_gets_its_own_id(fixtures_dir, tmp_path):
    """Same first line, but the file shrank: a new run; its id is told apart from the old."""
    monitor, sink = _monitor()
    path = tmp_path / "run.jsonl"
    lines = _lines(fixtures_dir, "loop")
    path.write_text("".join(lines))
    watch = TranscriptWatch(path, monitor)
    watch.poll()
    with open(path, "r+") as f:
        f.truncate(0)
        f.write("".join(lines[:5]))
    again = watch.poll()
    watch.end()
    assert [d.step for d in again] == [1, 2]
    assert watch.runs[1] == watch.runs[0] + "#2"
    assert [e["steps"] for e in _ends(sink)] == [7, 2]


def test_first_line_change_at_equal_size_is_detected(tmp_path, fixtures_dir):
    monitor, _ = _monitor()
    path = tmp_path / "run.jsonl"
    lines = _lines(fixtures_dir, "loop")
    path.write_text("".join(lines))
    watch = TranscriptWatch(path, monitor, on_replace="stop")
    watch.poll()
    changed = lines[0].replace("9a7e0f44", "9a7e0f45")  # same size, another session
    with open(path, "r+") as f:
        f.write(changed)
    with pytest.raises(TranscriptReplaced, match="first line changed"):
        watch.poll()


def test_a_call_is_scored_with_its_result_not_before(fixtures_dir, tmp_path):
    """A stream format writes a tool call and its result as two records: a poll between them
    must not score the call without what it returned (and never see it again)."""
    monitor, _ = _monitor()
    path = tmp_path / "run.jsonl"
    watch = TranscriptWatch(path, monitor, fmt="claude-code")
    seen: list[tuple[int, str]] = []
    lines = _lines(fixtures_dir, "loop")
    for i in range(len(lines)):  # one record at a time, a poll after each
        path.write_text("".join(lines[: i + 1]))
        for _ in watch.poll():
            step = watch.traj.steps[watch.seen - 1]
            seen.append((step.index, step.observation))
    assert [i for i, _ in seen] == list(range(7))
    whole = TranscriptWatch(path, _monitor()[0], fmt="claude-code")
    whole.poll()
    assert [o for _, o in seen] == [s.observation for s in whole.traj.steps]
    assert all(o for _, o in seen)  # every call scored with its result


def test_a_last_call_without_result_is_scored_when_the_run_is_over(fixtures_dir, tmp_path):
    monitor, _ = _monitor()
    path = tmp_path / "run.jsonl"
    lines = _lines(fixtures_dir, "loop")
    whole = TranscriptWatch(tmp_path / "w.jsonl", _monitor()[0], fmt="claude-code")
    (tmp_path / "w.jsonl").write_text("".join(lines))
    whole.poll()
    n = len(whole.traj.steps)
    # cut before the last result: the last call has no result
    for k in range(len(lines), 0, -1):
        path.write_text("".join(lines[:k]))
        watch = TranscriptWatch(path, _monitor()[0], fmt="claude-code")
        if len(watch.poll()) == n - 1:
            break
    assert watch.poll() == []  # still waiting for its result
    assert [d.step for d in watch.poll(final=True)] == [n]


def test_a_runs_reported_total_cost_counts_when_its_steps_carry_none(fixtures_dir, tmp_path):
    """Claude Code writes its cost only in the result record: the budgets must see it."""
    monitor, _ = _monitor()
    path = tmp_path / "run.jsonl"
    lines = _lines(fixtures_dir, "stream")
    watch = TranscriptWatch(path, monitor, fmt="claude-code")
    path.write_text("".join(lines[:-1]))  # no result record yet
    watch.poll()
    assert watch.totals["dollars"] == 0.0
    path.write_text("".join(lines))
    watch.poll(final=True)
    assert watch.totals["dollars"] == pytest.approx(0.0873)
    watch.poll(final=True)
    assert watch.totals["dollars"] == pytest.approx(0.0873)  # counted once


def test_held_calls_count_once_when_the_run_is_replaced_or_ends(fixtures_dir, tmp_path):
    """A held call ran: its tokens count when the file is replaced or the watch ends, and a
    step's cost is never counted twice beside the run's reported total."""
    from monitor.types import Step, Totals, Trajectory
    from serving import watch as watch_mod

    path = tmp_path / "run.jsonl"
    path.write_text("x\n")
    steps = [
        Step(index=0, action="ls", observation="a.py", tokens_in=100, cost_usd=0.10),
        Step(index=1, action="pytest", observation="", tokens_in=150, cost_usd=0.10),  # held
    ]
    traj = Trajectory(id="r", instance_id="t", agent="a", steps=steps, totals=Totals(cost_usd=0.2))
    real = watch_mod.read_transcript
    watch_mod.read_transcript = lambda *a, **k: traj  # type: ignore[assignment]
    try:
        monitor, _ = _monitor()
        w = TranscriptWatch(path, monitor)
        assert [d.step for d in w.poll()] == [1]
        assert w.totals["dollars"] == pytest.approx(0.20)  # the run's reported total
        # the held call's model call was made: the budgets count it before its result
        assert (w.totals["steps"], w.totals["tokens"]) == (2, 250)
        assert w.poll() == []
        assert (w.totals["steps"], w.totals["tokens"]) == (2, 250)  # not again
        w.end()  # observed now, as it is; counted once
        assert (w.totals["steps"], w.totals["tokens"]) == (2, 250)
        assert w.totals["dollars"] == pytest.approx(0.20)
    finally:
        watch_mod.read_transcript = real  # type: ignore[assignment]


def _save_atomically(path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))  # compact: the first line is the whole document
    os.replace(tmp, path)  # a new inode at every save


def test_a_json_run_saved_whole_after_every_step_is_one_run(data_dir, tmp_path):
    """A harness that rewrites its JSON transcript after every step, compact and through a
    temporary file (new inode, new first line each time), is followed as one run growing: each
    step observed once, never a new run per save."""
    monitor, sink = _monitor()
    traj = mini_run(data_dir, "astropy__astropy-12907")
    n = (len(traj["messages"]) - 2) // 2
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, monitor, fmt="mini-swe-agent")
    decisions = []
    for k in range(1, n + 1):
        _save_atomically(path, saved_after(traj, k))
        decisions += watch.poll()
    watch.end()
    assert len(watch.runs) == 1
    assert [d.step for d in decisions] == list(range(1, len(decisions) + 1))
    assert len(decisions) >= n - 1  # the last call may be held for its result, then flushed
    assert [e["steps"] for e in _ends(sink)] == [watch.totals["steps"]]


def test_another_json_run_saved_over_it_is_a_new_run(data_dir, tmp_path):
    monitor, _ = _monitor()
    first, other = (
        mini_run(data_dir, i) for i in ("astropy__astropy-12907", "astropy__astropy-13236")
    )
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, monitor, fmt="mini-swe-agent")
    _save_atomically(path, saved_after(first, 3))
    assert len(watch.poll()) >= 2
    _save_atomically(path, saved_after(other, 4))  # another task: a new run
    again = watch.poll()
    assert again
    assert again[0].step == 1
    assert len(watch.runs) == 2


def test_a_json_run_whose_seen_steps_changed_is_a_new_run(data_dir, tmp_path):
    """Same file, same task, but a call already observed now reads otherwise (an agent restarted
    on the same path): not spliced onto the old run."""
    monitor, _ = _monitor()
    traj = mini_run(data_dir, "astropy__astropy-12907")
    path = tmp_path / "run.traj.json"
    watch = TranscriptWatch(path, monitor, fmt="mini-swe-agent")
    _save_atomically(path, saved_after(traj, 3))
    watch.poll()
    changed = saved_after(traj, 4)
    changed["messages"] = [dict(m) for m in changed["messages"]]
    changed["messages"][2]["content"] = "Let me look first.\n\n```bash\nls -la /testbed\n```"
    _save_atomically(path, changed)
    again = watch.poll()
    assert again
    assert again[0].step == 1
    assert len(watch.runs) == 2


def test_a_run_kept_as_a_folder_is_followed_as_it_grows(fixtures_dir, tmp_path):
    """A Harbor trial folder whose ATIF trajectory grows: watched as one run (a folder was never
    read by the watch, so `failfast watch TRIAL/` said it was never readable)."""
    import shutil

    monitor, sink = _monitor()
    trial = tmp_path / "trial"
    shutil.copytree(fixtures_dir / "harbor_constructed_trial", trial)
    atif = trial / "agent" / "trajectory.json"
    whole = json.loads(atif.read_text())
    watch = TranscriptWatch(trial, monitor)
    atif.write_text(json.dumps({**whole, "steps": whole["steps"][:4]}))
    first = watch.poll()
    atif.write_text(json.dumps(whole))
    rest = watch.poll(final=True)
    watch.end()
    assert first
    assert len(watch.runs) == 1
    assert [d.step for d in first + rest] == list(range(1, len(first + rest) + 1))
    assert [e["steps"] for e in _ends(sink)] == [len(first + rest)]


def test_a_users_aider_history_is_watched_at_its_latest_session(fixtures_dir, tmp_path):
    """`.aider.chat.history.md` is appended to across days: the live run is its last session (the
    reader gave the first one, so the session being worked on was never scored)."""
    monitor, _ = _monitor()
    text = (fixtures_dir / "aider_constructed_history.md").read_text()
    second = text.index("# aider chat started at 2025-03-03")
    path = tmp_path / "myrepo" / ".aider.chat.history.md"
    path.parent.mkdir()
    path.write_text(text[:second])  # yesterday's session
    watch = TranscriptWatch(path, monitor)
    assert len(watch.poll()) == 1  # its last reply is held: aider may still append its output
    with open(path, "a") as f:  # today's session opens, then the model replies
        f.write(text[second:])
    today = watch.poll(final=True)
    assert [d.step for d in today] == [2, 1]  # yesterday's last reply, then today's
    assert len(watch.runs) == 2
    assert "/session-1/" in watch.runs[0]
    assert "/session-2/" in watch.runs[1]


def test_a_run_folder_grows_when_its_files_do(fixtures_dir, tmp_path):
    """What `failfast watch --idle` counts as life: a folder's files' bytes, not its own size."""
    import shutil

    from serving.run_identity import written_bytes

    trial = tmp_path / "trial"
    shutil.copytree(fixtures_dir / "harbor_constructed_trial", trial)
    before = written_bytes(trial)
    with open(trial / "agent" / "trajectory.json", "a") as f:
        f.write(" ")
    assert written_bytes(trial) == before + 1
    assert written_bytes(tmp_path / "absent") == -1
