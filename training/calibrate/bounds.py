"""Bounds on a run-level false-positive rate from j stopped of n resolved calibration runs.

- `conformal_bound`: split-conformal, group-conditional (Mondrian, per agent). With n resolved
  calibration runs and a threshold that stops j of them, a new exchangeable resolved run of the
  same group is stopped with probability <= (j + 1) / (n + 1) (marginally, over the calibration
  draw). Needs n >= 1/target - 1 resolved runs to certify a target (19 for 5%).
- `fpr_upper_bound`: with probability `confidence` over the calibration draw, the FPR is <= the
  one-sided exact binomial (Clopper-Pearson) upper bound. Stronger, but needs 59 resolved runs
  with 0 stopped to certify 5% at 95%.

Caveat: both treat resolved runs as independent draws. Several runs of one instance are
correlated, so the bounds are optimistic for agents with repeated runs per instance.
"""

from __future__ import annotations

import math

from scipy.stats import beta


def fpr_upper_bound(false_positives: int, resolved: int, *, confidence: float = 0.95) -> float:
    """One-sided exact binomial (Clopper-Pearson) upper bound on a rate from k of n."""
    if resolved <= 0:
        return 1.0
    if false_positives >= resolved:
        return 1.0
    return float(beta.ppf(confidence, false_positives + 1, resolved - false_positives))


def conformal_bound(false_positives: int, resolved: int) -> float:
    """Split-conformal bound on the chance a new resolved run is stopped: (j + 1) / (n + 1)."""
    return min(1.0, (false_positives + 1) / (resolved + 1))


def bound_for(false_positives: int, resolved: int, *, method: str, confidence: float) -> float:
    """The FPR upper bound of `method` ("conformal" or "clopper-pearson")."""
    if method == "conformal":
        return conformal_bound(false_positives, resolved)
    return fpr_upper_bound(false_positives, resolved, confidence=confidence)


def fpr_interval(
    false_positives: int, resolved: int, *, confidence: float = 0.95
) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval on a rate from k of n ((0, 1) when n == 0)."""
    k, n = false_positives, resolved
    if n <= 0:
        return 0.0, 1.0
    a = (1.0 - confidence) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


def resolved_runs_needed(
    target: float,
    *,
    confidence: float = 0.95,
    mode: str = "bound",
    method: str = "clopper-pearson",
) -> int:
    """Fewest resolved runs that can certify `target` (with 0 false positives in bound mode).

    Bound mode, Clopper-Pearson: 1 - (1 - confidence)^(1/n) <= target, e.g. 59 runs for 5% at 95%.
    Bound mode, conformal: 1 / (n + 1) <= target, e.g. 19 runs for 5%.
    Empirical mode: 1/target runs, so that one false positive is within the target's resolution.
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"a target FPR must be in (0, 1), got {target}")
    if mode == "empirical":
        return math.ceil(1.0 / target - 1e-9)
    if method == "conformal":
        return max(1, math.ceil(1.0 / target - 1.0 - 1e-9))
    n = math.ceil(math.log(1.0 - confidence) / math.log(1.0 - target) - 1e-9)
    while fpr_upper_bound(0, n, confidence=confidence) > target:  # guard float rounding
        n += 1
    return n


def allowed_false_positives(
    n_resolved: int,
    target: float,
    *,
    confidence: float,
    mode: str,
    method: str = "clopper-pearson",
) -> int:
    """Largest j with (j / n) <= target (empirical) or bound(j, n) <= target (bound); -1 if none."""
    j = -1
    for cand in range(n_resolved + 1):
        ok = (
            cand / n_resolved <= target + 1e-12
            if mode == "empirical"
            else bound_for(cand, n_resolved, method=method, confidence=confidence) <= target + 1e-12
        )
        if not ok:
            break
        j = cand
    return j
