"""The scorer a bundle serves for each threshold group: the candidate chosen in candidates.json.

`failfast train` calibrates every candidate (the LM probe "monitor", the signals LR, TF-IDF, the
step and token limits, the stack) by the monitor's procedure on the same calibration runs and
chooses per group and target the one that saved the most tokens on calibration runs held out of
its thresholds (training.evaluate.select). A live session, whole-run scoring and offline replay
all serve that candidate with its own thresholds (`Choice.served`), so the scores of a live
session equal those of a replay of the same steps.

The LM probe is served where:
- the bundle has no candidates.json, or it is not listed (hashed) in monitor.json;
- the group chose it, or the group is not in candidates.json;
- `failfast calibrate` re-calibrated the group without re-calibrating its candidates (from
  decision logs, which hold the LM probe's scores only): its candidates' thresholds are the
  training run's, the monitor's are new, so the comparison behind the choice no longer holds.
  Where `failfast calibrate` scored and calibrated every candidate on the group's runs and made
  the choice on them (training.evaluate.recalibrate_choice), the entry says `calibrated_by` and is
  served like a choice `failfast train` made;
- the chosen candidate has no threshold for the served target (refused), or cannot be scored
  (its parameters are missing).

A known task (serving.task_prior: a run whose task other agents have run often enough, by the
bundle's verdict table) is served by the known-task choice (`Choice.known`, candidates.json's
"known_tasks"), calibrated on known calibration runs only and offering `monitor_prior` and
`prior` too; where that choice has no entry or no threshold for the group and target, or the
group was re-calibrated, the run is served as an unknown task is.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.thresholds import Thresholds, ThresholdTable, target_key
from serving.candidate_run import MONITOR, MONITOR_TEXT, CandidateRun
from serving.candidates import (
    STEP_LIMIT,
    TOKEN_LIMIT,
    PieceText,
    SignalsLR,
    TfidfLR,
)
from serving.stack import Stack, StackBag, stack_from_json
from serving.task_prior import MONITOR_PRIOR, PRIOR_CANDIDATES, TaskPrior

log = logging.getLogger(__name__)


@dataclass
class Choice:
    """candidates.json, loaded (see the module docstring).

    Attributes:
        chosen: group -> {"scorer", "by_target": {target key: name}, ...}.
        tables: candidate name -> its thresholds (ThresholdTable).
        signals, tfidf, stack: the candidates' numpy parameters (None: not in the file).
        recalibrated: groups `failfast calibrate` re-calibrated (served by the monitor).
        text_probe: whether the bundle's graphs carry the second probe (MONITOR_TEXT); the
            scorer sets it (candidates.json does not know the graphs).
        task_prior: the verdict table of known tasks (None: the bundle has none).
        known: the known-task choice (a Choice over the same parameters with its own
            thresholds, stack and choice; None: none).
    """

    chosen: dict[str, dict[str, Any]]
    tables: dict[str, ThresholdTable]
    signals: SignalsLR | None = None
    tfidf: TfidfLR | None = None
    stack: Stack | StackBag | None = None
    recalibrated: set[str] = field(default_factory=set)
    text_probe: bool = False
    task_prior: TaskPrior | None = None
    known: Choice | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], monitor_table: ThresholdTable | None) -> Choice:
        params = d.get("params") or {}
        out = cls(
            chosen=dict(d.get("chosen") or {}),
            tables={n: ThresholdTable.model_validate(t) for n, t in d["thresholds"].items()},
            signals=SignalsLR.from_json(params["signals_lr"]) if "signals_lr" in params else None,
            tfidf=TfidfLR.from_json(params["tfidf_lr"]) if "tfidf_lr" in params else None,
            stack=stack_from_json(d["stack"]) if "stack" in d else None,
            recalibrated=recalibrated_groups(monitor_table.calibration if monitor_table else None),
        )
        kt = d.get("known_tasks")
        if kt:
            prior = TaskPrior.from_json(kt["prior"])
            known = cls.from_json({**kt, "params": params}, None)
            known.recalibrated = out.recalibrated
            known.task_prior = out.task_prior = prior
            out.known = known
        return out

    def prior_of(self, instance_id: str | None, agent: str | None, group: str = "") -> float | None:
        """The task prior of a run of `agent` (threshold group `group`) on `instance_id` (None:
        no table, the task is unknown to it, or the run's agent family is unknown;
        serving.task_prior)."""
        if self.task_prior is None:
            return None
        t = self.task_prior
        return t.prior(instance_id, t.family(agent, group))

    def servable(self, name: str) -> bool:
        """Whether this bundle can score candidate `name` without torch."""
        if name in (MONITOR, STEP_LIMIT, TOKEN_LIMIT):
            return True
        if name == MONITOR_TEXT:
            return self.text_probe
        if name in PRIOR_CANDIDATES:
            return self.task_prior is not None
        if name == "signals_lr":
            return self.signals is not None
        if name == "tfidf_lr":
            return self.tfidf is not None
        if name == "stack":
            return self.stack is not None and all(self.servable(b) for b in self.stack.bases)
        return False

    def served(
        self,
        group: str,
        target: float,
        monitor: Thresholds,
        scorable: Container[str] | None = None,
        prior: float | None = None,
    ) -> Thresholds:
        """The thresholds (with the candidate they are for, `Thresholds.scorer`) a run of
        `group` is served with at `target`; `monitor`: the LM probe's own thresholds for it,
        served when the choice is not. `scorable`: the candidates the caller has scores of
        (offline evaluation from records); None: those this bundle's parameters can score.
        `prior`: the run's task prior (`prior_of`; None: an unknown task)."""
        if prior is not None and self.known is not None and group not in self.recalibrated:
            th = self.known.known_served(group, target, scorable)
            if th is not None:
                return dataclasses.replace(th, task_prior=prior)

        def probe(why: str) -> Thresholds:
            return dataclasses.replace(monitor, scorer=MONITOR, why=why)

        entry = self.chosen.get(group)
        if entry is None:
            return probe("the LM probe: the group is not in candidates.json")
        mine = entry.get("calibrated_by") == "failfast calibrate"  # chosen by it, on the same runs
        if group in self.recalibrated and not mine:
            return probe("the LM probe: the group was re-calibrated by `failfast calibrate`")
        name = chosen_name(entry, target)
        if name == MONITOR:
            return probe("the LM probe: chosen on held-out calibration runs")
        ok = self.servable(name) if scorable is None else name in scorable
        if not ok or name not in self.tables:
            return probe(f"the LM probe: the chosen {name} cannot be scored by this bundle")
        th = self.tables[name].lookup(group, target)
        if not math.isfinite(th.stop) or (mine and th.origin != "agent"):
            # (a choice calibrate made stands on the group's own thresholds, not the training
            # run's pooled ones)
            return probe(f"the LM probe: the chosen {name} has no threshold at {target:g}")
        why = f"{name}: it saved the most tokens on held-out calibration runs of this group"
        if mine:
            why += " (`failfast calibrate`, on the runs it calibrated)"
        if target_key(target) in (entry.get("no_evidence") or ()):
            why = (
                f"{name}: chosen over all targets (no candidate stopped a held-out calibration "
                f"run of this group at {target:g})"
            )
        return dataclasses.replace(th, scorer=name, why=why)

    def known_served(
        self, group: str, target: float, scorable: Container[str] | None
    ) -> Thresholds | None:
        """The known-task choice's thresholds for `group` at `target` (self is `known`); None
        where it has none, or where the known choice did not save more on held-out calibration
        runs than the ordinary one (`as_unknown`, training.evaluate.known_tasks.known_wins): the
        caller serves the run as an unknown task."""
        entry = self.chosen.get(group)
        if entry is None or target_key(target) in (entry.get("as_unknown") or ()):
            return None
        name = chosen_name(entry, target)
        ok = self.servable(name) if scorable is None else name in scorable or name == MONITOR
        if not ok or name not in self.tables:
            return None
        th = self.tables[name].lookup(group, target)
        if not math.isfinite(th.stop):
            return None
        why = f"{name}: a known task; it saved the most tokens on held-out known calibration runs"
        return dataclasses.replace(th, scorer=name, why=why)

    def for_prior(self, prior: float | None) -> Choice:
        """The choice whose parameters score a run served with `prior` (Thresholds.task_prior):
        the known-task choice for a known task, else this one."""
        return self.known if prior is not None and self.known is not None else self

    def needs_monitor(self, name: str) -> bool:
        """Whether candidate `name` needs the graphs' scores (the LM probe, the second probe, or
        a stack over the LM probe)."""
        if name in (MONITOR, MONITOR_TEXT, MONITOR_PRIOR):
            return True
        return name == "stack" and self.stack is not None and MONITOR in self.stack.bases

    @property
    def tfidf_text(self) -> PieceText | None:
        """The pieces the TF-IDF candidate counts (None: the featuriser's; see `step_piece`)."""
        return self.tfidf.text if self.tfidf is not None else None

    def start(self, name: str, header: str, group: str, prior: float | None = None) -> CandidateRun:
        """A live run scored by candidate `name` (`header`: `header_piece` of the run; `prior`:
        its task prior where the known-task choice serves the run, Thresholds.task_prior): such
        a run is scored by the known-task choice's parameters (its stack)."""
        return CandidateRun(self.for_prior(prior), name, header, group, prior)

    def score_run(
        self,
        name: str,
        pieces: Sequence[str],
        signals: np.ndarray,
        tokens: Sequence[int],
        group: str,
        monitor: Sequence[float] | None = None,
        monitor_text: Sequence[float] | None = None,
        prior: float | None = None,
    ) -> np.ndarray:
        """Candidate `name`'s score after each step of a whole run: the same numbers a
        `CandidateRun` gives step by step (`pieces`: header + one rendered piece per step,
        `signals`: the full signal matrix, `tokens`: each step's tokens; `monitor`,
        `monitor_text`: the graphs' scores where `needs_monitor`)."""
        run = self.start(name, pieces[0], group, prior)
        out = [
            run.observe(
                pieces[k + 1],
                signals[k],
                int(tokens[k]),
                monitor[k] if monitor else None,
                monitor_text[k] if monitor_text else None,
            )
            for k in range(len(tokens))
        ]
        return np.asarray(out, dtype=np.float64)


def chosen_name(entry: Mapping[str, Any], target: float) -> str:
    """The candidate a group's candidates.json entry chose at `target`: its per-target choice,
    else its one choice over all targets, else the LM probe."""
    by_target = entry.get("by_target") or {}
    return str(by_target.get(target_key(target)) or entry.get("scorer") or MONITOR)


def recalibrated_groups(calibration: Mapping[str, Any] | None) -> set[str]:
    """Groups whose monitor thresholds `failfast calibrate` wrote (not those it kept from the
    training run), from the monitor table's `calibration` record."""
    cal = calibration or {}
    if cal.get("records") != "failfast calibrate":
        return set()
    per = cal.get("per_agent") or {}
    return {g for g, c in per.items() if not isinstance(c, dict) or "kept_from" not in c
            or c.get("kept_from") == "failfast calibrate"}  # fmt: skip


__all__ = ["MONITOR", "MONITOR_TEXT", "CandidateRun", "Choice", "recalibrated_groups"]
