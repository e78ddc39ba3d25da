"""Which scorer a threshold group ships: chosen on its calibration runs only.

Candidates are the scorers every report shows (step and token limits, the signals LR, TF-IDF,
the LM probe) and the stack over them (training.model.stack). The calibration records are split
into instance folds; each candidate is calibrated (training.calibrate.thresholds, the shipped
procedure) on all folds but one and stops the held-out fold, so every calibration run is
stopped once by thresholds that never saw it. Per group, the candidate saving the most tokens on
those stops (mean over the targets) wins, unless a simpler candidate is within `tie` of it
(simple rule wins ties); a candidate whose held-out FPR passes 1.5x a target is out.
`chosen_by_target` makes the same choice for each target alone; at a target where no candidate
stops a single held-out run (each inner fold has too few resolved runs to fit it: every
candidate refused, all tied at 0), that is no evidence for the simplest rule, and the group's
choice over all targets serves it there (`no_evidence` lists those targets). The test runs are
never looked at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from monitor.schedule import Schedule
from training.config import ThresholdConfig
from training.data.folds import instance_folds
from training.data.records import RunRecord, Stops, group_records
from training.evaluate.calibrated import (
    STEP_LIMIT,
    TOKEN_LIMIT,
    calibrated_stops,
    calibrated_tables,
)
from training.evaluate.intervals import Outcome
from training.model.stack import StackBagModel, StackModel, fit_stack

STACK = "stack"
SIMPLE_FIRST = (STEP_LIMIT, TOKEN_LIMIT, "signals_lr", "tfidf_lr", "monitor", "monitor_text", STACK)
"""Candidates from the simplest: a tie goes to the earlier one. The second probe
("monitor_text", train.text_candidate) comes before the stack: listed last, its cross-fitted gain
was about half (docs/RESULTS.md, twenty-first round)."""
STACK_BASES = ("monitor", "signals_lr", "tfidf_lr")
FPR_GUARD = 1.5
"""A candidate whose held-out FPR on a group's calibration runs passes this times a target is not
chosen for that group and target."""


def record_folds(records: Sequence[RunRecord], k: int, seed: int) -> np.ndarray:
    """Instance folds of records (training.data.folds.instance_folds reads only instance_id)."""
    return instance_folds(cast(Any, records), k, seed=seed)


def with_score(record: RunRecord, name: str, scores: np.ndarray) -> RunRecord:
    """A copy of `record` with one more score (the original is left as it was)."""
    return dataclasses.replace(record, scores={**record.scores, name: scores})


def stack_bases(records: Sequence[RunRecord]) -> list[str]:
    """The stack's base scores that every record carries."""
    return [b for b in STACK_BASES if all(b in r.scores for r in records)]


def oof_stack(
    calibration: Sequence[RunRecord],
    *,
    schedule: Schedule,
    group_by: str,
    folds: int = 5,
    seed: int = 0,
) -> tuple[list[RunRecord], StackBagModel]:
    """Copies of the calibration records with out-of-fold stack scores (each run scored by a
    stack fitted on the other instance folds), and the bag of those fold stacks: what is served
    (the mean of their logits), so that the thresholds the out-of-fold scores set fit the served
    scores. One refit on all calibration runs, served until the sixth round of issue 26, was
    sharper than the scores it was calibrated on and stopped up to 7.9% of SWE-agent's resolved
    runs at a 5% target (docs/RESULTS.md)."""
    bases = stack_bases(calibration)
    folds = min(folds, len({r.instance_id for r in calibration}))
    if folds < 2:
        raise ValueError("the stack needs calibration runs of at least 2 instances")
    fold = record_folds(calibration, folds, seed)
    out: list[RunRecord | None] = [None] * len(calibration)
    members: list[StackModel] = []
    for f in range(folds):
        fit = [r for r, g in zip(calibration, fold, strict=True) if g != f]
        model = fit_stack(fit, bases=bases, schedule=schedule, group_by=group_by)
        members.append(model)
        for i in np.flatnonzero(fold == f).tolist():
            out[i] = with_score(calibration[i], STACK, model.scores(calibration[i]))
    bag = StackBagModel(list(members))  # list(): a list[Stack] (lists are invariant)
    return [r for r in out if r is not None], bag


def chosen_entry(c: Mapping[str, Any]) -> dict[str, Any]:
    """A group's entry in candidates.json (`chosen.<group>`) from its `select_per_group` result:
    the choice over all targets, per target, the targets without evidence and the held-out
    savings behind it (serving.choice reads it)."""
    return {
        "scorer": c["chosen"] or "monitor",
        "by_target": c.get("chosen_by_target", {}),
        "no_evidence": c.get("no_evidence", []),
        "held_out_saved": c["mean_saved"],
        "held_out_by_target": c.get("held_out_by_target", {}),
    }


