"""The scorer a bundle serves for each threshold group: the candidate chosen in candidates.json.

`failfast train` calibrates every candidate (the LM probe "monitor", the signals LR, TF-IDF, the
step and token limits, the stack) by the monitor's procedure on the same calibration runs and
chooses per group and target the one that saved the most tokens on calibration runs held out of
its thresholds (training.evaluate.select). A live session, whole-run scoring and offline replay
all serve that candidate with its own thresholds (`Choice.served`), so the scores of a live
session equal those of a replay of the same steps.

The LM probe is served where:
- the bundle has no candidates.json, or it is not listed (hashed) in monitor.json;
- the group chose it, the group is not in candidates.json (a group added by `failfast
  calibrate`), or `failfast calibrate` re-calibrated the group (its candidates' thresholds are
  the training run's, the monitor's are new: the comparison behind the choice no longer holds);
- the chosen candidate has no threshold for the served target (refused), or cannot be scored
  (its parameters are missing).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import BundleError
from monitor.thresholds import Thresholds, ThresholdTable, target_key
from monitor.types import Step, Trajectory
from serving.candidates import (
    STEP_LIMIT,
    TOKEN_LIMIT,
    PieceText,
    SignalsLR,
    TfidfLR,
    length_scores,
)
from serving.stack import Stack, StackBag, stack_from_json

log = logging.getLogger(__name__)

MONITOR = "monitor"
MONITOR_TEXT = "monitor_text"
"""The second LM probe, which also reads the TF-IDF text (train.text_candidate): the graphs'
second logit plus its text part, served where the bundle has one (`Choice.text_probe`)."""


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
    """

    chosen: dict[str, dict[str, Any]]
    tables: dict[str, ThresholdTable]
    signals: SignalsLR | None = None
    tfidf: TfidfLR | None = None
    stack: Stack | StackBag | None = None
    recalibrated: set[str] = field(default_factory=set)
    text_probe: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any], monitor_table: ThresholdTable | None) -> Choice:
        params = d.get("params") or {}
        return cls(
            chosen=dict(d.get("chosen") or {}),
            tables={n: ThresholdTable.model_validate(t) for n, t in d["thresholds"].items()},
            signals=SignalsLR.from_json(params["signals_lr"]) if "signals_lr" in params else None,
            tfidf=TfidfLR.from_json(params["tfidf_lr"]) if "tfidf_lr" in params else None,
            stack=stack_from_json(d["stack"]) if "stack" in d else None,
            recalibrated=recalibrated_groups(monitor_table.calibration if monitor_table else None),
        )

    @classmethod
    def load(cls, path: Path, monitor_table: ThresholdTable | None) -> Choice:
        """Read a bundle's candidates.json.

        Raises:
            BundleError: the file is unreadable or not a candidates file.
        """
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")), monitor_table)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BundleError(f"{path}: not a readable candidates file: {e}") from e

    def servable(self, name: str) -> bool:
        """Whether this bundle can score candidate `name` without torch."""
        if name in (MONITOR, STEP_LIMIT, TOKEN_LIMIT):
            return True
        if name == MONITOR_TEXT:
            return self.text_probe
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
    ) -> Thresholds:
        """The thresholds (with the candidate they are for, `Thresholds.scorer`) a run of
        `group` is served with at `target`; `monitor`: the LM probe's own thresholds for it,
        served when the choice is not. `scorable`: the candidates the caller has scores of
        (offline evaluation from records); None: those this bundle's parameters can score."""

        def probe(why: str) -> Thresholds:
            return dataclasses.replace(monitor, scorer=MONITOR, why=why)

        entry = self.chosen.get(group)
        if entry is None:
            return probe("the LM probe: the group is not in candidates.json")
        if group in self.recalibrated:
            return probe("the LM probe: the group was re-calibrated by `failfast calibrate`")
        by_target = entry.get("by_target") or {}
        name = str(by_target.get(target_key(target)) or entry.get("scorer") or MONITOR)
        if name == MONITOR:
            return probe("the LM probe: chosen on held-out calibration runs")
        ok = self.servable(name) if scorable is None else name in scorable
        if not ok or name not in self.tables:
            return probe(f"the LM probe: the chosen {name} cannot be scored by this bundle")
        th = self.tables[name].lookup(group, target)
        if not math.isfinite(th.stop):
            return probe(f"the LM probe: the chosen {name} has no threshold at {target:g}")
        why = f"{name}: it saved the most tokens on held-out calibration runs of this group"
        if target_key(target) in (entry.get("no_evidence") or ()):
            why = (
                f"{name}: chosen over all targets (no candidate stopped a held-out calibration "
                f"run of this group at {target:g})"
            )
        return dataclasses.replace(th, scorer=name, why=why)

    def needs_monitor(self, name: str) -> bool:
        """Whether candidate `name` needs the graphs' scores (the LM probe, the second probe, or
        a stack over the LM probe)."""
        if name in (MONITOR, MONITOR_TEXT):
            return True
        return name == "stack" and self.stack is not None and MONITOR in self.stack.bases

    @property
    def tfidf_text(self) -> PieceText | None:
        """The pieces the TF-IDF candidate counts (None: the featuriser's; see `step_piece`)."""
        return self.tfidf.text if self.tfidf is not None else None

    def start(self, name: str, header: str, group: str) -> CandidateRun:
        """A live run scored by candidate `name` (`header`: `header_piece` of the run)."""
        return CandidateRun(self, name, header, group)

    def score_run(
        self,
        name: str,
        pieces: Sequence[str],
        signals: np.ndarray,
        tokens: Sequence[int],
        group: str,
        monitor: Sequence[float] | None = None,
        monitor_text: Sequence[float] | None = None,
    ) -> np.ndarray:
        """Candidate `name`'s score after each step of a whole run: the same numbers a
        `CandidateRun` gives step by step (`pieces`: header + one rendered piece per step,
        `signals`: the full signal matrix, `tokens`: each step's tokens; `monitor`,
        `monitor_text`: the graphs' scores where `needs_monitor`)."""
        run = self.start(name, pieces[0], group)
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


