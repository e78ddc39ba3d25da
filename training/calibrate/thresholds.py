"""Run-level stop thresholds picked on validation records, with an FPR bound (DESIGN.md,
"Definitions").

Under a check schedule (monitor.schedule) a run is stopped at threshold t exactly when its
stopping statistic (`Schedule.max_checked_score`) is >= t, so the run-level false-positive rate
(stopped resolved runs / resolved runs) is a step function of t over the per-run statistics.
`pick_thresholds` chooses, per group and pooled, for each target the lowest threshold whose FPR on
the calibration runs is within the target: `empirical` compares the observed rate, `bound` (the
default) an upper bound of training.calibrate.bounds. A target that even 0 false positives could
not certify (too few resolved runs) is refused with the count it would need. The result is a
monitor.thresholds.ThresholdTable, looked up the same way by serving and evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from monitor.schedule import Schedule
from monitor.thresholds import GroupThresholds, StopThreshold, ThresholdTable, target_key
from training.calibrate.bounds import (
    allowed_false_positives,
    bound_for,
    fpr_upper_bound,
    resolved_runs_needed,
)
from training.config import DEFAULT_TARGETS, ThresholdConfig
from training.data.records import RunRecord, group_records


def run_false_positive_rate(
    records: Iterable[RunRecord],
    threshold: float | None,
    *,
    schedule: Schedule,
    scorer: str = "monitor",
) -> float:
    """Stopped resolved runs / resolved runs (NaN without resolved runs)."""
    stops = [
        schedule.first_stop(r.scores[scorer], threshold) is not None for r in records if r.resolved
    ]
    return float(np.mean(stops)) if stops else math.nan


def threshold_for_count(
    resolved_max: np.ndarray, j: int, all_max: np.ndarray | None = None
) -> float:
    """The lowest threshold at which at most `j` of the resolved runs are stopped.

    It lies just above the (j+1)-th largest resolved maximum: halfway to the next larger run
    maximum (resolved or not) so a small score drift (ONNX vs torch) does not flip the count.
    """
    m = np.sort(np.asarray(resolved_max, dtype=np.float64))[::-1]
    others = np.asarray(all_max if all_max is not None else [], dtype=np.float64)
    if j >= len(m):
        lowest = np.concatenate([m, others])
        return float(np.min(lowest)) if len(lowest) else 0.0
    u = m[j]
    pool = np.concatenate([m, others])
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


def group_margin(cfg: ThresholdConfig, n_resolved: int) -> float:
    """The margin a group with `n_resolved` resolved calibration runs is fitted with: the
    configured `margin`, relaxed by `adaptive_margin` toward 1 as the group grows (never above
    `margin`, never below 1)."""
    if cfg.adaptive_margin is None or n_resolved <= 0:
        return cfg.margin
    return max(1.0, min(cfg.margin, 1.0 + cfg.adaptive_margin / math.sqrt(n_resolved)))


def _stop_threshold(
    cfg: ThresholdConfig, target: float, resolved_max: np.ndarray, all_max: np.ndarray
) -> StopThreshold:
    """The stop threshold of one target for one group, or its refusal."""
    n = len(resolved_max)
    margin = group_margin(cfg, n)
    fit = target / margin  # the target is fitted with the safety margin
    own = margin if cfg.adaptive_margin is not None else None  # recorded per entry when adaptive
    need = resolved_runs_needed(fit, confidence=cfg.confidence, mode=cfg.mode, method=cfg.method)
    if n < need:
        return StopThreshold(
            margin=own,
            refused=(
                f"cannot certify run-level FPR <= {fit:g}"
                + (f" (target {target:g} / margin {margin:.3g})" if margin != 1 else "")
                + f" ({_method_name(cfg)}, {cfg.confidence:g} confidence): needs at least {need} "
                f"resolved validation runs, has {n}"
            ),
        )
    j = allowed_false_positives(n, fit, confidence=cfg.confidence, mode=cfg.mode, method=cfg.method)
    t = threshold_for_count(resolved_max, j, all_max)
    fp = int((resolved_max >= t).sum())
    bound = (
        bound_for(fp, n, method=cfg.method, confidence=cfg.confidence)
        if cfg.mode == "bound"
        else fpr_upper_bound(fp, n, confidence=cfg.confidence)
    )
    return StopThreshold(threshold=float(t), fpr_val=fp / n, fpr_upper_bound=bound, margin=own)


def _group(
    recs: list[RunRecord], cfg: ThresholdConfig, schedule: Schedule, pooled_warn: float | None
) -> GroupThresholds:
    maxima = np.array([schedule.max_checked_score(r.scores[cfg.scorer]) for r in recs])
    # The warn level applies to single scores (no persistence), as a live session warns.
    one = schedule.single()
    single = np.array([one.max_checked_score(r.scores[cfg.scorer]) for r in recs])
    res = np.array([bool(r.resolved) for r in recs])
    stop = {target_key(t): _stop_threshold(cfg, t, maxima[res], maxima) for t in cfg.targets}
    n = int(res.sum())
    if n:
        j = math.floor(cfg.warn_fraction * n + 1e-9)
        warn = threshold_for_count(single[res], j, single)
    else:
        warn = pooled_warn if pooled_warn is not None else 0.5
    fitted = [e.threshold for e in stop.values() if e.threshold is not None]
    if fitted:
        warn = min(warn, min(fitted))
    return GroupThresholds(n_resolved=n, stop=stop, warn=float(warn))


def pick_thresholds(
    records: Sequence[RunRecord],
    *,
    schedule: Schedule,
    targets: Sequence[float] = DEFAULT_TARGETS,
    mode: Literal["bound", "empirical"] = "bound",
    method: Literal["conformal", "clopper-pearson"] = "conformal",
    confidence: float = 0.95,
    group_by: Literal["agent", "source"] = "agent",
    warn_fraction: float = 0.25,
    scorer: str = "monitor",
    margin: float = 1.0,
    fallback: Literal["pooled", "none"] = "pooled",
    adaptive_margin: float | None = None,
) -> ThresholdTable:
    """Pick stop thresholds per target, per group and pooled, on calibration records.

    Args:
        records: validation-split records (never the training or test split).
        schedule: the check schedule served with the thresholds.
        targets, mode, method, confidence, group_by, warn_fraction, scorer, margin, fallback,
        adaptive_margin: as in training.config.ThresholdConfig; left out, the plain fit (per
            agent, no margin, pooled fallback), not the served defaults: `ThresholdPicker`
            passes those.

    Returns:
        The thresholds.json table (docs/BUNDLE.md). A group's refused target falls back to the
        pooled threshold at lookup when `fallback` is "pooled", else it stays refused.
    """
    cfg = ThresholdConfig(
        mode=mode,
        method=method,
        confidence=confidence,
        targets=list(targets),
        warn_fraction=warn_fraction,
        group_by=group_by,
        scorer=scorer,
        margin=margin,
        fallback=fallback,
        adaptive_margin=adaptive_margin,
    )
    recs = [r for r in records if cfg.scorer in r.scores]
    if not recs:
        raise ValueError(
            f"no validation records with a {cfg.scorer!r} score to pick thresholds from"
        )
    sched = schedule.schedule()
    pooled = _group(recs, cfg, sched, pooled_warn=None)
    per_group = group_records(recs, cfg.group_by)
    return ThresholdTable(
        mode=cfg.mode,
        confidence=cfg.confidence,
        method=_method_name(cfg),
        schedule=sched,
        group_by=cfg.group_by,
        targets=[float(t) for t in cfg.targets],
        groups={g: _group(rs, cfg, sched, pooled.warn) for g, rs in sorted(per_group.items())},
        pooled=pooled,
        margin=cfg.margin,
        fallback=cfg.fallback,
        adaptive_margin=cfg.adaptive_margin,
    )


def calibration_summary(
    records: Sequence[RunRecord], source: str, *, group_by: str = "agent"
) -> dict[str, Any]:
    """What thresholds.json says about its calibration runs: which records (`source`) and, per
    threshold group, runs and resolved runs (under "per_agent", whatever `group_by` is)."""
    per = {
        g: {"runs": len(rs), "resolved": sum(bool(r.resolved) for r in rs)}
        for g, rs in group_records(records, group_by).items()
    }
    return {"records": source, "per_agent": dict(sorted(per.items()))}


class ThresholdPicker:
    """Fitted form of `pick_thresholds` (scikit-learn style).

    Attributes (after fit):
        thresholds_: the ThresholdTable.
        n_resolved_: resolved calibration runs per group.
    """

    def __init__(self, config: ThresholdConfig | None = None, *, schedule: Schedule) -> None:
        self.config = config or ThresholdConfig()
        self.schedule = schedule.schedule()

    def fit(self, records: Sequence[RunRecord]) -> ThresholdPicker:
        """Pick thresholds on calibration records."""
        options = self.config.model_dump(exclude={"calibration", "crossfit_folds"})
        self.thresholds_ = pick_thresholds(records, schedule=self.schedule, **options)
        self.n_resolved_ = {g: e.n_resolved for g, e in self.thresholds_.groups.items()}
        return self

    def stop_step(self, record: RunRecord, target: float) -> int | None:
        """Where this run would be stopped at `target` (None: never)."""
        th = self.thresholds_.lookup(str(getattr(record, self.config.group_by)), target)
        return self.schedule.first_stop(record.scores[self.config.scorer], th.stop)
