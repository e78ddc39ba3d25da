"""Known tasks: other agents' verdicts on the run's task, served beside the monitor (issue 26).

Benchmark users rerun tasks that other agents have already run, and those verdicts are public
(the run reports the label readers parse). A `TaskPrior` holds, per task (instance id) and
agent, how many labelled runs there were and how many ended unresolved. For a run of agent A on
task T, the prior counts only *other* agents' runs of T (A's own runs never count, so a run
cannot see its own verdict, and a rerun of a known failure is not stopped for being a rerun),
smoothed by one pseudo-run at the table's overall failure rate p0:

    prior = (unresolved others + p0) / (others + 1)

A task with more other-agent runs than `max_others` (the most any calibration run had) counts as
`max_others` runs at its own failure rate: the prior is never sharper than calibration saw, so
verdicts added later (`failfast known-tasks`, e.g. a leaderboard's many submissions) cannot push
scores past what the thresholds were calibrated on (docs/RESULTS.md, "prior sharpness").

A task with fewer than `min_runs` other-agent runs is unknown (`prior` returns None) and the
bundle serves its ordinary choice there. On known tasks it serves the choice calibrated on known
calibration runs only (serving.choice, `Choice.known`), among candidates that include
`monitor_prior` = sigmoid(logit(LM probe) + weight * logit(prior)) and `prior` itself.
Measured in docs/RESULTS.md ("Known tasks").
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serving.numeric import logit, sigmoid

PRIOR = "prior"
MONITOR_PRIOR = "monitor_prior"
PRIOR_CANDIDATES = (PRIOR, MONITOR_PRIOR)
"""The candidates only a known task has (a score from the prior)."""


@dataclass
class TaskPrior:
    """Verdict counts per task and agent (module docstring).

    Attributes:
        counts: instance id -> agent -> [runs, unresolved runs].
        p0: the table's unresolved share (the pseudo-run, and what `monitor_prior` would add for
            an unknown task, which it never scores).
        min_runs: fewer other-agent runs than this: the task is unknown.
        weight: the prior's logit weight in `monitor_prior`.
        families: threshold group -> the agent family its runs have in `counts` (a run whose
            harness names its group, or no agent, is still kept out of its own prior).
        seen: `run_digest` of every run counted (a run added twice is counted once).
        max_others: a task's other-agent runs count as at most this many, at their own failure
            rate (0: no cap; training sets the most any known calibration run had).
    """

    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    p0: float = 0.5
    min_runs: int = 4
    weight: float = 1.0
    families: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    max_others: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.p0 < 1.0:
            raise ValueError(f"p0 {self.p0} is not in (0, 1): the table needs both verdicts")
        if self.min_runs < 1:
            raise ValueError(f"min_runs {self.min_runs} < 1")
        if self.max_others < 0 or 0 < self.max_others < self.min_runs:
            raise ValueError(f"max_others {self.max_others} is neither 0 nor >= min_runs")

    @classmethod
    def from_verdicts(
        cls,
        verdicts: Iterable[tuple[str, str, bool]],
        *,
        min_runs: int = 4,
        weight: float = 1.0,
        families: dict[str, str] | None = None,
        run_ids: Iterable[str] = (),
    ) -> TaskPrior:
        """The table of (instance id, agent, resolved) verdicts (`run_ids`: the runs they are,
        kept as digests so that `add` counts each run once).

        Raises:
            ValueError: no verdicts, or all of one kind (p0 would be 0 or 1).
        """
        table = cls({}, 0.5, min_runs, weight, dict(families or {}))
        table.seen = {run_digest(r) for r in run_ids}
        n = fails = 0
        for inst, agent, resolved in verdicts:
            table.count(inst, agent, resolved)
            n += 1
            fails += int(not resolved)
        if n == 0 or fails in (0, n):
            raise ValueError(
                f"a task prior needs resolved and unresolved verdicts ({n} runs, {fails} "
                "unresolved)"
            )
        table.p0 = fails / n
        return table

    def count(self, instance_id: str, agent: str, resolved: bool) -> None:
        """Count one verdict (p0 stays: it is the calibration runs' rate)."""
        c = self.counts.setdefault(str(instance_id), {}).setdefault(str(agent), [0, 0])
        c[0] += 1
        c[1] += int(not resolved)

    def add(self, run_id: str, instance_id: str, agent: str, resolved: bool) -> bool:
        """Count a run's verdict unless it was counted before; whether it was counted now."""
        d = run_digest(run_id)
        if d in self.seen:
            return False
        self.seen.add(d)
        self.count(instance_id, agent, resolved)
        return True

    def most_runs(self) -> int:
        """The most runs any task has in the table."""
        return max((sum(c[0] for c in per.values()) for per in self.counts.values()), default=0)

    def others(self, instance_id: str, agent: str) -> tuple[int, int]:
        """(runs, unresolved runs) of `instance_id` by agents other than `agent`."""
        per = self.counts.get(instance_id) or {}
        runs = sum(c[0] for a, c in per.items() if a != agent)
        fails = sum(c[1] for a, c in per.items() if a != agent)
        return runs, fails

    def family(self, agent: str | None, group: str = "") -> str:
        """The agent family whose verdicts a run must not see: its group's family where the
        table knows the group, else `agent` ("" when neither)."""
        return self.families.get(group) or (agent or "")

    def prior(self, instance_id: str | None, agent: str) -> float | None:
        """P(unresolved) of a run of `agent` (a family, `family`) on `instance_id` from other
        agents' verdicts; None when the task is unknown (no id, or fewer than `min_runs`
        other-agent runs) or the agent is not named (its own verdicts could not be left out)."""
        if not instance_id or not agent:
            return None
        runs, fails = self.others(instance_id, agent)
        if runs < self.min_runs:
            return None
        if 0 < self.max_others < runs:  # the same rate, no more evidence than calibration saw
            return (fails * self.max_others / runs + self.p0) / (self.max_others + 1)
        return (fails + self.p0) / (runs + 1)

    def most_others(self, tasks: Iterable[tuple[str, str]]) -> int:
        """The most other-agent runs any of these (instance id, agent) pairs has (0: none)."""
        return max((self.others(i, a)[0] for i, a in tasks), default=0)

    def combine(self, monitor: float, prior: float) -> float:
        """`monitor_prior` of one score (`combine`, with this table's weight)."""
        return float(combine(monitor, prior, self.weight))

    def to_json(self) -> dict[str, Any]:
        return {
            "p0": self.p0,
            "min_runs": self.min_runs,
            "weight": self.weight,
            "counts": self.counts,
            "families": self.families,
            "seen": sorted(self.seen),
            "max_others": self.max_others,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskPrior:
        p0 = float(d["p0"])
        if not math.isfinite(p0):
            raise ValueError(f"p0 {p0} is not finite")
        counts = {
            str(i): {str(a): [int(c[0]), int(c[1])] for a, c in per.items()}
            for i, per in dict(d["counts"]).items()
        }
        families = {str(g): str(a) for g, a in dict(d.get("families") or {}).items()}
        seen = {str(x) for x in d.get("seen") or ()}
        return cls(
            counts,
            p0,
            int(d.get("min_runs", 4)),
            float(d.get("weight", 1.0)),
            families,
            seen,
            int(d.get("max_others", 0)),
        )


def combine(
    monitor: np.ndarray | float, prior: np.ndarray | float, weight: float = 1.0
) -> np.ndarray:
    """`monitor_prior` = sigmoid(logit(monitor) + weight * logit(prior)), elementwise (the LM
    probe's odds times the prior's, as naive Bayes would combine them)."""
    m = logit(np.asarray(monitor, dtype=np.float64))
    return sigmoid(m + weight * logit(np.asarray(prior, dtype=np.float64)))


def run_digest(run_id: str) -> str:
    """A short digest of a run id (the table keeps these, not the ids)."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:16]
