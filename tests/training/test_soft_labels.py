"""The soft-label screen of training.experiments.probe_loss: each run's target moves toward the
failure rate of the other runs of its task (or of its agent's other attempts), never its own."""

from __future__ import annotations

import numpy as np

from monitor.types import Trajectory
from training.experiments.probe_loss import soft_targets


def _run(rid: str, inst: str, agent: str, resolved: bool) -> Trajectory:
    return Trajectory(id=rid, instance_id=inst, agent=agent, resolved=resolved)


def test_soft_targets_blend_the_run_with_the_other_runs_of_its_task() -> None:
    runs = [
        _run("a1", "t", "A", False),
        _run("a2", "t", "A", True),
        _run("b1", "t", "B", True),
        _run("c1", "u", "C", False),  # alone on its task: its own label
    ]
    np.testing.assert_allclose(soft_targets(runs, 0.0), [1, 0, 0, 1])
    np.testing.assert_allclose(soft_targets(runs, 1.0), [0.0, 0.5, 0.5, 1.0])
    np.testing.assert_allclose(soft_targets(runs, 0.5), [0.5, 0.25, 0.25, 1.0])
    # its agent's other attempts only: b1 has none
    np.testing.assert_allclose(soft_targets(runs, 1.0, "agent"), [0.0, 1.0, 0.0, 1.0])
