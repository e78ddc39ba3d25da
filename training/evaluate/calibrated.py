"""Every scorer calibrated as the monitor is, and discrimination among runs still going.

A comparison is as shipped (DESIGN.md, "Definitions"): each scorer gets its stop thresholds from
the same calibration runs by the same procedure as the monitor (training.calibrate.thresholds:
per-group split-conformal, the same margin, fallback and check schedule) and is judged on the
same evaluated runs. The length rules are scores too: `step_limit` (steps so far) and
`token_limit` (tokens so far); calibrated per group they are a step / token budget set at the
target FPR on the calibration runs.

`live_auroc` is the discrimination a stop can use: the AUROC at step k (or at t tokens) over the
runs longer than k, so a run's own length cannot leak in as it does at a fraction of the run.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from training.config import ThresholdConfig
from training.data.records import RunRecord, Stops

STEP_LIMIT = "step_limit"
TOKEN_LIMIT = "token_limit"
LENGTH_SCORERS = (STEP_LIMIT, TOKEN_LIMIT)
LIVE_STEPS = (5, 10, 20)
LIVE_TOKENS = (50_000, 200_000, 500_000)
"""Fixed points of the live-run AUROC (steps; tokens so far)."""


def length_scores(record: RunRecord) -> dict[str, np.ndarray]:
    """The length rules as scores after steps 1..k: steps so far / 1e4, tokens so far / 1e9
    (scaled below 1 so threshold midpoints behave as for probabilities)."""
    n = record.n_steps
    return {
        STEP_LIMIT: np.arange(1, n + 1, dtype=np.float64) / 1e4,
        TOKEN_LIMIT: np.cumsum(np.asarray(record.step_tokens, dtype=np.float64)) / 1e9,
    }


def add_length_scores(records: Iterable[RunRecord]) -> None:
    """Give every record the length scores it lacks (in place)."""
    for r in records:
        for name, s in length_scores(r).items():
            r.scores.setdefault(name, s)


def calibrated_tables(
    calibration: Sequence[RunRecord],
    scorers: Sequence[str],
    tcfg: ThresholdConfig,
    schedule: Schedule,
) -> dict[str, Any]:
    """One ThresholdTable per scorer, each picked by the monitor's procedure (`tcfg`, only the
    scorer changed) on the calibration runs that carry that score."""
    from training.calibrate.thresholds import ThresholdPicker

    out: dict[str, Any] = {}
    for name in scorers:
        have = [r for r in calibration if name in r.scores]
        if not have:
            continue
        cfg = tcfg.model_copy(update={"scorer": name})
        out[name] = ThresholdPicker(cfg, schedule=schedule).fit(have).thresholds_
    return out


def calibrated_stops(
    records: Sequence[RunRecord],
    tables: Mapping[str, Any],
    target: float,
) -> dict[str, tuple[Stops, dict[str, dict[str, Any]]]]:
    """Each scorer's stops on `records` at its own calibrated thresholds: {name: (stops, used)}
    with used[group] = {"threshold", "from"} as training.evaluate.stops.score_stops gives."""
    from training.evaluate.stops import score_stops

    out = {}
    with quiet_lookups():  # `used` says where each group's threshold came from
        for name, table in tables.items():
            have = [r for r in records if name in r.scores]
            if len(have) == len(records):
                out[name] = score_stops(records, table, target=target, scorer=name)
    return out


@contextlib.contextmanager
def quiet_lookups() -> Iterator[None]:
    """ThresholdTable.lookup's warning about a group it lacks, silenced: the candidates' tables
    repeat the monitor's (said once where the monitor's table is looked up), and the report
    records each group's threshold origin."""
    log = logging.getLogger("monitor.thresholds")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def refused_groups(used: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The groups a scorer's thresholds give no stop by score at the target."""
    return sorted(g for g, u in used.items() if u.get("threshold") is None)


def _auc(y: np.ndarray, s: np.ndarray) -> float | None:
    if len(np.unique(y)) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def live_auroc(
    records: Sequence[RunRecord],
    scorer: str,
    *,
    steps: Sequence[int] = LIVE_STEPS,
    tokens: Sequence[int] = LIVE_TOKENS,
) -> dict[str, dict[str, Any]]:
    """AUROC (positive = unresolved) among runs still going: at step k over the runs with more
    than k steps (score after step k), and at t tokens over the runs that used more than t
    tokens (score after the step that passed t). Keys "step:5", "tokens:50000"; each
    {"auroc": float | None, "runs": live runs}."""
    recs = [r for r in records if scorer in r.scores and r.n_steps]
    out: dict[str, dict[str, Any]] = {}
    for k in steps:
        live = [r for r in recs if r.n_steps > k]
        y = np.array([0 if r.resolved else 1 for r in live])
        s = np.array([r.scores[scorer][k - 1] for r in live])
        out[f"step:{k}"] = {"auroc": _auc(y, s), "runs": len(live)}
    for t in tokens:
        ys, ss = [], []
        for r in recs:
            cum = np.cumsum(r.step_tokens)
            if cum[-1] <= t:
                continue
            k = int(np.searchsorted(cum, t, side="right"))  # first step whose total passes t
            if k >= r.n_steps - 1:
                continue  # passed t on its last step: not still going
            ys.append(0 if r.resolved else 1)
            ss.append(r.scores[scorer][k])
        out[f"tokens:{t}"] = {"auroc": _auc(np.array(ys), np.array(ss)), "runs": len(ys)}
    return out


def mean_live_auroc(per_group: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The mean over groups of each live point's AUROC (groups where it is defined)."""
    keys = sorted({k for g in per_group.values() for k in g}, key=_point_order)
    out: dict[str, Any] = {}
    for k in keys:
        vals = [g[k]["auroc"] for g in per_group.values() if g.get(k, {}).get("auroc") is not None]
        out[k] = float(np.mean(vals)) if vals else None
    return out


def _point_order(key: str) -> tuple[str, float]:
    kind, _, v = key.partition(":")
    return kind, float(v) if v else math.inf
