"""`failfast calibrate` and the per-group choice: the groups it calibrates are served by the
candidate that saves the most tokens on their held-out runs, as `failfast train` chooses.

Before, a group `failfast calibrate` touched was always served by the LM probe (its candidates'
thresholds were the training run's, so the comparison behind the choice no longer held), even
where the check it ran itself found a baseline saving twice as much on the user's runs. Now every
candidate the bundle can serve is scored on the calibration runs with the numbers serving gives
(`serving.choice.Choice.score_run`: the same numpy parameters, the run's own group), calibrated by
the monitor's procedure (`training.evaluate.calibrated.calibrated_tables`) and the choice is made
on inner folds of those runs (`training.evaluate.select.select_per_group`), exactly as training
does. The group's candidates.json entry says so (`calibrated_by`), which is what lets serving
follow it (serving.choice). A group calibrated from decision logs only (their scores are the LM
probe's) keeps the LM probe.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from monitor.schedule import Schedule
from monitor.signals import signal_matrix
from monitor.thresholds import ThresholdTable
from serving.candidate_run import MONITOR, MONITOR_TEXT, run_pieces
from serving.task_prior import PRIOR_CANDIDATES
from training.data.records import RunRecord

if TYPE_CHECKING:
    from serving.scorer import Scorer
    from training.config import ThresholdConfig

CALIBRATED_BY = "failfast calibrate"


def add_candidate_scores(
    scorer: Scorer, runs: Sequence[Any], records: Sequence[RunRecord], group_by: str
) -> list[str]:
    """Add to each record (in the order of `runs`, one per run) the whole-run score of every
    candidate the bundle can serve, as served for the record's group; returns their names
    (none for a bundle without candidates.json)."""
    choice = scorer.choice
    if choice is None:
        return []
    if len(runs) != len(records):
        raise ValueError(f"{len(runs)} runs but {len(records)} records")
    names = [
        n
        for n in choice.tables
        if n != MONITOR and n not in PRIOR_CANDIDATES and choice.servable(n)
    ]
    for rec, traj in zip(records, runs, strict=True):
        if rec.run_id != traj.id:
            raise ValueError(f"record {rec.run_id} is not run {traj.id}")
        group = str(getattr(rec, group_by))
        pieces = run_pieces(scorer.featuriser, traj, choice.tfidf_text)
        sig = signal_matrix(traj)
        tokens = [s.tokens for s in traj.steps]
        mon = [float(x) for x in rec.scores[MONITOR]]
        text = rec.scores.get(MONITOR_TEXT)
        for n in names:
            if n == MONITOR_TEXT and text is None:
                continue
            rec.scores[n] = choice.score_run(
                n, pieces, sig, tokens, group, mon, None if text is None else list(text)
            )
    return [n for n in names if all(n in r.scores for r in records)]


def recalibrate_candidates(
    candidates: dict[str, Any],
    records: Sequence[RunRecord],
    cfg: ThresholdConfig,
    schedule: Schedule,
    groups: Sequence[str],
    *,
    replace: bool = False,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A copy of a bundle's candidates.json in which `groups` (those the LM probe's thresholds
    were recalibrated for) have every candidate's thresholds picked on `records` and the
    per-group choice made on them. A group counts when all its records carry every candidate's
    score (runs read from transcripts; a decision log holds the probe's alone): a group that
    does not loses a choice an earlier `failfast calibrate` made (the LM probe serves it).
    `replace` (calibrate --replace, which drops the bundle's other groups): the other groups'
    choices and candidate thresholds go too. Returns (the new file, per group the choice as
    select_per_group gives it)."""
    from training.evaluate.calibrated import calibrated_tables
    from training.evaluate.select import chosen_entry, select_per_group

    out = copy.deepcopy(candidates)
    tables = out.setdefault("thresholds", {})
    chosen = out.setdefault("chosen", {})
    key = cfg.group_by
    wanted = set(groups)
    if replace:  # the monitor table holds `groups` alone now: so do the choice and its tables
        for g in [g for g in chosen if g not in wanted]:
            del chosen[g]
        for t in tables.values():
            t["groups"] = {g: v for g, v in (t.get("groups") or {}).items() if g in wanted}
    by_group: dict[str, list[RunRecord]] = {}
    for r in records:
        if str(getattr(r, key)) in wanted:
            by_group.setdefault(str(getattr(r, key)), []).append(r)
    extra = [n for n in tables if n != MONITOR and any(n in r.scores for r in records)]
    scored = {
        g
        for g, rs in by_group.items()
        if extra and all(MONITOR in r.scores and all(n in r.scores for n in extra) for r in rs)
    }
    for g in groups:  # a group now scored by the LM probe's new thresholds alone
        if g not in scored and isinstance(chosen.get(g), dict):
            chosen[g].pop("calibrated_by", None)
    if not scored:
        return out, {}
    mine = [r for g in sorted(scored) for r in by_group[g]]
    names = [MONITOR, *extra]
    fitted = calibrated_tables(mine, names, cfg, schedule)
    for n, table in fitted.items():
        if n not in tables:  # the LM probe's own table is the bundle's monitor.json
            continue
        old = ThresholdTable.model_validate(tables[n])
        for g in scored:
            if g in table.groups:
                old.groups[g] = table.groups[g]
        old.targets = sorted(set(old.targets) | set(table.targets))
        tables[n] = old.to_json()
    choice = select_per_group(mine, names, cfg, schedule, targets=list(cfg.targets))
    for g, c in choice.items():
        chosen[g] = {**chosen_entry(c), "calibrated_by": CALIBRATED_BY}
    return out, choice
