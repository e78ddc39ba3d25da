"""Runs of ../shared/data as a harness writes them while they go on, and a Monitor that records
what it was shown, for the watch tests (tests/serving/test_watch.py, test_watch_writers.py,
test_watch_sessions.py)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from monitor.decision_log import DecisionLog
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from serving.transcripts import read_transcript
from serving.watch import TranscriptWatch

MINI = Path("swe-bench-verified") / "mini-swe-agent-gemini-3-pro" / "trajs"


def mini_run(data_dir: Path, instance: str) -> dict:
    """A mini-swe-agent run of ../shared/data, as its `.traj.json` document."""
    return json.loads(gzip.open(data_dir / MINI / instance / f"{instance}.traj.json.gz").read())


def saved_after(traj: dict, k: int) -> dict:
    """The run as mini-swe-agent saves it after its k-th step: system and task messages, then a
    model answer and its observation per step (no exit status yet)."""
    return {**traj, "messages": traj["messages"][: 2 + 2 * k], "info": {}}


def append_lines(path: Path, lines: list[str], poll) -> None:  # noqa: ANN001 - watch.poll
    """Write `lines` to `path` one at a time, as a stream harness does, polling after each."""
    for line in lines:
        with open(path, "a") as f:
            f.write(line)
        poll()


class Recorder:
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


def calls_of(path: Path, fmt: str) -> list[tuple]:
    """The calls of the finished transcript, as Recorder records what it was shown."""
    steps = read_transcript(path, fmt).steps
    return [(s.kind, s.tool, s.action, s.observation, s.is_error) for s in steps]


def appended(src: Path, path: Path, fmt: str) -> tuple[Recorder, TranscriptWatch]:
    """`src` written to `path` a line at a time as a stream harness writes it, the watch polling
    after each line, then the run ended: (the recorder, the watch)."""
    rec = Recorder()
    watch = TranscriptWatch(path, rec, fmt=fmt)
    append_lines(path, src.read_text().splitlines(True), watch.poll)
    watch.poll(final=True)
    watch.end()
    return rec, watch
