"""Small numeric helpers the scorers share (numpy only)."""

from __future__ import annotations

import numpy as np


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    """Numerically stable 1 / (1 + exp(-x)), elementwise (float64)."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)) elementwise, p clipped to [1e-6, 1 - 1e-6] (float64)."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.asarray(np.log(q / (1 - q)))
