"""Known tasks on the training side: the verdict table a bundle serves, the task prior's scores
on records, and the known-task choice of candidates.json with its gate (serving.task_prior has
the design; training.evaluate.known_report reports it)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from monitor.types import Trajectory
from serving.task_prior import MONITOR_PRIOR, PRIOR, TaskPrior, combine
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
        if p is not None:
            out.append(with_prior_scores(r, p, table.weight))
    return out


def with_prior_scores(record: RunRecord, prior: float, weight: float) -> RunRecord:
    """A copy of `record` with PRIOR (`prior` at every prefix) and MONITOR_PRIOR (`combine` of
    the LM probe's score and it) among its scores."""
    if "monitor" not in record.scores:
        raise ValueError(f"run {record.run_id} has no monitor scores")
    both = combine(record.scores["monitor"], prior, weight)
    scores = {**record.scores, PRIOR: np.full(record.n_steps, prior), MONITOR_PRIOR: both}
    return dataclasses.replace(record, scores=scores)


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

    # the cap (TaskPrior.max_others): the most other-agent runs a known calibration run has
    prior = copy.deepcopy(prior)
    most = prior.most_others((r.instance_id, r.agent) for r in calibration)
    prior.max_others = most if most >= prior.min_runs else 0
    known = known_records(calibration, prior)
    if not known:
        raise ValueError(
            f"no calibration run's task has {prior.min_runs} or more runs by other agents"
        )
    out = shipped_candidates(known, table, scorers=[*scorers, PRIOR, MONITOR_PRIOR])
    ordinary = (ordinary or {}).get("chosen") or {}
    keys = [f"{float(t):g}" for t in table.targets]
    for g, entry in out["chosen"].items():  # the gate: see known_wins
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
    out = copy.deepcopy(table)
    for r in records:
        out.add(r.run_id, r.instance_id, r.agent, bool(r.resolved))
    return out


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
