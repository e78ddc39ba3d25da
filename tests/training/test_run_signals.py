"""training.data.run_signals: the signal matrix once per run, read-only, forgotten with the run."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from monitor.signals import signal_matrix
from training.data import run_signals as rs

from .conftest import make_runs


def test_signals_are_computed_once_and_dropped_with_the_run():
    runs = make_runs(2)
    first = rs.run_signals(runs[0])
    np.testing.assert_array_equal(first, signal_matrix(runs[0]))
    assert rs.run_signals(runs[0]) is first
    with pytest.raises(ValueError):
        first[0, 0] = 1.0  # shared between callers: nobody may write into it
    assert runs[0] in rs._MEMO
    key = id(runs[0])
    del runs[0], first
    gc.collect()
    assert key not in rs._MEMO._entries
