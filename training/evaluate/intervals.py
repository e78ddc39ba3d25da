"""Per-group metrics of cross-fitted records with bootstrap intervals.

Every run was scored once by a model that never saw its task, so the records of all folds are
pooled and reported per group (agent or source). Intervals are 95% percentile bootstrap
intervals over runs resampled within (group, label), so each resample keeps the group's failure
rate; paired differences (monitor minus a baseline) resample the same runs for both.

A rule's outcome on a run is reduced to two numbers, whether it stopped a resolved run and the
tokens it saved, so a bootstrap draw is a weighted sum (no stop is re-simulated).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from training.data.records import RunRecord

FRACTIONS = (0.25, 0.5, 0.75)


@dataclass
class Outcome:
    """What one stop rule did to each run of a group (arrays aligned with the group's runs)."""

    resolved: np.ndarray  # (n,) bool
    stopped: np.ndarray  # (n,) bool
    saved: np.ndarray  # (n,) tokens after the stop point
    total: np.ndarray  # (n,) tokens of the run

    @classmethod
    def of(cls, records: Sequence[RunRecord], stops: Mapping[str, int | None]) -> Outcome:
        res = np.array([bool(r.resolved) for r in records], dtype=bool)
        at = [stops.get(r.run_id) for r in records]
        saved = np.array(
            [
                float(r.step_tokens[k:].sum()) if k is not None else 0.0
                for r, k in zip(records, at, strict=True)
            ]
        )
        total = np.array([float(r.step_tokens.sum()) for r in records])
        return cls(res, np.array([k is not None for k in at], dtype=bool), saved, total)

    def rates(self, w: np.ndarray | None = None) -> tuple[float, float, float]:
        """(realized FPR, recall, tokens saved) with run weights `w` (bootstrap counts)."""
        w = np.ones(len(self.resolved)) if w is None else w
        res_w = float(w[self.resolved].sum())
        fail_w = float(w[~self.resolved].sum())
        fpr = float(w[self.resolved & self.stopped].sum()) / res_w if res_w else math.nan
        recall = float(w[~self.resolved & self.stopped].sum()) / fail_w if fail_w else math.nan
        tot = float((w * self.total).sum())
        return fpr, recall, float((w * self.saved).sum()) / tot if tot else math.nan


def resample_weights(labels: np.ndarray, n: int, *, seed: int = 0) -> np.ndarray:
    """(n, len(labels)) bootstrap counts, runs drawn with replacement within each label."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, len(labels)))
    for value in np.unique(labels):
        idx = np.flatnonzero(labels == value)
        for b in range(n):
            out[b] += np.bincount(rng.choice(idx, len(idx)), minlength=len(labels))
    return out


def percentile_ci(values: Sequence[float] | np.ndarray) -> list[float | None]:
    """The 2.5 / 97.5 percentiles of finite values ([None, None] when there are none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return [None, None]
    lo, hi = np.percentile(v, [2.5, 97.5])
    return [float(lo), float(hi)]


def _auroc(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> float:
    """Weighted AUROC (ties count half): P(score of a failing run > score of a resolved run)."""
    pos = (y == 1).astype(float) * w
    neg = (y == 0).astype(float) * w
    if not pos.sum() or not neg.sum():
        return math.nan
    _, inverse = np.unique(s, return_inverse=True)
    p_v = np.bincount(inverse, weights=pos)  # positive weight per distinct score, ascending
    n_v = np.bincount(inverse, weights=neg)
    below = np.cumsum(n_v) - n_v  # negative weight strictly below each distinct score
    return float((p_v * (below + 0.5 * n_v)).sum() / (pos.sum() * neg.sum()))


def scores_at(records: Sequence[RunRecord], scorer: str, fraction: float) -> np.ndarray:
    """Each run's score at fraction f of its length (prefix k = ceil(f * n))."""
    return np.array(
        [r.scores[scorer][max(1, math.ceil(fraction * r.n_steps)) - 1] for r in records]
    )


def auroc_with_ci(
    records: Sequence[RunRecord], scorer: str, weights: np.ndarray
) -> dict[str, dict[str, object]]:
    """AUROC at 25 / 50 / 75 % of each run (positive = unresolved) with bootstrap intervals."""
    y = np.array([0 if r.resolved else 1 for r in records])
    out: dict[str, dict[str, object]] = {}
    for f in FRACTIONS:
        s = scores_at(records, scorer, f)
        point = _auroc(y, s, np.ones(len(y)))
        boot = [_auroc(y, s, w) for w in weights]
        out[f"{f:g}"] = {"auroc": point, "ci": percentile_ci(boot)}
    return out


def rule_with_ci(outcome: Outcome, weights: np.ndarray) -> dict[str, object]:
    """Realized FPR, recall and tokens saved of one rule, with bootstrap intervals."""
    fpr, recall, saved = outcome.rates()
    boot = np.array([outcome.rates(w) for w in weights])
    return {
        "fpr": fpr,
        "fpr_ci": percentile_ci(boot[:, 0]),
        "recall": recall,
        "saved": saved,
        "saved_ci": percentile_ci(boot[:, 2]),
        "resolved": int(outcome.resolved.sum()),
        "stopped_resolved": int((outcome.resolved & outcome.stopped).sum()),
    }


def paired_saved_delta(a: Outcome, b: Outcome, weights: np.ndarray) -> dict[str, object]:
    """Tokens saved by rule a minus rule b on the same runs, with a paired bootstrap interval."""
    delta = a.rates()[2] - b.rates()[2]
    boot = [a.rates(w)[2] - b.rates(w)[2] for w in weights]
    return {"delta": delta, "ci": percentile_ci(boot)}


def by_group(records: Sequence[RunRecord], key: Callable[[RunRecord], str]) -> dict[str, list[int]]:
    """Indices of the records of each group."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        out.setdefault(key(r), []).append(i)
    return dict(sorted(out.items()))
