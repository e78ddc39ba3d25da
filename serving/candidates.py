"""The candidate scorers a bundle can ship besides the LM probe, as plain numpy parameters.

No torch and no scikit-learn: each is a few arrays in JSON (training.export.candidates writes
them from the fitted pipelines) and scores every prefix of a run the way the fitted pipeline
does (tests compare the two).

- `SignalsLR`: arcsinh -> standardise -> logistic regression on the loop-signal rows.
- `TfidfLR`: term counts of the rendered prefix (its own `PieceText` cuts of the same renderer,
  or, for bundles written before it had them, the featuriser's header and step pieces),
  sublinear TF-IDF, L2 norm, logistic regression.
- `Stack`, `StackBag`: the stack over them (serving.stack).
- `length_scores`: the step and token limits as scores.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import BundleError
from monitor.render import render_header, render_step
from monitor.types import Step, Trajectory
from serving.numeric import sigmoid as _sigmoid  # the one sigmoid (numerically stable)

TOKEN_PATTERN = r"(?u)\b\w\w+\b"
"""The terms a TF-IDF counts (scikit-learn's CountVectorizer default): the TF-IDF baseline's and
the LM probe's text columns', at training and when served."""
STEP_LIMIT = "step_limit"
TOKEN_LIMIT = "token_limit"


def length_scores(step_tokens: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
    """The length rules as scores after steps 1..k: steps so far / 1e4, tokens so far / 1e9
    (scaled below 1 so threshold midpoints behave as for probabilities)."""
    tok = np.asarray(step_tokens, dtype=np.float64)
    return {
        STEP_LIMIT: np.arange(1, len(tok) + 1, dtype=np.float64) / 1e4,
        TOKEN_LIMIT: np.cumsum(tok) / 1e9,
    }


@dataclass
class SignalsLR:
    """P(unresolved) from signal rows: sigmoid(((asinh x - mean) / scale) . coef + intercept)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def scores(self, signals: np.ndarray) -> np.ndarray:
        if not len(signals):
            return np.zeros(0)
        z = (np.arcsinh(np.asarray(signals, dtype=np.float64)) - self.mean) / self.scale
        return _sigmoid(z @ self.coef + self.intercept)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "signals_lr",
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SignalsLR:
        return cls(
            np.asarray(d["mean"], dtype=np.float64),
            np.asarray(d["scale"], dtype=np.float64),
            np.asarray(d["coef"], dtype=np.float64),
            float(d["intercept"]),
        )


@dataclass(frozen=True)
class PieceText:
    """The text a TF-IDF candidate trained with `train.tfidf_text` counts: monitor.render's header
    and step pieces with cuts of their own, longer than the LM window's
    (training.config.TfidfTextConfig holds the defaults, here every cut is given, and the
    measurements behind them). A bag of words costs nothing per extra character the way a token
    through the backbone does; the agent's own reasoning (1,000 characters of each thought) is
    where most of its gain over the window's cuts came from (docs/RESULTS.md)."""

    task_chars: int
    action_chars: int
    obs_head_chars: int
    obs_tail_chars: int
    thought_chars: int

    def header(self, task: str, agent: str = "") -> str:
        """The header piece: agent line and the task cut to `task_chars`."""
        return render_header(task, agent, task_chars=self.task_chars)

    def step(self, step: Step, k: int) -> str:
        """The piece of step number `k` (1-based); it starts and ends with a newline."""
        return render_step(
            step,
            k,
            action_chars=self.action_chars,
            obs_head_chars=self.obs_head_chars,
            obs_tail_chars=self.obs_tail_chars,
            thought_chars=self.thought_chars,
        )

    def pieces(self, traj: Trajectory) -> list[str]:
        """The header followed by one piece per step of `traj`."""
        return [self.header(traj.task, traj.agent)] + [
            self.step(s, k + 1) for k, s in enumerate(traj.steps)
        ]

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PieceText:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = set(d) - names, names - set(d)
        if unknown or missing:
            raise ValueError(
                f"tfidf_lr text: unknown fields {sorted(unknown)}, missing {sorted(missing)}"
            )
        return cls(**{k: int(v) for k, v in d.items()})


@dataclass
class TfidfLR:
    """P(unresolved) from the rendered prefix text (see the module docstring).

    Attributes:
        vocabulary: term -> column; idf: (V,); coef: (V,); token_pattern: the term regex
            (text lowercased first, as scikit-learn's CountVectorizer does by default).
        text: the pieces it counts (None: the featuriser's window pieces, as bundles written
            before PieceText count them).
        ngram_max: longest word n-gram counted, each formed within one piece as scikit-learn
            forms it (terms joined by one space); 1 in bundles written before it.
    """

    vocabulary: dict[str, int]
    idf: np.ndarray
    coef: np.ndarray
    intercept: float
    token_pattern: str = TOKEN_PATTERN
    text: PieceText | None = None
    ngram_max: int = 1

    def __post_init__(self) -> None:
        self._re = re.compile(self.token_pattern)

    def piece_counts(self, piece: str) -> dict[int, float]:
        """Vocabulary column -> count of one rendered piece's terms (words, then word n-grams up
        to `ngram_max`)."""
        out: dict[int, float] = {}
        words = self._re.findall(piece.lower())
        for n in range(1, self.ngram_max + 1):
            terms = (
                words if n == 1 else (" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
            )
            for term in terms:
                j = self.vocabulary.get(term)
                if j is not None:
                    out[j] = out.get(j, 0.0) + 1.0
        return out

    def add_piece(self, counts: dict[int, float], piece: str) -> None:
        """Add one rendered piece's term counts to a prefix's `counts` (in place)."""
        for j, n in self.piece_counts(piece).items():
            counts[j] = counts.get(j, 0.0) + n

    def logit_counts(self, counts: Mapping[int, float]) -> float:
        """The logit of a prefix from its accumulated term counts (column -> count)."""
        cols = np.fromiter(counts, dtype=np.int64, count=len(counts))
        tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        x = (1.0 + np.log(tf)) * self.idf[cols] if len(cols) else tf
        norm = float(np.sqrt((x * x).sum()))
        z = float((x * self.coef[cols]).sum()) / norm if norm else 0.0
        return z + self.intercept

    def score_counts(self, counts: Mapping[int, float]) -> float:
        """P(unresolved | prefix) from its accumulated term counts."""
        return float(_sigmoid(self.logit_counts(counts)))

    def logits(self, pieces: Sequence[str]) -> np.ndarray:
        """The logit of prefix k for k = 1..n from the header + n step pieces (no token spans
        two pieces: each starts and ends with a newline)."""
        counts: dict[int, float] = {}
        out = []
        for k, piece in enumerate(pieces):
            self.add_piece(counts, piece)
            if k == 0:
                continue  # the header alone is no prefix
            out.append(self.logit_counts(counts))
        return np.asarray(out, dtype=np.float64)

    def scores(self, pieces: Sequence[str]) -> np.ndarray:
        """P(unresolved | prefix k) for k = 1..n (see `logits`)."""
        return _sigmoid(self.logits(pieces))

    def run_logits(self, traj: Trajectory) -> np.ndarray:
        """`logits` of every prefix of `traj` (its own PieceText: the LM probe's text columns,
        monitor_text.json, always have one)."""
        if self.text is None:
            raise ValueError("run_logits needs the pieces' cuts (PieceText)")
        return self.logits(self.text.pieces(traj))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "tfidf_lr",
            "vocabulary": self.vocabulary,
            "idf": self.idf.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "token_pattern": self.token_pattern,
            **({"text": self.text.to_json()} if self.text is not None else {}),
            **({"ngram_max": self.ngram_max} if self.ngram_max != 1 else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TfidfLR:
        return cls(
            {str(k): int(v) for k, v in d["vocabulary"].items()},
            np.asarray(d["idf"], dtype=np.float64),
            np.asarray(d["coef"], dtype=np.float64),
            float(d["intercept"]),
            str(d.get("token_pattern", TOKEN_PATTERN)),
            PieceText.from_json(d["text"]) if d.get("text") is not None else None,
            int(d.get("ngram_max", 1)),
        )


def read_text_head(path: Path) -> TfidfLR:
    """The LM probe's text part (train.probe_text: a TfidfLR with intercept 0, its own cuts) as
    saved beside a model or in a bundle.

    Raises:
        BundleError: unreadable, or it names no text cuts.
    """
    try:
        head = TfidfLR.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{path}: not a readable text head of the probe: {e}") from e
    if head.text is None:
        raise BundleError(f"{path}: the probe's text head names no text cuts (PieceText)")
    return head
