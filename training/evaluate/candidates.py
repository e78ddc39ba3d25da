"""Cross-fitted, as shipped: every candidate scorer and the per-group choice, on pooled records.

Input: the records of a K-fold cross-fitted view (`failfast crossfit`, instance or repo view),
each run scored once by models that never saw its task. For each fold f the calibration runs
are the other folds' records (the runs fold f's models trained on, scored out of fold): every
candidate (the monitor, the learned baselines, the step and token limits, and the stack fitted
on those calibration runs) gets thresholds from them by the shipped procedure
(training.calibrate.thresholds), the per-group choice (training.evaluate.select) is made on them
alone, and fold f is stopped. The monitor is calibrated the same way here, so every candidate's
calibration scores come from the same kind of out-of-fold model; `failfast crossfit`'s own
monitor figures (inner out-of-fold calibration) are reported beside it for comparison.

Assumption: the calibration runs of fold f were scored by models that trained on fold f's runs
(not on their own); their scores stand for a served model's scores on new runs, as the out-of-fold
calibration of `val+train-oof` assumes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from training.config import ThresholdConfig
from training.data.records import RunRecord, Stops
from training.evaluate.calibrated import (
    add_length_scores,
    calibrated_stops,
    calibrated_tables,
    live_auroc,
    mean_live_auroc,
    refused_groups,
)
from training.evaluate.intervals import (
    Outcome,
    by_group,
    paired_saved_delta,
    percentile_ci,
    resample_weights,
    rule_with_ci,
)
from training.evaluate.select import (
    SIMPLE_FIRST,
    STACK,
    oof_stack,
    record_folds,
    select_per_group,
    with_score,
)

log = logging.getLogger(__name__)
SELECTED = "selected"
"""The per-group choice: one candidate per group for every target."""
SELECTED_PER_TARGET = "selected_per_target"
"""The per-group choice made for each target alone."""


def crossfit_candidates(
    records: Sequence[RunRecord],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    *,
    folds: int = 5,
    seed: int = 0,
    n_boot: int = 500,
    fold: np.ndarray | None = None,
    choice_repeats: int = 1,
) -> dict[str, Any]:
    """The as-shipped cross-fitted comparison (module docstring) as a JSON-able dict.

    Args:
        fold: the view's fold of each record (default: instance folds, `folds` and `seed` as
            `failfast crossfit`'s instance view draws them).
        choice_repeats: fold draws the per-group choice averages over
            (training.evaluate.select.select_per_group's `repeats`; 1 as shipped).
    """
    records = list(records)
    add_length_scores(records)
    fold = record_folds(records, folds, seed) if fold is None else np.asarray(fold)
    pairs = [
        ([r for r, g in zip(records, fold, strict=True) if g != f],
         [r for r, g in zip(records, fold, strict=True) if g == f])
        for f in range(int(fold.max()) + 1)
    ]  # fmt: skip
    return _candidates(
        pairs, tcfg, schedule, seed=seed, n_boot=n_boot, choice_repeats=choice_repeats
    )


def pair_candidates(
    pairs: Sequence[tuple[Sequence[RunRecord], Sequence[RunRecord]]],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    *,
    seed: int = 0,
    n_boot: int = 500,
    choice_repeats: int = 1,
) -> dict[str, Any]:
    """The same comparison for the views whose (train, test) pairs are not K folds (time,
    benchmark): per pair, every candidate calibrated, and the per-group choice made, on its
    calibration records (the pair's training runs scored out of fold by every candidate:
    `failfast crossfit`'s calibration-<i>.parquet) and its test records stopped. What the bundle
    would serve on later tasks or the other benchmark."""
    lists = []
    for cal, test in pairs:
        cal, test = list(cal), list(test)
        add_length_scores(cal)
        add_length_scores(test)
        lists.append((cal, test))
    out = _candidates(
        lists, tcfg, schedule, seed=seed, n_boot=n_boot, choice_repeats=choice_repeats
    )
    out["calibration"] = (
        "each pair's training runs, scored out of fold by every candidate (inner instance folds)"
    )
    return out


def _candidates(
    pairs: Sequence[tuple[list[RunRecord], list[RunRecord]]],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    *,
    seed: int,
    n_boot: int,
    choice_repeats: int,
) -> dict[str, Any]:
    """Per (calibration, test) pair: the stack fitted and every candidate calibrated on the
    calibration runs, the per-group choice made on them, the test runs stopped; then the report
    over the pooled test runs."""
    served = candidate_stops(pairs, tcfg, schedule, seed=seed, choice_repeats=choice_repeats)
    out = _report(
        served.records, served.stops, served.choices, served.refused,
        [float(t) for t in tcfg.targets], n_boot=n_boot, seed=seed,
    )  # fmt: skip
    out["folds_without_stack"] = served.no_stack
    return out


@dataclasses.dataclass
class Served:
    """What `candidate_stops` decided on the pooled test runs of a view's pairs."""

    records: list[RunRecord]  # the test runs, with the stack's and the length scores
    stops: dict[str, dict[float, Stops]]  # candidate (and SELECTED...) -> target -> run -> step
    choices: list[dict[str, Any]]  # per pair: group -> the choice
    refused: dict[str, dict[str, list[list[str]]]]
    no_stack: list[int]  # pairs whose calibration runs were too few for a stack


def candidate_stops(
    pairs: Sequence[tuple[list[RunRecord], list[RunRecord]]],
    tcfg: ThresholdConfig,
    schedule: Schedule,
    *,
    seed: int = 0,
    choice_repeats: int = 1,
    extra: Sequence[str] = (),
) -> Served:
    """Every candidate's stops, and the per-group choice's, on the test runs of each
    (calibration, test) pair, calibrated as shipped on the pair's calibration runs (the
    comparison `crossfit_candidates` reports; training.experiments.paired compares two).
    `extra`: more scores the records carry, offered to the choice after the shipped candidates
    (training.experiments.extra_candidate); one that a test record lacks is left out."""
    targets = [float(t) for t in tcfg.targets]
    have = set.intersection(*(set(r.scores) for _, test in pairs for r in test)) | {STACK}
    candidates = [c for c in SIMPLE_FIRST if c in have]
    candidates += [c for c in extra if c in have and c not in candidates]
    names = [*candidates, SELECTED, SELECTED_PER_TARGET]
    stops: dict[str, dict[float, Stops]] = {c: {t: {} for t in targets} for c in names}
    choices: list[dict[str, Any]] = []
    refused: dict[str, dict[str, list[list[str]]]] = {}
    scored: list[RunRecord] = []
    no_stack: list[int] = []
    for f, (cal, test) in enumerate(pairs):
        try:
            cal, stack = oof_stack(cal, schedule=schedule, group_by=tcfg.group_by, seed=seed)
            test = [with_score(r, STACK, stack.scores(r)) for r in test]
        except ValueError as e:  # too few calibration runs for a stack: the others still run
            log.warning("fold %d: no stack (%s); the stack is left out", f, e)
            no_stack.append(f)  # its zero scores never stop a run, never win a choice
            cal = [with_score(r, STACK, np.zeros(r.n_steps)) for r in cal]
            test = [with_score(r, STACK, np.zeros(r.n_steps)) for r in test]
        scored += test
        tables = calibrated_tables(cal, candidates, tcfg, schedule)
        choice = select_per_group(
            cal, candidates, tcfg, schedule, targets=targets, seed=seed + 1, repeats=choice_repeats
        )
        choices.append(
            {g: {k: c.get(k) for k in ("chosen", "chosen_by_target", "mean_saved",
                                         "held_out_by_target")}
             for g, c in choice.items()}
        )  # fmt: skip
        for t in targets:
            per = calibrated_stops(test, tables, t)
            for name, (st, used) in per.items():
                stops[name][t].update(st)
                refused.setdefault(name, {}).setdefault(f"{t:g}", []).append(refused_groups(used))
            for r in test:
                g = str(getattr(r, tcfg.group_by))
                c = (choice.get(g) or {}).get("chosen") or "monitor"
                stops[SELECTED][t][r.run_id] = per[c][0][r.run_id]
                c = ((choice.get(g) or {}).get("chosen_by_target") or {}).get(f"{t:g}") or c
                stops[SELECTED_PER_TARGET][t][r.run_id] = per[c][0][r.run_id]
    if no_stack:
        stops.pop(STACK, None)
        scored = [dataclasses.replace(r, scores={k: v for k, v in r.scores.items() if k != STACK})
                  for r in scored]  # fmt: skip
    return Served(scored, stops, choices, refused, no_stack)


def _report(
    records: list[RunRecord],
    stops: dict[str, dict[float, Stops]],
    choices: list[dict[str, Any]],
    refused: dict[str, dict[str, list[list[str]]]],
    targets: Sequence[float],
    *,
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    names = list(stops)
    scorers = [n for n in names if n not in (SELECTED, SELECTED_PER_TARGET)]
    per_agent: dict[str, Any] = {}
    draws: dict[str, dict[str, list[np.ndarray]]] = {
        f"{t:g}": {n: [] for n in names} for t in targets
    }
    for a, idx in by_group(records, lambda r: r.agent).items():
        recs = [records[i] for i in idx]
        w = resample_weights(np.array([int(r.resolved) for r in recs]), n_boot, seed=seed)
        entry: dict[str, Any] = {
            "runs": len(recs),
            "resolved": int(sum(r.resolved for r in recs)),
            "live_auroc": {s: live_auroc(recs, s) for s in scorers},
            "targets": {},
        }
        for t in targets:
            key = f"{t:g}"
            outs = {n: Outcome.of(recs, stops[n][t]) for n in names}
            row = {n: rule_with_ci(o, w) for n, o in outs.items()}
            for n, o in outs.items():
                draws[key][n].append(np.array([o.rates(wb)[2] for wb in w]))
            row["selected_minus"] = {
                n: paired_saved_delta(outs[SELECTED], outs[n], w) for n in scorers
            }
            entry["targets"][key] = row
        per_agent[a] = entry
    mean: dict[str, Any] = {}
    for key, per_name in draws.items():
        mean[key] = {}
        for n, arrs in per_name.items():
            point = float(np.mean([per_agent[a]["targets"][key][n]["saved"] for a in per_agent]))
            fprs = [per_agent[a]["targets"][key][n]["fpr"] for a in per_agent]
            boot = np.nanmean(np.stack(arrs), axis=0)
            mean[key][n] = {
                "saved": point,
                "saved_ci": percentile_ci(boot),
                "fpr_mean": float(np.nanmean(fprs)),
                "fpr_max": float(np.nanmax(fprs)),
            }
        for choice_name, field in (
            (SELECTED, "selected_minus"),
            (SELECTED_PER_TARGET, "per_target_minus"),
        ):
            sel = np.stack(draws[key][choice_name])
            for n in scorers:
                d = np.nanmean(sel - np.stack(draws[key][n]), axis=0)
                mean[key][n][field] = {
                    "delta": mean[key][choice_name]["saved"] - mean[key][n]["saved"],
                    "ci": percentile_ci(d),
                }
    live = {s: mean_live_auroc({a: e["live_auroc"][s] for a, e in per_agent.items()})
            for s in scorers}  # fmt: skip
    return {
        "calibration": "each fold's thresholds from the other folds' records (module docstring)",
        "candidates": scorers,
        "per_agent": per_agent,
        "mean_per_agent": mean,
        "mean_per_agent_live_auroc": live,
        "choices": choices,
        "refused_groups": refused,
    }
