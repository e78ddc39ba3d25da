"""The check schedule: at which steps a score may stop a run, and the stopping rule itself.

A run is checked at step boundaries k >= min_steps, every `every` steps, and stopped by score at
the first checked k where the last `persist` checked scores (k's included) all reach the stop
threshold. `Streak` applies the rule live, one step at a time (monitor.monitored_run); `first_stop` and
`max_checked_score` apply it to the scores of a recorded run (training, calibration, evaluation),
so thresholds are fitted and evaluated under exactly the rule a session serves.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from monitor.config import StrictModel


class Schedule(StrictModel):
    """When the learned score is checked, and how many checked scores in a row stop a run."""

    min_steps: int = Field(
        default=3, ge=1, description="First prefix length at which a score may stop."
    )
    every: int = Field(
        default=1, ge=1, description="Check the score every this many steps after that."
    )
    persist: int = Field(
        default=2,
        ge=1,
        description=(
            "Stop by score only when this many consecutive checked scores reach the threshold "
            "(1: one checked score is enough)."
        ),
    )

    def schedule(self) -> Schedule:
        """The three schedule fields alone (a PolicyConfig is a Schedule with more fields)."""
        return Schedule(min_steps=self.min_steps, every=self.every, persist=self.persist)

    def single(self) -> Schedule:
        """The same checks with persist 1: for rules that latch and for warn levels."""
        return Schedule(min_steps=self.min_steps, every=self.every, persist=1)

    def is_checked(self, k: int) -> bool:
        """True when the score may stop the run at prefix length k (steps 1..k seen)."""
        return k >= self.min_steps and (k - self.min_steps) % self.every == 0

    def checked_steps(self, n_steps: int) -> np.ndarray:
        """The checked prefix lengths k in 1..n_steps, ascending (int64)."""
        return np.arange(self.min_steps, n_steps + 1, self.every, dtype=np.int64)

    def stop_statistic(self, scores: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Checked prefix lengths and, at each, the smallest of the last `persist` checked scores.

        The first persist - 1 checked prefixes have fewer checked scores behind them and are
        dropped: they can never stop a run.

        Returns:
            (ks, stat): stat[i] >= t iff the run is stopped at ks[i] unless stopped before.
        """
        s = np.asarray(scores, dtype=np.float64)
        ks = self.checked_steps(len(s))
        checked = s[ks - 1]
        if len(checked) < self.persist:
            return ks[:0], checked[:0]
        p = self.persist
        stat = checked[p - 1 :]
        for i in range(1, p):  # the minimum over each window of p, by shifted copies (cheap)
            stat = np.minimum(stat, checked[p - 1 - i : len(checked) - i])
        return ks[p - 1 :], stat

    def first_stop(
        self, scores: Sequence[float] | np.ndarray, threshold: float | None
    ) -> int | None:
        """The prefix length k at which a run with these scores (score after steps 1..k at index
        k-1) is stopped at `threshold`; None when it never is (a None threshold never stops)."""
        if threshold is None:
            return None
        ks, stat = self.stop_statistic(scores)
        hit = np.nonzero(stat >= threshold)[0]
        return int(ks[hit[0]]) if len(hit) else None

    def max_checked_score(self, scores: Sequence[float] | np.ndarray) -> float:
        """The run's stopping statistic: it is stopped at threshold t iff this is >= t
        (-inf when fewer than `persist` prefixes are checked)."""
        _, stat = self.stop_statistic(scores)
        return float(stat.max()) if len(stat) else -math.inf


class Streak:
    """The stopping rule live: fed each step's score in order, it says at which step the last
    `persist` checked scores all reach the threshold (what `first_stop` finds in a recorded
    run). A checked step without a score (the scorer failed) breaks the streak."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.checked: deque[float] = deque(maxlen=schedule.persist)
        """The last `persist` checked scores."""

    def crossed(
        self, k: int, score: float | None, threshold: float | None
    ) -> dict[str, Any] | None:
        """Step k's score seen: the stop's evidence when it stops the run here, else None."""
        if not self.schedule.is_checked(k):
            return None
        if score is None:
            self.checked.clear()
            return None
        self.checked.append(score)
        persist = self.schedule.persist
        # all(>=), as first_stop's `stat >= threshold`: a NaN score or threshold never stops
        if (
            threshold is None
            or len(self.checked) < persist
            or not all(s >= threshold for s in self.checked)
        ):
            return None
        ev: dict[str, Any] = {"score": score, "threshold": threshold}
        if persist > 1:
            ev["checked_scores"] = list(self.checked)
        return ev
