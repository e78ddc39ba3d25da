"""Runs of ../shared/data as a harness writes them while they go on, for the watch tests
(tests/serving/test_watch.py, test_watch_writers.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

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
