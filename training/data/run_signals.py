"""Each run's loop-signal matrix (monitor.signals.signal_matrix), computed once per job.

The encoder, every out-of-fold baseline fit and every baseline scoring read the same runs' signal
matrices; recomputing them cost the main job about 10 s per pass over the runs. Entries are kept
per run object (training.data.run_memo: a freed run leaves the cache) and returned read-only.
"""

from __future__ import annotations

import numpy as np

from monitor.signals import signal_matrix
from monitor.types import Trajectory
from training.data.run_memo import RunMemo

_MEMO: RunMemo[np.ndarray] = RunMemo()


def _read_only(traj: Trajectory) -> np.ndarray:
    m = signal_matrix(traj)
    m.setflags(write=False)
    return m


def run_signals(traj: Trajectory) -> np.ndarray:
    """`signal_matrix(traj)`, (n_steps, S) float, from the cache after the first call."""
    return _MEMO.get(traj, _read_only)
