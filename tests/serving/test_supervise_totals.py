"""`failfast supervise` counts an attempt's usage as soon as the agent has ended: a failure while
the stop's diff and packet are written still leaves it in the summary's totals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from monitor.types import Decision, RestartPacket
from serving.supervise import SuperviseConfig, Supervisor
from tests.git_helpers import git_repo

STANDIN = Path(__file__).with_name("standin_agent.py")


class _StopAtFour:
    """A monitor session that stops the run at its fourth step."""

    def __init__(self) -> None:
        self.n = 0

    def observe(self, step):  # noqa: ANN001 - a monitor.types.Step
        self.n += 1
        if self.n >= 4:
            return Decision(
                "stop", "stuck_pattern", step=self.n, restart=RestartPacket(summary="s")
            )
        return Decision("continue", step=self.n)

    def end(self) -> None:
        return None


class _Monitor:
    def start(self, *args, **kwargs) -> _StopAtFour:  # noqa: ANN002, ANN003
        return _StopAtFour()


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_usage_of_a_stopped_attempt_survives_a_failing_packet(tmp_path, monkeypatch, error):
    def failing_packet(*args, **kwargs):  # noqa: ANN002, ANN003
        raise error

    monkeypatch.setattr("serving.supervise.attempt.write_packet", failing_packet)
    repo = git_repo(tmp_path / "repo")
    transcript, summary = tmp_path / "run.jsonl", tmp_path / "summary.json"
    cmd = [sys.executable, str(STANDIN), "loop", str(transcript), str(repo), str(tmp_path / "seen")]
    cmd += ["{restart}", "--steps", "50", "--delay", "0.05"]
    cfg = SuperviseConfig(
        cmd=cmd, transcript=transcript, summary=summary, workdir=repo, interval=0.1, grace=2
    )
    with pytest.raises(type(error)):
        Supervisor(cfg, _Monitor(), say=lambda _line: None).run()
    totals = json.loads(summary.read_text())["totals"]
    assert totals["steps"] >= 4
    assert totals["tokens"] > 0