def recalibrated_groups(calibration: Mapping[str, Any] | None) -> set[str]:
    """Groups whose monitor thresholds `failfast calibrate` wrote (not those it kept from the
    training run), from the monitor table's `calibration` record."""
    cal = calibration or {}
    if cal.get("records") != "failfast calibrate":
        return set()
    per = cal.get("per_agent") or {}
    return {g for g, c in per.items() if not isinstance(c, dict) or "kept_from" not in c
            or c.get("kept_from") == "failfast calibrate"}  # fmt: skip


class CandidateRun:
    """One run scored by a candidate other than (or stacked over) the LM probe, step by step."""

    def __init__(self, choice: Choice, name: str, header: str, group: str) -> None:
        self.choice = choice
        self.name = name
        self.group = group
        self._counts: dict[int, float] = {}
        if choice.tfidf is not None and self._uses("tfidf_lr"):
            self._counts = choice.tfidf.piece_counts(header)
        self._tokens: list[int] = []
        self._bases: dict[str, list[float]] = {}

    def _uses(self, base: str) -> bool:
        if self.name == base:
            return True
        return (
            self.name == "stack"
            and self.choice.stack is not None
            and base in self.choice.stack.bases
        )

    def observe(
        self,
        piece: str,
        signals: np.ndarray,
        tokens: int,
        monitor: float | None = None,
        monitor_text: float | None = None,
    ) -> float:
        """Add one step (its rendered piece, the signal vector after it in SIGNAL_NAMES order,
        its tokens, and the LM probe's score, or the second probe's, when `needs_monitor`);
        return the candidate's score after it."""
        c = self.choice
        if self.name == MONITOR_TEXT:
            if monitor_text is None:
                raise ValueError(f"{self.name} needs the second probe's score")
            self._tokens.append(int(tokens))
            return float(monitor_text)
        self._tokens.append(int(tokens))
        now: dict[str, float] = {}
        if self._uses("tfidf_lr") and c.tfidf is not None:
            c.tfidf.add_piece(self._counts, piece)
            now["tfidf_lr"] = c.tfidf.score_counts(self._counts)
        if self._uses("signals_lr") and c.signals is not None:
            now["signals_lr"] = float(c.signals.scores(np.asarray(signals)[None])[0])
        if self._uses(MONITOR):
            if monitor is None:
                raise ValueError(f"{self.name} needs the LM probe's score")
            now[MONITOR] = float(monitor)
        if self.name in now:
            return now[self.name]
        if self.name in (STEP_LIMIT, TOKEN_LIMIT):
            return float(length_scores(self._tokens)[self.name][-1])
        if self.name == "stack" and c.stack is not None:
            for b, v in now.items():
                self._bases.setdefault(b, []).append(v)
            bases = {b: np.asarray(v) for b, v in self._bases.items()}
            return float(c.stack.scores_for(self.group, bases, np.asarray(self._tokens))[-1])
        raise ValueError(f"candidate {self.name!r} cannot be scored")


def header_piece(featuriser: Any, task: str, agent: str, text: PieceText | None = None) -> str:
    """The header text the TF-IDF candidate counts: `text`'s (its own cuts), or the featuriser's
    window header when None (bundles written before PieceText)."""
    return text.header(task, agent) if text is not None else str(featuriser.header(task, agent))


def step_piece(featuriser: Any, step: Step, k: int, text: PieceText | None = None) -> str:
    """The rendered text of step k the TF-IDF candidate counts (the training side's run_pieces):
    `text`'s piece, or the featuriser's window piece when None."""
    return text.step(step, k) if text is not None else str(featuriser.render_step(step, k))


def run_pieces(featuriser: Any, traj: Trajectory, text: PieceText | None = None) -> list[str]:
    """The header followed by one rendered piece per step (see `step_piece`)."""
    if text is not None:
        return text.pieces(traj)
    return [header_piece(featuriser, traj.task, traj.agent, text)] + [
        step_piece(featuriser, s, k + 1, text) for k, s in enumerate(traj.steps)
    ]
