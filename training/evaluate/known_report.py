"""`failfast evaluate`'s "known_tasks": the evaluated runs served as a bundle with a verdict
table of known tasks serves them (training.evaluate.known_tasks builds the table and the choice;
serving.task_prior has the design)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serving.task_prior import MONITOR_PRIOR, PRIOR, TaskPrior
from training.data.records import RunRecord, Stops
from training.evaluate.known_tasks import known_records, known_wins, with_verdicts


def known_section(
    records: Sequence[RunRecord],
    calibration: Sequence[RunRecord] | None,
    thresholds: Any,
    target: float,
    scorers: Sequence[str],
    candidates: dict[str, Any],
    served: Stops,
    cal_info: Mapping[str, Any],
) -> dict[str, Any]:
    """The report's "known_tasks" beside `served`, its served choice's stops (the monitor's
    where the report has none): recalibrated on the calibration runs of known tasks (`scorers`:
    those the report calibrates) when there are some (`known_report`), else as the bundle ships
    it (`known_from_bundle`)."""
    if not calibration:
        return known_from_bundle(
            records, candidates, thresholds, target=target, served=dict(served)
        )
    return known_report(
        records,
        calibration,
        thresholds,
        target=target,
        scorers=scorers,
        prior=TaskPrior.from_json(candidates["known_tasks"]["prior"]),
        served=dict(served),
        ordinary=(cal_info.get("selected") or {}).get("choice") or {},
    )


def known_report(
    records: Sequence[RunRecord],
    calibration: Sequence[RunRecord],
    thresholds: Any,
    *,
    target: float,
    scorers: Sequence[str],
    prior: TaskPrior,
    served: dict[str, int | None],
    ordinary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`failfast evaluate`'s "known_tasks": the evaluated runs served as a bundle with this
    verdict table serves them when the evaluated tasks' other-agent verdicts are known too
    (`with_verdicts`): known runs by the known-task choice, recalibrated on the known calibration
    runs by training's procedure (the choice made at `target` alone, as the report's
    `calibrated: selected` is), the others by `served` (the ordinary served choice's stops). Per agent and overall: runs, known runs, and tokens saved, realized FPR and recall
    without and with the known-task choice."""
    from training.evaluate.shipped import as_shipped

    table = with_verdicts(prior, records)
    test = known_records(records, table)
    cal = known_records(calibration, prior)
    out = {**_header(table, test), "known_calibration_runs": len(cal)}
    if not test or not cal:
        out["note"] = "no known evaluated or calibration runs: every run is served as unknown"
        return out
    stops, info = as_shipped(
        cal, test, thresholds, target=target, scorers=[*scorers, PRIOR, MONITOR_PRIOR]
    )
    if "selected" not in stops:
        out["note"] = "no per-group choice (too few known calibration runs for the stack)"
        return out
    # as the bundle serves it: a group the known choice refuses at the target, or whose known
    # choice did not save more held out than its ordinary one (`ordinary`: the report's own
    # per-group choice, known_wins), is served as an unknown task's
    used = info["selected"]["threshold"]
    key = f"{target:g}"
    choice = info["selected"].get("choice") or {}

    def known_path(g: str) -> bool:
        th = (used.get(g) or {}).get("threshold")
        return th is not None and known_wins(choice.get(g), (ordinary or {}).get(g), key)

    known_ids = {r.run_id for r in test if known_path(str(getattr(r, thresholds.group_by)))}
    both = {
        r.run_id: stops["selected"].get(r.run_id) if r.run_id in known_ids else served.get(r.run_id)
        for r in records
    }
    out["known_runs_served"] = len(known_ids)
    out["chosen"] = {g: c["scorer"] for g, c in used.items() if known_path(g)}
    return {**out, **_rates(records, served, both, known_ids)}


