"""Known tasks on the training side: the verdict table a bundle serves, the task prior's scores
on records, and the known-task choice of candidates.json (serving.task_prior has the design)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from monitor.types import Trajectory
from serving.numeric import logit, sigmoid
from serving.task_prior import MONITOR_PRIOR, PRIOR, TaskPrior
from training.data.records import RunRecord


def task_table(
    runs: Iterable[Trajectory], *, min_runs: int, weight: float = 1.0, group_by: str = "agent"
) -> TaskPrior:
    """The verdict table of the labelled runs among `runs` (unlabelled ones are left out), with
    each threshold group's agent family (`group_by`: "agent" or "source")."""
    labelled = [r for r in runs if r.resolved is not None]
    return TaskPrior.from_verdicts(
        ((r.instance_id, r.agent, bool(r.resolved)) for r in labelled),
        min_runs=min_runs,
        weight=weight,
        families={str(getattr(r, group_by)): r.agent for r in labelled},
        run_ids=[r.id for r in labelled],
    )


def known_records(records: Sequence[RunRecord], table: TaskPrior) -> list[RunRecord]:
    """The records of known tasks (by `table`, leave-agent-out) with two more scores per prefix:
    PRIOR (the task prior) and MONITOR_PRIOR (TaskPrior.combine of the LM probe's score and it,
    the numbers a live session gives); records of unknown tasks are left out."""
    out = []
    for r in records:
        p = table.prior(r.instance_id, r.agent)
        if p is None:
            continue
        if "monitor" not in r.scores:
            raise ValueError(f"run {r.run_id} has no monitor scores")
        m = np.asarray(r.scores["monitor"], dtype=np.float64)
        both = sigmoid(logit(m) + table.weight * float(logit(np.asarray(p))))
        prior = np.full(r.n_steps, p)
        out.append(dataclasses.replace(r, scores={**r.scores, PRIOR: prior, MONITOR_PRIOR: both}))
    return out


def known_candidates(
    calibration: Sequence[RunRecord],
    table: Any,
    *,
    scorers: Sequence[str],
    prior: TaskPrior,
    ordinary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """candidates.json's "known_tasks": training.evaluate.shipped.shipped_candidates on the
    calibration runs of known tasks, with PRIOR and MONITOR_PRIOR offered too, and the verdict
    table ("prior"). `ordinary`: the top level of candidates.json; per group, the targets where
    the known choice did not save more held out than the ordinary one (`known_wins`) are listed
    under `as_unknown` and served as an unknown task's. Raises ValueError when no calibration
    run's task is known."""
    from training.evaluate.shipped import shipped_candidates

    known = known_records(calibration, prior)
    if not known:
        raise ValueError(
            f"no calibration run's task has {prior.min_runs} or more runs by other agents"
        )
    out = shipped_candidates(known, table, scorers=[*scorers, PRIOR, MONITOR_PRIOR])
    ordinary = (ordinary or {}).get("chosen") or {}
    for g, entry in out["chosen"].items():  # the gate: see known_wins
        keys = [f"{float(t):g}" for t in table.targets]
        entry["as_unknown"] = [k for k in keys if not known_wins(entry, ordinary.get(g), k)]
    out["prior"] = prior.to_json()
    out["why"] = (
        f"known tasks ({prior.min_runs}+ runs by other agents in the verdict table): " + out["why"]
    )
    return out


def with_verdicts(table: TaskPrior, records: Iterable[RunRecord]) -> TaskPrior:
    """`table` with the verdicts of `records` added (the evaluated runs' tasks as a benchmark
    user would know them: other agents' public results; a run's own agent never counts). A run
    the table counted already (`failfast known-tasks`) is not counted again."""
    counts = {i: {a: list(c) for a, c in per.items()} for i, per in table.counts.items()}
    out = TaskPrior(counts, table.p0, table.min_runs, table.weight, table.families, set(table.seen))
    for r in records:
        out.add(r.run_id, r.instance_id, r.agent, bool(r.resolved))
    return out


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
    out: dict[str, Any] = {
        "min_runs": prior.min_runs,
        "weight": prior.weight,
        "verdicts": "the bundle's table plus the evaluated runs' own (other agents' only)",
        "known_runs": len(test),
        "known_calibration_runs": len(cal),
    }
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
    out: dict[str, Any] = {
        "min_runs": table.min_runs,
        "weight": table.weight,
        "verdicts": "the bundle's table plus the evaluated runs' own (other agents' only)",
        "from": "the bundle's candidates.json (known_tasks), as shipped",
        "known_runs": len(test),
    }
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


def known_wins(
    known: Mapping[str, Any] | None, ordinary: Mapping[str, Any] | None, key: str
) -> bool:
    """Whether a group's known-task choice serves target `key` (e.g. "0.05"): its choice saved
    more on held-out known calibration runs than the group's ordinary choice saved on its
    held-out calibration runs (both `held_out_by_target` of training.evaluate.select); a group
    the ordinary choice does not hold, or holds no figure for, is served by the known choice
    where it has one. Measured in docs/RESULTS.md, twenty-fifth round (the gate)."""
    k = ((known or {}).get("held_out_by_target") or {}).get(key)
    if k is None:
        return False
    o = ((ordinary or {}).get("held_out_by_target") or {}).get(key)
    return o is None or float(k) > float(o)
