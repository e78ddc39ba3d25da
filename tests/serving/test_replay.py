"""Whole-run replay (serving.runs) stops where the bundle's schedule says, persistence included."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.policy import PolicyConfig
from monitor.schedule import Schedule
from monitor.thresholds import Thresholds
from monitor.types import Step, Trajectory
from serving.bundle import Bundle
from serving.manifest import Manifest
from serving.runs import score_transcript

SCORES = [0.1, 0.8, 0.9, 0.3, 0.8, 0.85, 0.9, 0.2]


class FakeScorer:
    """Fixed scores, one threshold, the policy of a bundle."""

    def __init__(self, bundle: Bundle) -> None:
        self.policy = bundle.policy

    def score_run(self, traj: Trajectory) -> list[float]:
        return SCORES[: len(traj.steps)]

    def thresholds(self, agent: str | None, source: str = "") -> Thresholds:
        return Thresholds(0.75, 0.5, "agent")

    def score_served(self, traj: Trajectory) -> tuple[list[float], Thresholds]:
        return self.score_run(traj), self.thresholds(traj.agent, traj.source)


@pytest.mark.parametrize(("persist", "want"), [(1, 2), (3, 7)])
def test_replay_stops_at_the_schedules_first_stop(persist: int, want: int) -> None:
    schedule = Schedule(min_steps=2, every=1, persist=persist)
    bundle = Bundle(Path("b"), Manifest(policy=PolicyConfig.model_validate(schedule.model_dump())))
    steps = [
        Step(index=i, tool="bash", action=f"cmd {i}", observation=f"o{i}")
        for i in range(len(SCORES))
    ]
    traj = Trajectory(id="r", instance_id="i", agent="a", source="s", task="t", steps=steps)
    result = score_transcript(FakeScorer(bundle), traj)
    assert schedule.first_stop(SCORES, 0.75) == want
    assert result.stop is not None
    assert result.stop.step == want
