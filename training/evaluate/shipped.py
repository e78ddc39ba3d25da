"""The as-shipped comparison of `failfast evaluate`: every scorer, the stack and the per-group
choice calibrated by the procedure that made the monitor's thresholds, on the same calibration
runs (training.evaluate.calibrated, training.evaluate.select)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from monitor.schedule import Schedule
from training.config import ThresholdConfig
from training.data.records import RunRecord, Stops
from training.evaluate.calibrated import (
    LENGTH_SCORERS,
    add_length_scores,
    calibrated_stops,
    calibrated_tables,
    quiet_lookups,
    refused_groups,
)
from training.evaluate.select import (
    STACK,
    chosen_entry,
    oof_stack,
    select_per_group,
    stack_bases,
)


def table_config(table: Any) -> ThresholdConfig:
    """The procedure that picked a monitor.thresholds.ThresholdTable, as a ThresholdConfig (to
    pick other scorers' thresholds the same way)."""
    return ThresholdConfig(
        mode="empirical" if table.mode == "empirical" else "bound",
        method="clopper-pearson" if table.method == "clopper-pearson" else "conformal",
        confidence=table.confidence,
        targets=list(table.targets),
        group_by=table.group_by,
        margin=table.margin,
        fallback="none" if table.fallback == "none" else "pooled",
        adaptive_margin=table.adaptive_margin,
    )


def as_shipped(
    calibration: Sequence[RunRecord],
    records: Sequence[RunRecord],
    table: Any,
    *,
    target: float,
    scorers: Sequence[str],
    stack: bool = True,
) -> tuple[dict[str, Stops], dict[str, dict[str, Any]]]:
    """Every scorer of `scorers` (plus the length rules, and the stack and the per-group choice
    when `stack` and the calibration runs carry the stack's bases) calibrated by the procedure
    that made `table` on `calibration`, stopping `records`. Returns ({name: stops}, {name: info})
    with info = {"threshold": {group: used}, "refused_groups", "calibration_runs"}."""
    tcfg = table_config(table)
    sched = table.schedule
    cal = list(calibration)
    recs = list(records)
    add_length_scores(cal)
    add_length_scores(recs)
    names = [s for s in scorers if all(s in r.scores for r in recs)] + list(LENGTH_SCORERS)
    have_all = [r for r in cal if all(b in r.scores for b in names)]
    if stack and len(stack_bases(have_all)) >= 2 and len({r.resolved for r in have_all}) == 2:
        try:
            with_stack, model = oof_stack(have_all, schedule=sched, group_by=tcfg.group_by)
        except ValueError:  # too few calibration runs for a stack: report the others
            return _calibrated(cal, recs, names, tcfg, sched, target)
        ids = {r.run_id for r in have_all}
        cal = [r for r in cal if r.run_id not in ids] + with_stack
        recs = [
            dataclasses.replace(r, scores={**r.scores, STACK: model.scores(r)})
            if all(b in r.scores for b in model.bases)
            else r
            for r in recs
        ]
        if all(STACK in r.scores for r in recs):
            names.append(STACK)
    stops, info = _calibrated(cal, recs, names, tcfg, sched, target)
    if STACK in names:
        cands = [n for n in names if n in stops]
        both = [r for r in cal if all(n in r.scores for n in cands)]
        choice = select_per_group(both, cands, tcfg, sched, targets=[target])
        chosen = {g: c["chosen"] or "monitor" for g, c in choice.items()}
        sel: Stops = {}
        used_sel: dict[str, dict[str, Any]] = {}
        for r in recs:
            g = str(getattr(r, tcfg.group_by))
            c = chosen.get(g, "monitor") if chosen.get(g, "monitor") in stops else names[0]
            sel[r.run_id] = stops[c][r.run_id]
            used_sel[g] = {**info[c]["threshold"].get(g, {}), "scorer": c}
        stops["selected"] = sel
        info["selected"] = {
            "threshold": used_sel,
            "refused_groups": refused_groups(used_sel),
            "calibration_runs": len(both),
            "choice": {
                g: {
                    "chosen": c["chosen"],
                    "inner_saved": c["mean_saved"],
                    "held_out_by_target": c.get("held_out_by_target", {}),
                }
                for g, c in choice.items()
            },  # fmt: skip
        }
    return stops, info


def _calibrated(
    cal: list[RunRecord],
    recs: list[RunRecord],
    names: list[str],
    tcfg: ThresholdConfig,
    sched: Schedule,
    target: float,
) -> tuple[dict[str, Stops], dict[str, dict[str, Any]]]:
    per = calibrated_stops(recs, calibrated_tables(cal, names, tcfg, sched), target)
    stops = {n: st for n, (st, _) in per.items()}
    info: dict[str, dict[str, Any]] = {
        n: {
            "threshold": used,
            "refused_groups": refused_groups(used),
            "calibration_runs": sum(n in r.scores for r in cal),
        }
        for n, (_, used) in per.items()
    }
    return stops, info


def shipped_candidates(
    calibration: Sequence[RunRecord], table: Any, *, scorers: Sequence[str]
) -> dict[str, Any]:
    """What a bundle carries besides the monitor (candidates.json): every candidate's thresholds
    picked on `calibration` by the monitor's procedure (its calibrated baselines), the stack's
    numpy parameters, and per group the candidate chosen on the calibration runs (with the
    held-out tokens saved behind the choice). Scores of scikit-learn baselines are added by the
    caller (training.export.candidates)."""
    tcfg = table_config(table)
    sched = table.schedule
    cal = [r for r in calibration if all(s in r.scores for s in scorers)]
    add_length_scores(cal)
    names = [*scorers, *LENGTH_SCORERS]
    out: dict[str, Any] = {"group_by": tcfg.group_by, "calibration_runs": len(cal)}
    try:
        cal, model = oof_stack(cal, schedule=sched, group_by=tcfg.group_by)
        names.append(STACK)
        out["stack"] = model.to_json()
    except ValueError as e:
        out["stack_refused"] = str(e)
    tables = calibrated_tables(cal, names, tcfg, sched)
    out["thresholds"] = {n: t.to_json() for n, t in tables.items()}
    choice = select_per_group(cal, names, tcfg, sched, targets=list(tcfg.targets))
    out["chosen"] = {g: chosen_entry(c) for g, c in choice.items()}
    out["why"] = (
        "per group and target, the candidate saving the most tokens on calibration runs held out "
        "of its thresholds (a simpler one within 0.5 points wins); at a target where none stopped "
        "a held-out run (no_evidence), the group's choice over all targets"
    )
    return out


def from_bundle(
    records: Sequence[RunRecord],
    candidates: dict[str, Any],
    table: Any,
    *,
    target: float,
    monitor: tuple[Stops, dict[str, dict[str, Any]]],
) -> tuple[dict[str, Stops], dict[str, dict[str, Any]]]:
    """Every candidate of a bundle's candidates.json stopping `records` at the thresholds the
    bundle ships (no recalibration), and `selected`: per group the candidate the bundle serves
    (serving.choice, the LM probe where its rules say so; `monitor`: the LM probe's stops of
    `records` at `table`, and the thresholds used, as training.evaluate.stops.score_stops gives
    them). What `failfast evaluate` shows on new runs scored with a bundle whose training output
    is not at hand."""
    from serving.choice import MONITOR, Choice
    from training.model.stack import stack_model_from_json

    choice = Choice.from_json(candidates, table)
    recs = list(records)
    add_length_scores(recs)
    if choice.stack is not None and all(
        b in r.scores for r in recs for b in choice.stack.bases
    ):  # fmt: skip
        model = stack_model_from_json(candidates["stack"])
        recs = [dataclasses.replace(r, scores={**r.scores, STACK: model.scores(r)}) for r in recs]
    tables = {n: t for n, t in choice.tables.items() if n != MONITOR}
    stops: dict[str, Stops] = {}
    info: dict[str, dict[str, Any]] = {}
    for name, (st, used) in calibrated_stops(recs, tables, target).items():
        stops[name] = st
        info[name] = {
            "threshold": used,
            "refused_groups": refused_groups(used),
            "calibration_runs": candidates.get("calibration_runs"),
            "from": "the bundle's candidates.json",
        }
    mon, mon_used = monitor
    sel: Stops = {}
    used_sel: dict[str, dict[str, Any]] = {}
    for r in recs:
        g = str(getattr(r, table.group_by))
        with quiet_lookups():  # the monitor's own lookup (score_stops) said it once
            th = choice.served(g, target, table.lookup(g, target), scorable=set(stops))
        name = th.scorer if th.scorer in stops else MONITOR
        sel[r.run_id] = (stops[name] if name != MONITOR else mon)[r.run_id]
        src: dict[str, Any] = info[name]["threshold"] if name != MONITOR else mon_used
        used_sel[g] = {**src.get(g, {}), "scorer": name, "why": th.why}
    stops["selected"] = sel
    info["selected"] = {
        "threshold": used_sel,
        "refused_groups": refused_groups(used_sel),
        "calibration_runs": candidates.get("calibration_runs"),
        "from": "the bundle's candidates.json: what the bundle serves",
        "choice": {g: {"chosen": u["scorer"]} for g, u in used_sel.items()},
    }
    return stops, info