def known_from_bundle(
    records: Sequence[RunRecord],
    candidates: dict[str, Any],
    thresholds: Any,
    *,
    target: float,
    served: dict[str, int | None],
) -> dict[str, Any]:
    """`known_report` without calibration records (new runs scored by a bundle, `failfast
    evaluate --bundle B --data D --score-data`): each known run is served as the bundle serves it
    (serving.choice: the known-task choice's candidate and thresholds as shipped, the ordinary
    path where the known choice has none for its group), the others by `served`."""
    from serving.choice import Choice
    from training.evaluate.calibrated import add_length_scores, calibrated_stops
    from training.evaluate.select import STACK
    from training.model.stack import stack_model_from_json

    choice = Choice.from_json(candidates, thresholds)
    if choice.task_prior is None or choice.known is None:
        raise ValueError("candidates.json has no known_tasks section")
    table = with_verdicts(choice.task_prior, records)
    test = known_records(records, table)
    add_length_scores(test)
    section = candidates["known_tasks"]
    if "stack" in section:
        model = stack_model_from_json(section["stack"])
        test = [
            dataclasses.replace(r, scores={**r.scores, STACK: model.scores(r)})
            if all(b in r.scores for b in model.bases)
            else r
            for r in test
        ]
    stops = {n: st for n, (st, _) in calibrated_stops(test, choice.known.tables, target).items()}
    out = {**_header(table, test), "from": "the bundle's candidates.json (known_tasks), as shipped"}
    both = dict(served)
    known_ids: set[str] = set()
    chosen: dict[str, str] = {}
    for r in test:
        g = str(getattr(r, thresholds.group_by))
        p = table.prior(r.instance_id, r.agent)
        th = choice.served(g, target, thresholds.lookup(g, target), scorable=set(stops), prior=p)
        if th.task_prior is None:  # the known choice has nothing for the group: as unknown
            continue
        both[r.run_id] = stops[th.scorer].get(r.run_id)
        known_ids.add(r.run_id)
        chosen[g] = th.scorer
    out["known_runs_served"] = len(known_ids)
    out["chosen"] = chosen
    return {**out, **_rates(records, served, both, known_ids)}


def _header(table: TaskPrior, known: Sequence[RunRecord]) -> dict[str, Any]:
    """What both known-task reports start with: the table's settings and the known runs."""
    return {
        "min_runs": table.min_runs,
        "weight": table.weight,
        "verdicts": "the bundle's table plus the evaluated runs' own (other agents' only)",
        "known_runs": len(known),
    }


def _rates(
    records: Sequence[RunRecord],
    served: dict[str, int | None],
    both: dict[str, int | None],
    known_ids: set[str],
) -> dict[str, Any]:
    """Overall and per agent: runs, runs served by the known choice, and tokens saved, realized FPR and recall
    served without (`served`) and with (`both`) the known-task choice."""
    from training.evaluate.intervals import Outcome

    def rates(rs: Sequence[RunRecord]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "runs": len(rs),
            "known_runs_served": sum(r.run_id in known_ids for r in rs),
        }
        for name, st in (("served", served), ("with_known_tasks", both)):
            fpr, recall, saved = Outcome.of(rs, st).rates()
            row[name] = {"tokens_saved": saved, "realized_fpr": fpr, "recall": recall}
        return row

    by_agent: dict[str, list[RunRecord]] = {}
    for r in records:
        by_agent.setdefault(r.agent, []).append(r)
    return {
        "overall": rates(records),
        "per_agent": {a: rates(rs) for a, rs in sorted(by_agent.items())},
    }


def known_lines(known: Mapping[str, Any] | None, p: Callable[[float | None], str]) -> list[str]:
    """The report's `known_tasks` as a markdown table, fractions formatted by `p` (nothing when
    it has none)."""
    if not known or "overall" not in known:
        return []
    lines = [
        "",
        f"Known tasks ({known['known_runs']} runs whose task has {known['min_runs']}+ runs by "
        f"other agents, counting the evaluated runs' own verdicts; "
        f"{known.get('known_runs_served', 0)} served by the known-task choice):",
        "",
        "| scope | runs | served by it | tokens saved, served | FPR | tokens saved, known tasks "
        "| FPR |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [*known["per_agent"].items(), ("overall", known["overall"])]
    for scope, r in rows:
        a, b = r["served"], r["with_known_tasks"]
        lines.append(
            f"| {scope} | {r['runs']} | {r['known_runs_served']} | {p(a['tokens_saved'])} | "
            f"{p(a['realized_fpr'])} | {p(b['tokens_saved'])} | {p(b['realized_fpr'])} |"
        )
    return lines
