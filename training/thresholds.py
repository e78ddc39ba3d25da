"""Run-level stop thresholds with a held-out FPR bound (see shared DESIGN.md, "Definitions").

A run is stopped at the first checked prefix k (k >= min_steps, (k - min_steps) % every == 0) at
which the last `persist` checked scores (k's included) all reach the threshold (persist = 1: k's
score alone). So a run is stopped at threshold t exactly when its stopping statistic, the largest
over checked k of the smallest of the last `persist` checked scores (`max_checked_score`), is >= t,
and the run-level false-positive rate (stopped resolved runs / resolved runs) is a step function of
t over those per-run statistics. Persistence makes one spiky score on a resolved run harmless.

`pick_thresholds` chooses, on the validation records only, per agent and pooled, for each target
FPR the lowest threshold whose FPR on those runs is within the target: `empirical` compares the
observed rate, `bound` (default) the one-sided exact binomial (Clopper-Pearson) upper bound at
`confidence`. When even 0 false positives could not certify a target (too few resolved runs), the
target is refused with a message naming how many resolved runs are needed. Serving looks a
threshold up per agent and falls back to the pooled one (`lookup_threshold`).

Two bounds (`method`):
- `conformal` (default): split-conformal, group-conditional (Mondrian, per agent). With n resolved
  calibration runs and a threshold that stops j of them, a new exchangeable resolved run of the same
  agent is stopped with probability <= (j + 1) / (n + 1) (marginally, over the calibration draw).
  Needs n >= 1/target - 1 resolved runs (19 for 5%), which every agent here has.
- `clopper-pearson`: with probability `confidence` over the calibration draw, the FPR is <= the
  one-sided exact binomial upper bound. Stronger, but needs 59 resolved runs with 0 stopped to
  certify 5% at 95%: more than CodeR or SWE-agent have after a test split is held out.

Caveat: the bound treats resolved runs as independent draws. Several runs of one instance
(AutoCodeRover 5, SWE-agent 3) are correlated, so the bound is optimistic for those agents.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field
from scipy.stats import beta

from monitor.config import StrictModel
from training.records import RunRecord

DEFAULT_TARGETS = (0.01, 0.02, 0.05, 0.1, 0.25)
POOLED = "pooled"


class ThresholdConfig(StrictModel):
    """How stop and warn thresholds are picked from validation records."""

    mode: Literal["bound", "empirical"] = "bound"
    """`bound`: an upper bound on the run-level FPR (see `method`) must be within the target;
    `empirical`: the observed validation FPR must be."""
    method: Literal["conformal", "clopper-pearson"] = "conformal"
    """The bound of `bound` mode: marginal split-conformal (j+1)/(n+1), or the one-sided
    Clopper-Pearson bound at `confidence`."""
    confidence: float = Field(0.95, gt=0.0, lt=1.0)
    """Confidence of the one-sided upper bound."""
    targets: list[float] = Field(default_factory=lambda: list(DEFAULT_TARGETS))
    """Run-level FPR targets to pick a threshold for."""
    warn_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    """Share of resolved validation runs allowed to see a warn (the warn level's empirical FPR)."""
    group_by: Literal["agent", "source"] = "agent"
    """Record field the thresholds are conditioned on (group-conditional / Mondrian)."""
    scorer: str = "monitor"
    """Which score in RunRecord.scores the thresholds apply to."""
    calibration: Literal["val", "val+train-oof"] = "val"
    """Calibration runs of `failfast train`: the validation split, or the validation split plus
    the training runs scored out of fold (training.crossfit; more resolved runs per agent, so
    lower certified thresholds for agents with few)."""
    crossfit_folds: int = Field(5, ge=2)
    """Instance folds of `val+train-oof`."""


def target_key(target: float) -> str:
    """The JSON key of a target: 0.05 -> "0.05", 0.1 -> "0.1"."""
    return f"{target:g}"


def checked_steps(n_steps: int, *, min_steps: int = 1, every: int = 1) -> np.ndarray:
    """Prefix lengths k in 1..n_steps the schedule checks (k >= min_steps, every `every`)."""
    if min_steps < 1 or every < 1:
        raise ValueError(f"min_steps and every must be >= 1 (got {min_steps}, {every})")
    return np.arange(min_steps, n_steps + 1, every)


def schedule_of(thresholds: dict[str, Any] | None) -> dict[str, int]:
    """The check schedule {min_steps, every, persist} of a thresholds.json dict; a missing key
    means 1 (files written before persistence existed stop on one checked score)."""
    sched = (thresholds or {}).get("schedule") or {}
    return {key: int(sched.get(key, 1)) for key in ("min_steps", "every", "persist")}


def persisted_scores(
    scores: Sequence[float] | np.ndarray,
    *,
    min_steps: int = 1,
    every: int = 1,
    persist: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Checked prefix lengths and, at each, the smallest of the last `persist` checked scores.

    The first persist - 1 checked prefixes have fewer than `persist` checked scores behind them
    and are dropped: they can never stop a run.

    Returns:
        (ks, stat): stat[i] >= t iff the run would be stopped at ks[i] if not stopped before.
    """
    if persist < 1:
        raise ValueError(f"persist must be >= 1 (got {persist})")
    s = np.asarray(scores, dtype=np.float64)
    ks = checked_steps(len(s), min_steps=min_steps, every=every)
    checked = s[ks - 1]
    if len(checked) < persist:
        return ks[:0], checked[:0]
    if persist == 1:
        return ks, checked
    win = np.lib.stride_tricks.sliding_window_view(checked, persist)
    return ks[persist - 1 :], win.min(axis=1)


def first_stop(
    scores: Sequence[float] | np.ndarray,
    threshold: float | None,
    *,
    min_steps: int = 1,
    every: int = 1,
    persist: int = 1,
) -> int | None:
    """The prefix length k at which a run is stopped, or None when it is never stopped.

    Args:
        scores: score after steps 1..k at index k-1.
        threshold: stop when the last `persist` checked scores are all >= threshold; None never
            stops.
        min_steps: first prefix length that may be checked.
        every: check every `every` steps from min_steps on.
        persist: how many consecutive checked scores must reach the threshold (1: one is enough).
    """
    if threshold is None:
        return None
    ks, stat = persisted_scores(scores, min_steps=min_steps, every=every, persist=persist)
    hit = np.nonzero(stat >= threshold)[0]
    return int(ks[hit[0]]) if len(hit) else None


def max_checked_score(
    scores: Sequence[float] | np.ndarray,
    *,
    min_steps: int = 1,
    every: int = 1,
    persist: int = 1,
) -> float:
    """The run's stopping statistic: the largest, over checked prefixes, of the smallest of the
    last `persist` checked scores (-inf when fewer than `persist` prefixes are checked). The run is
    stopped at threshold t iff this is >= t."""
    _, stat = persisted_scores(scores, min_steps=min_steps, every=every, persist=persist)
    return float(stat.max()) if len(stat) else -math.inf


def run_false_positive_rate(
    records: Iterable[RunRecord],
    threshold: float | None,
    *,
    scorer: str = "monitor",
    min_steps: int = 1,
    every: int = 1,
    persist: int = 1,
) -> float:
    """Stopped resolved runs / resolved runs (NaN without resolved runs)."""
    kw = {"min_steps": min_steps, "every": every, "persist": persist}
    stops = [
        first_stop(r.scores[scorer], threshold, **kw) is not None for r in records if r.resolved
    ]
    return float(np.mean(stops)) if stops else math.nan


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


def threshold_for_count(
    resolved_max: np.ndarray, j: int, all_max: np.ndarray | None = None
) -> float:
    """The lowest threshold at which at most `j` of the resolved runs are stopped.

    It lies just above the (j+1)-th largest resolved maximum: halfway to the next larger run
    maximum (resolved or not) so a small score drift (ONNX vs torch) does not flip the count.
    """
    m = np.sort(np.asarray(resolved_max, dtype=np.float64))[::-1]
    if j >= len(m):
        lowest = np.concatenate([m, np.asarray(all_max if all_max is not None else [])])
        return float(np.min(lowest)) if len(lowest) else 0.0
    u = m[j]
    pool = np.concatenate([m, np.asarray(all_max if all_max is not None else [], dtype=np.float64)])
    if not np.isfinite(u):
        # at most j resolved runs ever reach a check: any finite threshold stops at most j of them
        finite = pool[np.isfinite(pool)]
        return float(finite.min()) if len(finite) else 1.0
    above = pool[pool > u]
    if len(above):
        t = (u + float(above.min())) / 2.0
        return t if t > u else float(np.nextafter(u, math.inf))
    upper = 1.0 if u < 1.0 else u + 1.0  # scores are probabilities unless they exceed 1
    return float(u + (upper - u) / 2.0)


def _method_name(cfg: ThresholdConfig) -> str:
    return cfg.method if cfg.mode == "bound" else "empirical"


def _group_entry(
    recs: list[RunRecord],
    cfg: ThresholdConfig,
    *,
    min_steps: int,
    every: int,
    persist: int,
    pooled_warn: float | None,
) -> dict[str, Any]:
    kw = {"min_steps": min_steps, "every": every}
    maxima = np.array(
        [max_checked_score(r.scores[cfg.scorer], **kw, persist=persist) for r in recs]
    )
    # The warn level applies to single scores (no persistence), as a live session warns.
    single = np.array([max_checked_score(r.scores[cfg.scorer], **kw) for r in recs])
    res = np.array([bool(r.resolved) for r in recs])
    rmax, amax = maxima[res], maxima
    n = int(res.sum())
    stop: dict[str, Any] = {}
    thresholds = []
    for target in cfg.targets:
        need = resolved_runs_needed(
            target, confidence=cfg.confidence, mode=cfg.mode, method=cfg.method
        )
        if n < need:
            stop[target_key(target)] = {
                "refused": (
                    f"cannot certify run-level FPR <= {target:g} ({_method_name(cfg)}, "
                    f"{cfg.confidence:g} confidence): needs at least {need} resolved validation runs, "
                    f"has {n}"
                )
            }
            continue
        j = allowed_false_positives(
            n, target, confidence=cfg.confidence, mode=cfg.mode, method=cfg.method
        )
        t = threshold_for_count(rmax, j, amax)
        fp = int((rmax >= t).sum())
        thresholds.append(t)
        stop[target_key(target)] = {
            "threshold": float(t),
            "fpr_val": fp / n,
            "fpr_upper_bound": (
                bound_for(fp, n, method=cfg.method, confidence=cfg.confidence)
                if cfg.mode == "bound"
                else fpr_upper_bound(fp, n, confidence=cfg.confidence)
            ),
        }
    if n:
        j = math.floor(cfg.warn_fraction * n + 1e-9)
        warn = threshold_for_count(single[res], j, single)
    else:
        warn = pooled_warn if pooled_warn is not None else 0.5
    if thresholds:
        warn = min(warn, min(thresholds))
    return {"n_resolved": n, "stop": stop, "warn": float(warn)}


def pick_thresholds(
    records: Sequence[RunRecord],
    *,
    targets: Sequence[float] = DEFAULT_TARGETS,
    mode: Literal["bound", "empirical"] = "bound",
    method: Literal["conformal", "clopper-pearson"] = "conformal",
    confidence: float = 0.95,
    min_steps: int = 1,
    every: int = 1,
    persist: int = 1,
    group_by: Literal["agent", "source"] = "agent",
    warn_fraction: float = 0.25,
    scorer: str = "monitor",
) -> dict[str, Any]:
    """Pick stop thresholds per target, per agent and pooled, on validation records.

    Args:
        records: validation-split records (never the training or test split).
        targets: run-level FPR targets.
        mode: "bound" (an upper bound within target) or "empirical".
        method: the bound of bound mode: "conformal" or "clopper-pearson".
        confidence: confidence of the bound.
        min_steps, every, persist: the check schedule used at serving time (monitor.policy).
        group_by: record field the thresholds are conditioned on.
        warn_fraction: share of resolved runs that may see a warn.
        scorer: which score of the records to use.

    Returns:
        The thresholds.json dict (MODEL_CONTRACT.md): mode, confidence, method, schedule,
        group_by (what the per_agent keys name: agent families or sources), targets,
        per_agent {group: {n_resolved, stop {target: {threshold, fpr_val, fpr_upper_bound} |
        {refused}}, warn}}, pooled (same shape). Refused per-agent targets fall back to pooled.
    """
    cfg = ThresholdConfig(
        mode=mode,
        method=method,
        confidence=confidence,
        targets=list(targets),
        warn_fraction=warn_fraction,
        group_by=group_by,
        scorer=scorer,
    )
    recs = [r for r in records if cfg.scorer in r.scores]
    if not recs:
        raise ValueError(
            f"no validation records with a {cfg.scorer!r} score to pick thresholds from"
        )
    sched = {"min_steps": int(min_steps), "every": int(every), "persist": int(persist)}
    pooled = _group_entry(recs, cfg, **sched, pooled_warn=None)
    groups: dict[str, list[RunRecord]] = {}
    for r in recs:
        groups.setdefault(str(getattr(r, cfg.group_by)), []).append(r)
    per_agent = {
        g: _group_entry(rs, cfg, **sched, pooled_warn=pooled["warn"])
        for g, rs in sorted(groups.items())
    }
    return {
        "mode": cfg.mode,
        "confidence": cfg.confidence,
        "method": _method_name(cfg),
        "schedule": sched,
        # what the per_agent keys are: serving callers pass this field of their run as `agent`
        "group_by": cfg.group_by,
        "targets": [float(t) for t in cfg.targets],
        "per_agent": per_agent,
        "pooled": pooled,
    }


def lookup_threshold(
    thresholds: dict[str, Any], agent: str | None, target: float
) -> tuple[float | None, str]:
    """The stop threshold for `agent` at `target`, and where it came from.

    Rule (MODEL_CONTRACT.md): the agent's own threshold when it has one for this target; else the
    pooled one ("pooled", or "pooled-unknown-agent" when the agent was not calibrated); refused
    everywhere -> (None, "refused"): no stop by score, warn only.
    """

    def find(entry: dict[str, Any] | None) -> float | None:
        for key, val in ((entry or {}).get("stop") or {}).items():
            if abs(float(key) - target) < 1e-9 and "threshold" in val:
                return float(val["threshold"])
        return None

    per_agent = thresholds.get("per_agent") or {}
    own = find(per_agent.get(agent)) if agent is not None else None
    if own is not None:
        return own, "agent"
    pooled = find(thresholds.get("pooled"))
    if pooled is not None:
        return pooled, "pooled" if agent in per_agent else "pooled-unknown-agent"
    return None, "refused"


class ThresholdPicker:
    """Fitted form of `pick_thresholds` (scikit-learn style).

    Attributes (after fit):
        thresholds_: the thresholds.json dict.
        n_resolved_: resolved validation runs per group.
    """

    def __init__(
        self,
        config: ThresholdConfig | None = None,
        *,
        min_steps: int = 1,
        every: int = 1,
        persist: int | None = None,
    ):
        """persist None: monitor.policy.PolicyConfig's default (what a bundle will serve with)."""
        from monitor.policy import PolicyConfig

        self.config = config or ThresholdConfig()
        self.min_steps = min_steps
        self.every = every
        self.persist = (
            int(PolicyConfig.model_fields["persist"].default) if persist is None else persist
        )

    def fit(self, records: Sequence[RunRecord]) -> ThresholdPicker:
        """Pick thresholds on validation records."""
        c = self.config
        self.thresholds_ = pick_thresholds(
            records,
            targets=c.targets,
            mode=c.mode,
            method=c.method,
            confidence=c.confidence,
            min_steps=self.min_steps,
            every=self.every,
            persist=self.persist,
            group_by=c.group_by,
            warn_fraction=c.warn_fraction,
            scorer=c.scorer,
        )
        self.n_resolved_ = {g: e["n_resolved"] for g, e in self.thresholds_["per_agent"].items()}
        return self

    def threshold_for(self, agent: str | None, target: float) -> float | None:
        """Stop threshold for an agent at a target (pooled fallback; None when refused)."""
        return lookup_threshold(self.thresholds_, agent, target)[0]

    def stop_step(self, record: RunRecord, target: float) -> int | None:
        """Where this run would be stopped at `target` (None: never)."""
        t = self.threshold_for(getattr(record, self.config.group_by), target)
        return first_stop(
            record.scores[self.config.scorer],
            t,
            min_steps=self.min_steps,
            every=self.every,
            persist=self.persist,
        )
