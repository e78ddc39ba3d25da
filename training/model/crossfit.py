"""Out-of-fold monitor scores of the training runs, to calibrate thresholds on more runs.

Split-conformal thresholds are order statistics of the resolved calibration runs' scores: with
the ~25 resolved validation runs an agent like CodeR has, a 5 % run-level FPR can only be
certified by the largest resolved score, so the monitor almost never stops such an agent.
`thresholds.calibration: val+train-oof` adds the training runs as calibration runs, scored
without ever having been trained on: the training runs are split into K folds by instance
(every run of an instance, whatever the agent, falls in one fold), the probe is refitted on
K-1 folds with the (C, hidden scale) already picked on validation, and the held-out fold is
scored. The served head (fitted on every training run) is restored afterwards.

Assumption (written down because it is one): an out-of-fold score stands for the served head's
score on an unseen run. The fold heads see (K-1)/K of the training runs, so their scores are a
little noisier; the test split measures whether the realized FPR still holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from monitor.types import Trajectory
from training.data.folds import instance_folds
from training.model.classifier import PrefixClassifier
from training.model.probe import ProbeRows, fit_probe, head_scores

log = logging.getLogger(__name__)


def out_of_fold_scores(
    model: PrefixClassifier,
    runs: Sequence[Trajectory],
    hidden: Sequence[np.ndarray],
    signals: Sequence[np.ndarray],
    example_run: np.ndarray,
    rows: ProbeRows,
    *,
    C: float,
    hidden_scale: float,
    max_focus: float = 0.0,
    rank_weight: float = 0.0,
    agent_columns: bool = True,
    folds: int = 5,
    seed: int = 0,
) -> list[np.ndarray]:
    """Per run, the scores of every prefix from a probe fitted without that run's instance.

    Args:
        model: the classifier whose fitted head is kept (saved before, restored after).
        runs, hidden, signals: the training runs and their per-step boundary features / signals.
        example_run, rows: the probe's training examples: the run index of each, and its rows.
        C, hidden_scale, max_focus, rank_weight, agent_columns: the probe settings.
        folds, seed: the instance folds.
    """
    fold = instance_folds(runs, folds, seed=seed)
    saved = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("backbone.")}
    saved_text = model.text_head
    out: list[np.ndarray | None] = [None] * len(runs)
    try:
        for f in range(folds):
            keep = fold[example_run] != f
            fit_probe(
                model,
                rows.take(keep),
                C=C,
                hidden_scale=hidden_scale,
                agent_columns=agent_columns,
                max_focus=max_focus,
                rank_weight=rank_weight,
            )
            held = np.flatnonzero(fold == f)
            for i in held.tolist():
                out[i] = head_scores(model, hidden[i], signals[i], runs[i])
            log.info("cross-fit fold %d/%d: %d held-out runs scored", f + 1, folds, len(held))
    finally:
        model.load_state_dict(saved, strict=False)
        model.text_head = saved_text
    return [s if s is not None else np.zeros(0) for s in out]
