"""Known tasks: other agents' verdicts on the run's task, served beside the monitor (issue 26).

Benchmark users rerun tasks that other agents have already run, and those verdicts are public
(the run reports the label readers parse). A `TaskPrior` holds, per task (instance id) and
agent, how many labelled runs there were and how many ended unresolved. For a run of agent A on
task T, the prior counts only *other* agents' runs of T (A's own runs never count, so a run
cannot see its own verdict, and a rerun of a known failure is not stopped for being a rerun),
smoothed by one pseudo-run at the table's overall failure rate p0:

    prior = (unresolved others + p0) / (others + 1)

A task with fewer than `min_runs` other-agent runs is unknown (`prior` returns None) and the
bundle serves its ordinary choice there. On known tasks it serves the choice calibrated on known
calibration runs only (serving.choice, `Choice.known`), among candidates that include
`monitor_prior` = sigmoid(logit(LM probe) + weight * logit(prior)) and `prior` itself.
Measured in docs/RESULTS.md ("Known tasks").
"""

from __future__ import annotations

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
    """

    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    p0: float = 0.5
    min_runs: int = 4
    weight: float = 1.0
    families: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.p0 < 1.0:
            raise ValueError(f"p0 {self.p0} is not in (0, 1): the table needs both verdicts")
        if self.min_runs < 1:
            raise ValueError(f"min_runs {self.min_runs} < 1")

    @classmethod
    def from_verdicts(
        cls,
        verdicts: Iterable[tuple[str, str, bool]],
        *,
        min_runs: int = 4,
        weight: float = 1.0,
        families: dict[str, str] | None = None,
    ) -> TaskPrior:
        """The table of (instance id, agent, resolved) verdicts.

        Raises:
            ValueError: no verdicts, or all of one kind (p0 would be 0 or 1).
        """
        counts: dict[str, dict[str, list[int]]] = {}
        n = fails = 0
        for inst, agent, resolved in verdicts:
            c = counts.setdefault(str(inst), {}).setdefault(str(agent), [0, 0])
            c[0] += 1
            c[1] += int(not resolved)
            n += 1
            fails += int(not resolved)
        if n == 0 or fails in (0, n):
            raise ValueError(
                f"a task prior needs resolved and unresolved verdicts ({n} runs, {fails} "
                "unresolved)"
            )
        return cls(counts, fails / n, min_runs, weight, dict(families or {}))

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
        return (fails + self.p0) / (runs + 1)

    def combine(self, monitor: float, prior: float) -> float:
        """`monitor_prior`: sigmoid(logit(monitor) + weight * logit(prior))."""
        z = logit(np.asarray([monitor, prior], dtype=np.float64))
        return float(sigmoid(z[0] + self.weight * z[1]))

    def to_json(self) -> dict[str, Any]:
        return {
            "p0": self.p0,
            "min_runs": self.min_runs,
            "weight": self.weight,
            "counts": self.counts,
            "families": self.families,
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
        return cls(counts, p0, int(d.get("min_runs", 4)), float(d.get("weight", 1.0)), families)
