"""thresholds.json as types, and the one rule that gives a run its stop and warn thresholds.

training.calibrate fits the file on validation records: per threshold group (agent family, or
source) and pooled, a stop threshold for each run-level FPR target (or the reason it was refused)
and one warn threshold, under the check schedule the thresholds were calibrated for. A bundle
carries it in monitor.json; serving and offline evaluation both look thresholds up with
`ThresholdTable.lookup`. docs/BUNDLE.md describes the file.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, Field, model_validator

from monitor.config import StrictModel
from monitor.schedule import Schedule

log = logging.getLogger(__name__)

# The serving defaults, defined here once: training.config, the manifest and feedback read them.
DEFAULT_TARGET = 0.05
"""Run-level FPR target served when neither the bundle nor the caller names one."""
DEFAULT_GROUP_BY: Literal["agent", "source"] = "source"
"""What thresholds are grouped by: the run's data source (every shipped config's choice)."""
DEFAULT_MARGIN = 2.0
"""Each target is fitted at target / margin (docs/RESULTS.md, "Shift views", says why 2)."""
DEFAULT_FALLBACK: Literal["pooled", "none"] = "none"
"""A group without its own threshold for a target gets no stop by score (warn only)."""
_BEFORE_GROUPS = {"group_by": "agent", "margin": 1.0, "fallback": "pooled"}
"""What a thresholds.json in the format before `groups` (its groups under `per_agent`) meant by
a field it leaves out: such files are read as they were written."""


def group_name(groups: Container[str], group_by: str, agent: str, source: str = "") -> str:
    """The threshold group a run belongs to, given the groups that exist: its source when the
    groups are sources and the run names one, unless that source is no group and the agent name
    is (a group named by `failfast calibrate --agent`; readers name a transcript's folder as its
    source); else its agent. ThresholdTable.group_of and verdict feedback both use this rule."""
    if group_by != "source" or not source:
        return agent
    if source not in groups and agent in groups:
        return agent
    return source


def target_key(target: float) -> str:
    """The JSON key of a target: 0.05 -> "0.05", 0.1 -> "0.1"."""
    return f"{target:g}"


class StopThreshold(StrictModel):
    """One target of one group: a threshold with its validation FPR and bound, or a refusal."""

    threshold: float | None = None
    """Stop when the schedule's checked scores reach this."""
    fpr_val: float | None = None
    """Run-level FPR of the threshold on the calibration runs."""
    fpr_upper_bound: float | None = None
    """Upper bound on the run-level FPR (the table's method and confidence)."""
    refused: str | None = None
    """Why the target cannot be certified with this group's calibration runs (no threshold)."""
    margin: float | None = None
    """The margin this target was fitted with (target / margin) where the table's
    `adaptive_margin` gave this group its own; None: the table's `margin`."""


class GroupThresholds(StrictModel):
    """The thresholds of one group (or the pooled ones)."""

    n_resolved: int
    """Resolved calibration runs of the group."""
    stop: dict[str, StopThreshold] = Field(default_factory=dict)
    """Target key (`target_key`) -> stop threshold or refusal."""
    warn: float
    """Warn when a single checked score reaches this."""

    def stop_at(self, target: float) -> float | None:
        """The stop threshold for `target`, None when refused or not fitted."""
        for key, entry in self.stop.items():
            if abs(float(key) - target) < 1e-9 and entry.threshold is not None:
                return entry.threshold
        return None


@dataclass
class Thresholds:
    """The thresholds a run uses, and where they came from.

    Attributes:
        stop: stop threshold on the score (inf: no stop by score, warn only).
        warn: warn threshold on the score (inf: never warns by score).
        origin: where the stop threshold came from: "agent" (the group's own), "pooled",
            "pooled-unknown-agent" (a group never calibrated), "refused" (the group's target is
            not certified) or "unknown-group" (fallback none, a group the table does not hold).
    """

    stop: float
    warn: float
    origin: str
    scorer: str = "monitor"
    """The candidate these thresholds are for, the one that scores the run ("monitor": the LM
    probe; a bundle's candidates.json can choose another per group, serving.choice)."""
    why: str = ""
    """Why that candidate serves the run's group, in words ("" for the LM probe by default)."""
    task_prior: float | None = None
    """The run's task prior when the known-task choice serves it (serving.task_prior; None: the
    run is served as an unknown task)."""