def select_per_group(
    calibration: Sequence[RunRecord],
    candidates: Sequence[str],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    *,
    targets: Sequence[float],
    folds: int = 5,
    seed: int = 1,
    tie: float = 0.005,
    repeats: int = 1,
    shrink: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Per group: {"chosen": name, "inner": {name: {target: {"fpr", "saved"}}}} (module
    docstring). `calibration` carries every candidate's score (the stack's out of fold).
    `repeats` > 1: the held-out rates are averaged over that many fold draws (seeds seed,
    seed + 1, ...), a less noisy choice for small groups (not the default: it gained in
    distribution but failed the repository view, docs/RESULTS.md, "Issue 26, third round"). `shrink` > 0: a group's held-out
    savings are shrunk toward the mean over groups, its own weighing n / (n + shrink) with n its
    resolved calibration runs (borrowing strength: a small group's choice leans on the others)."""
    key = tcfg.group_by
    folds = min(folds, len({r.instance_id for r in calibration}))
    if folds < 2:  # nothing to hold out: every group keeps the LM probe
        return {g: {"chosen": None, "inner": {}, "mean_saved": {}}
                for g in group_records(calibration, key)}  # fmt: skip
    draws = [
        _held_out_stops(calibration, candidates, tcfg, schedule, targets, folds, seed + i)
        for i in range(max(1, repeats))
    ]
    order = [c for c in SIMPLE_FIRST if c in candidates] + [
        c for c in candidates if c not in SIMPLE_FIRST
    ]
    groups = group_records(calibration, key)
    inner = {
        g: _inner_rates(rs, order, targets, draws, len(calibration)) for g, rs in groups.items()
    }
    pooled = _pooled_saved(inner)
    out: dict[str, dict[str, Any]] = {}
    for g, rs in groups.items():
        n = sum(bool(r.resolved) for r in rs)
        w = n / (n + shrink) if shrink > 0 else 1.0  # the group's own weight against the pool

        def saved(c: str, key_t: str, g: str = g, w: float = w) -> float:
            return w * inner[g][c][key_t]["saved"] + (1 - w) * pooled[c][key_t]

        def ok(c: str, key_t: str, t: float, g: str = g) -> bool:
            fpr = inner[g][c][key_t]["fpr"]
            return not (fpr == fpr and fpr > FPR_GUARD * t)

        keys = [(f"{t:g}", t) for t in targets]
        mean_saved = {
            c: float(np.mean([saved(c, k) for k, _ in keys]))
            for c in inner[g]
            if len(inner[g][c]) == len(keys) and all(ok(c, k, t) for k, t in keys)
        }
        best = max(mean_saved.values()) if mean_saved else 0.0
        chosen = next((c for c in order if c in mean_saved and mean_saved[c] >= best - tie), None)
        by_target: dict[str, str | None] = {}
        no_evidence: list[str] = []
        for key_t, t in keys:
            ok_t = {
                c: saved(c, key_t) for c in inner[g] if key_t in inner[g][c] and ok(c, key_t, t)
            }
            top = max(ok_t.values()) if ok_t else 0.0
            if chosen is not None and top <= 0.0:  # nothing stopped held out at this target
                by_target[key_t] = chosen
                no_evidence.append(key_t)
                continue
            by_target[key_t] = next((c for c in order if c in ok_t and ok_t[c] >= top - tie), None)
        out[g] = {
            "chosen": chosen,
            "chosen_by_target": by_target,
            # what each target's choice saved on the held-out calibration runs (None: no choice)
            "held_out_by_target": {
                k: (saved(c, k) if c is not None and k in inner[g][c] else None)
                for k, c in by_target.items()
            },
            "no_evidence": no_evidence,
            "inner": inner[g],
            "mean_saved": mean_saved,
        }
    return out


def _inner_rates(
    rs: Sequence[RunRecord],
    order: Sequence[str],
    targets: Sequence[float],
    draws: Sequence[dict[str, dict[float, Stops]]],
    n_calibration: int,
) -> dict[str, dict[str, dict[str, float]]]:
    """candidate -> target key -> held-out {"fpr", "saved"} of one group's runs (the mean over
    the fold draws); a candidate missing stops of some calibration run is left out."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c in order:
        if any(len(st[c][t]) < n_calibration for st in draws for t in targets):
            continue
        per_t = {}
        for t in targets:
            rates = [Outcome.of(rs, st[c][t]).rates() for st in draws]
            per_t[f"{t:g}"] = {
                "fpr": float(np.mean([x[0] for x in rates])),
                "saved": float(np.mean([x[2] for x in rates])),
            }
        out[c] = per_t
    return out


def _pooled_saved(
    inner: dict[str, dict[str, dict[str, dict[str, float]]]],
) -> dict[str, dict[str, float]]:
    """candidate -> target key -> the mean over groups of its held-out tokens saved."""
    acc: dict[str, dict[str, list[float]]] = {}
    for per_c in inner.values():
        for c, per_t in per_c.items():
            for k, v in per_t.items():
                acc.setdefault(c, {}).setdefault(k, []).append(v["saved"])
    return {c: {k: float(np.mean(v)) for k, v in per_t.items()} for c, per_t in acc.items()}


def _held_out_stops(
    calibration: Sequence[RunRecord],
    candidates: Sequence[str],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    targets: Sequence[float],
    folds: int,
    seed: int,
) -> dict[str, dict[float, Stops]]:
    """Each candidate's stops of every calibration run by thresholds fitted on the other
    instance folds (one fold draw)."""
    fold = record_folds(calibration, folds, seed)
    stops: dict[str, dict[float, Stops]] = {c: {t: {} for t in targets} for c in candidates}
    for f in range(folds):
        fit = [r for r, g in zip(calibration, fold, strict=True) if g != f]
        held = [r for r, g in zip(calibration, fold, strict=True) if g == f]
        tables = calibrated_tables(fit, candidates, tcfg, schedule)
        for t in targets:
            for name, (st, _) in calibrated_stops(held, tables, t).items():
                stops[name][t].update(st)
    return stops
