"""Each run's loop-signal matrix (monitor.signals.signal_matrix), computed once per job.

The encoder, every out-of-fold baseline fit and every baseline scoring read the same runs' signal
matrices; recomputing them cost the main job about 10 s per pass over the runs. Entries are keyed
by the run object, held weakly (a freed run leaves the cache), and returned read-only.
"""

from __future__ import annotations

import weakref

import numpy as np

from monitor.signals import signal_matrix
from monitor.types import Trajectory

_MEMO: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def run_signals(traj: Trajectory) -> np.ndarray:
    """`signal_matrix(traj)`, (n_steps, S) float, from the cache after the first call."""
    hit = _MEMO.get(id(traj))
    if hit is not None and hit[0]() is traj:
        return hit[1]
    m = signal_matrix(traj)
    m.setflags(write=False)
    key = id(traj)

    def forget(_: weakref.ref) -> None:
        _MEMO.pop(key, None)

    _MEMO[key] = (weakref.ref(traj, forget), m)
    return m