class ThresholdTable(StrictModel):
    """thresholds.json: per-group and pooled thresholds, and how they were picked."""

    mode: str
    """"bound" (an upper bound on the FPR within the target) or "empirical"."""
    confidence: float
    """Confidence of the bound."""
    method: str
    """"conformal", "clopper-pearson" or "empirical"."""
    schedule: Schedule
    """The check schedule the thresholds were calibrated for (the served policy uses it)."""
    group_by: Literal["agent", "source"] = DEFAULT_GROUP_BY
    """What the group names are: the run's "agent" family or its "source"."""
    targets: list[float]
    """Run-level FPR targets fitted."""
    groups: dict[str, GroupThresholds] = Field(
        default_factory=dict, validation_alias=AliasChoices("groups", "per_agent")
    )
    """Group name -> its thresholds (read also as `per_agent`, the name before groups)."""
    pooled: GroupThresholds
    """All calibration runs together: the fallback of refused targets and unknown groups."""
    calibration: dict[str, Any] | None = None
    """Which runs calibrated the table, per group (written by `failfast train`)."""
    margin: float = DEFAULT_MARGIN
    """Each target was fitted at target / margin (a safety margin against task shift)."""
    adaptive_margin: float | None = None
    """When set, a group with n resolved calibration runs was fitted with the margin
    min(margin, 1 + adaptive_margin / sqrt(n)) (each stop entry says which: `margin`)."""
    fallback: Literal["pooled", "none"] = DEFAULT_FALLBACK
    """What a group without its own threshold for a target uses: "pooled" (the pooled
    threshold, whose FPR for that group is not certified) or "none" (no stop by score: the
    target is refused for that group, warn only)."""

    @model_validator(mode="before")
    @classmethod
    def _read_before_groups(cls, data: Any) -> Any:
        """A file with `per_agent` keeps the meaning its absent fields had when it was written."""
        if isinstance(data, dict) and "per_agent" in data and "groups" not in data:
            return {**_BEFORE_GROUPS, **data}
        return data

    def group_of(self, agent: str, source: str = "") -> str:
        """The group name a run is looked up under (`group_name` over this table's groups)."""
        return group_name(self.groups, self.group_by, agent, source)

    def lookup(self, agent: str | None, target: float) -> Thresholds:
        """Stop and warn thresholds of `agent` (a group name) at `target`.

        The agent's own stop threshold when it has one for the target; else, with fallback
        "pooled", the pooled one (origin "pooled", or "pooled-unknown-agent", with a warning,
        for an agent never calibrated), and with fallback "none" no stop by score (inf, origin
        "refused" for a calibrated group whose target is not certified, "unknown-group" for a
        group the table does not hold); refused everywhere: no stop by score. The warn threshold
        is the agent's own when it was calibrated, else the pooled
        one.
        """
        own = self.groups.get(agent) if agent is not None else None
        if agent is not None and own is None and self.groups:
            log.warning(
                "%r has no calibrated thresholds (they are keyed by %s: %s); %s",
                agent,
                self.group_by,
                ", ".join(sorted(self.groups)),
                "no stop by score (fallback none; `failfast calibrate` gives it thresholds)"
                if self.fallback == "none"
                else "using the pooled ones",
            )
        warn = (own or self.pooled).warn
        if own is not None and (t := own.stop_at(target)) is not None:
            return Thresholds(t, warn, "agent")
        if self.fallback == "none" and agent is not None:
            # a group never calibrated is not "refused" (nothing was asked of it): say which
            return Thresholds(math.inf, warn, "refused" if own is not None else "unknown-group")
        if (t := self.pooled.stop_at(target)) is not None:
            origin = "pooled" if own is not None or agent is None else "pooled-unknown-agent"
            return Thresholds(t, warn, origin)
        return Thresholds(math.inf, warn, "refused")

    def to_json(self) -> dict[str, Any]:
        """The thresholds.json dict (unset fields left out: a refused target has no threshold)."""
        return self.model_dump(mode="json", exclude_none=True)
