"""One run scored by a candidate of the per-group choice (serving.choice), step by step, and the
rendered pieces of text its TF-IDF part counts."""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.types import Step, Trajectory
from serving.candidates import STEP_LIMIT, TOKEN_LIMIT, PieceText, length_scores
from serving.task_prior import MONITOR_PRIOR, PRIOR, PRIOR_CANDIDATES

MONITOR = "monitor"
MONITOR_TEXT = "monitor_text"
"""The second LM probe, which also reads the TF-IDF text (train.text_candidate): the graphs'
second logit plus its text part, served where the bundle has one (`Choice.text_probe`)."""


class CandidateRun:
    """One run scored by a candidate other than (or stacked over) the LM probe, step by step."""

    def __init__(
        self, choice: Any, name: str, header: str, group: str, prior: float | None = None
    ) -> None:
        # choice: the serving.choice.Choice whose parameters score the run (not imported: that
        # module imports this one)
        self.choice = choice
        self.name = name
        self.group = group
        self.prior = prior
        if name in PRIOR_CANDIDATES and (prior is None or choice.task_prior is None):
            raise ValueError(f"candidate {name!r} needs a known task's prior")
        self._counts: dict[int, float] = {}
        if choice.tfidf is not None and self._uses("tfidf_lr"):
            self._counts = choice.tfidf.piece_counts(header)
        self._tokens: list[int] = []
        self._bases: dict[str, list[float]] = {}

    def _uses(self, base: str) -> bool:
        if self.name == base or (self.name == MONITOR_PRIOR and base == MONITOR):
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
        if self.name == PRIOR and self.prior is not None:
            return float(self.prior)
        if self.name == MONITOR_PRIOR and self.prior is not None and c.task_prior is not None:
            return c.task_prior.combine(now[MONITOR], self.prior)
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
