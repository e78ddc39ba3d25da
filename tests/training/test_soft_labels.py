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


def test_step_buckets_are_log2_of_the_step() -> None:
    from training.experiments.probe_loss import step_bucket

    got = step_bucket(np.array([1, 2, 3, 4, 5, 8, 9, 16, 17, 64, 65, 500]))
    np.testing.assert_array_equal(got, [0, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7, 7])


def test_centred_subtracts_the_training_mean_of_the_step_bucket() -> None:
    from training.experiments.probe_loss import centred
    from training.pipeline.encode import Encoded

    runs = [_run("a", "t", "A", True), _run("b", "u", "B", False), _run("c", "v", "A", False)]
    hidden = [
        np.array([[1.0], [3.0], [5.0]]),  # steps 1, 2, 3
        np.array([[11.0], [13.0]]),
        np.array([[100.0], [200.0], [300.0], [400.0]]),  # held out: never in the means
    ]
    data = Encoded(runs, hidden, [np.zeros((len(h), 1)) for h in hidden], [0, 0, 0])
    pooled = centred(data, [0, 1], "all")
    np.testing.assert_allclose(pooled.hidden[0][:, 0], [1 - 6, 3 - 8, 0])
    np.testing.assert_allclose(pooled.hidden[2][:, 0], [100 - 6, 200 - 8, 300 - 5, 400 - 5])
    per_agent = centred(data, [0, 1], "agent")
    np.testing.assert_allclose(per_agent.hidden[1][:, 0], [0, 0])
    np.testing.assert_allclose(per_agent.hidden[2][:, 0], [99, 197, 295, 395])
    assert data.hidden[2][0, 0] == 100.0  # the input is left as it was


def test_kept_weights_give_each_run_its_whole_weight_back() -> None:
    from training.experiments.probe_loss import kept_weights

    w = np.array([1.0, 1.0, 2.0, 0.5, 0.5])
    run = np.array([0, 0, 0, 1, 1])
    keep = np.array([True, False, False, False, False])
    got = kept_weights(w, run, keep)
    np.testing.assert_allclose(got[keep], [4.0])  # run 0 had 4 in all
    np.testing.assert_allclose(got[~keep], 0.0)  # run 1 kept nothing: no weight to carry
