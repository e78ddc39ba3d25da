"""Realized false-positive rate of a live monitor, watched with an anytime-valid test.

A harness reports each finished run's verdict; for a resolved run the service knows whether the
monitor asked to stop it (a false positive if the harness had obeyed; harnesses that obey every
stop learn this only from runs they let continue, e.g. a shadow sample). The share of resolved
runs that were stopped is the realized run-level FPR.

Checking a fixed-sample interval after every run would raise false alarms at a rate that grows
with the length of the stream, so the flag uses a sequential test that stays valid however long
one watches (Ville's inequality): for each rate p0, the likelihood ratio of "the FPR is
`ratio` x p0" against "it is p0",

    E_n(p0) = ratio^fp * ((1 - ratio * p0) / (1 - p0))^(n - fp)    (n resolved runs, fp stopped)

is a nonnegative supermartingale whenever the true FPR is <= p0, so P(ever E_n(p0) >= 1/alpha)
<= alpha. The lower end of the confidence sequence is the smallest p0 not yet rejected; drift is
flagged once that lower end passes the target, i.e. once E_n(target) >= 1/alpha. The upper end
comes from the mirror test (alternative p0 / ratio).

alpha = 0.1 by default: simulated at a 5% target, the flag rises after a median of 86 resolved
runs when the true FPR is 10% (58% of streams within 100), and within 1,000 resolved runs at the
target in 8% of streams (alpha = 0.05: median 119, 5%); `bench/bench_drift.py` measures it
through the service.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _log_e(fp: int, n: int, p0: float, p1: float) -> float:
    """log of the likelihood ratio of rate p1 against p0 after fp stops among n resolved runs."""
    if p0 <= 0.0:
        return math.inf if fp > 0 else 0.0
    if p0 >= 1.0 or p1 >= 1.0:
        return -math.inf if n > fp else 0.0
    return fp * math.log(p1 / p0) + (n - fp) * math.log((1.0 - p1) / (1.0 - p0))


def _bisect(pred: Any, lo: float, hi: float, iters: int = 60) -> float:
    """The boundary in [lo, hi] where the monotone predicate turns from True to False."""
    for _ in range(iters):
        mid = (lo + hi) / 2.0
        if pred(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class FprWatch:
    """The realized FPR of one threshold group (an agent) over the runs it watched.

    Attributes:
        target: the FPR the thresholds were set for.
        alpha: chance of ever flagging while the true FPR is at or below the target.
        ratio: the alternative the test is most sensitive to (ratio x target).
        resolved: resolved runs reported.
        stopped: of those, runs the monitor asked to stop.
        runs: all runs reported (resolved or not).
        flagged_at: resolved-run count at which drift was first flagged (None: never).
    """

    target: float
    alpha: float = 0.1
    ratio: float = 2.0
    resolved: int = 0
    stopped: int = 0
    runs: int = 0
    flagged_at: int | None = None

    def add(self, *, resolved: bool, stopped: bool) -> bool:
        """Record one finished run; True when this run raised the drift flag."""
        self.runs += 1
        if not resolved:
            return False
        self.resolved += 1
        self.stopped += int(stopped)
        if self.flagged_at is None and self.drift:
            self.flagged_at = self.resolved
            return True
        return False

    @property
    def fpr(self) -> float | None:
        """Stopped resolved runs / resolved runs (None before the first resolved run)."""
        return self.stopped / self.resolved if self.resolved else None

    @property
    def drift(self) -> bool:
        """The confidence sequence's lower end is above the target."""
        return self.lower > self.target

    @property
    def lower(self) -> float:
        """Lower end of the anytime-valid (1 - alpha) confidence sequence of the FPR."""
        fp, n, cut = self.stopped, self.resolved, math.log(1.0 / self.alpha)
        if fp == 0:
            return 0.0
        hi = min(1.0 / self.ratio, 1.0) - 1e-12
        return _bisect(lambda p: _log_e(fp, n, p, self.ratio * p) >= cut, 0.0, hi)

    @property
    def upper(self) -> float:
        """Upper end of the anytime-valid (1 - alpha) confidence sequence of the FPR."""
        fp, n, cut = self.stopped, self.resolved, math.log(1.0 / self.alpha)
        if fp == n:
            return 1.0
        return 1.0 - _bisect(
            lambda q: _log_e(fp, n, 1.0 - q, (1.0 - q) / self.ratio) >= cut, 0.0, 1.0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "runs": self.runs,
            "resolved": self.resolved,
            "stopped_resolved": self.stopped,
            "realized_fpr": self.fpr,
            "interval": [self.lower, self.upper],
            "alpha": self.alpha,
            "drift": self.drift,
            "flagged_at_resolved": self.flagged_at,
        }
