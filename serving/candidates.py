"""The candidate scorers a bundle can ship besides the LM probe, as plain numpy parameters.

No torch and no scikit-learn: each is a few arrays in JSON (training.export.candidates writes
them from the fitted pipelines) and scores every prefix of a run the way the fitted pipeline
does (tests compare the two).

- `SignalsLR`: arcsinh -> standardise -> logistic regression on the loop-signal rows.
- `TfidfLR`: term counts of the rendered prefix (its own `PieceText` cuts of the same renderer,
  or, for bundles written before it had them, the featuriser's header and step pieces),
  sublinear TF-IDF, L2 norm, logistic regression.
- `Stack`: logistic regression over the base scores' logits and the run's length so far against
  its group's resolved runs (training.model.stack fits it).
- `StackBag`: the stacks fitted on the inner folds of the calibration runs, served as the mean
  of their logits: the models whose out-of-fold scores set the stack's thresholds, so its served
  scores are no sharper than those it was calibrated on (one refit on all of them was, and
  stopped more resolved runs than the target: docs/RESULTS.md, "Issue 26, sixth round").
  `stack_from_json` reads either.
- `length_scores`: the step and token limits as scores.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.render import render_header, render_step
from monitor.types import Step
from serving.numeric import sigmoid as _sigmoid  # the one sigmoid (numerically stable)

STEP_LIMIT = "step_limit"
TOKEN_LIMIT = "token_limit"


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


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
    """

    vocabulary: dict[str, int]
    idf: np.ndarray
    coef: np.ndarray
    intercept: float
    token_pattern: str = r"(?u)\b\w\w+\b"
    text: PieceText | None = None

    def __post_init__(self) -> None:
        self._re = re.compile(self.token_pattern)

    def piece_counts(self, piece: str) -> dict[int, float]:
        """Vocabulary column -> count of one rendered piece's terms."""
        out: dict[int, float] = {}
        for term in self._re.findall(piece.lower()):
            j = self.vocabulary.get(term)
            if j is not None:
                out[j] = out.get(j, 0.0) + 1.0
        return out

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

    def scores(self, pieces: Sequence[str]) -> np.ndarray:
        """P(unresolved | prefix k) for k = 1..n from the header + n step pieces (no token spans
        two pieces: each starts and ends with a newline)."""
        counts: dict[int, float] = {}
        out = []
        for k, piece in enumerate(pieces):
            for j, c in self.piece_counts(piece).items():
                counts[j] = counts.get(j, 0.0) + c
            if k == 0:
                continue  # the header alone is no prefix
            out.append(self.logit_counts(counts))
        return _sigmoid(np.asarray(out, dtype=np.float64))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "tfidf_lr",
            "vocabulary": self.vocabulary,
            "idf": self.idf.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "token_pattern": self.token_pattern,
            **({"text": self.text.to_json()} if self.text is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TfidfLR:
        return cls(
            {str(k): int(v) for k, v in d["vocabulary"].items()},
            np.asarray(d["idf"], dtype=np.float64),
            np.asarray(d["coef"], dtype=np.float64),
            float(d["intercept"]),
            str(d.get("token_pattern", r"(?u)\b\w\w+\b")),
            PieceText.from_json(d["text"]) if d.get("text") is not None else None,
        )


def share_below(quantiles: Sequence[float], x: np.ndarray) -> np.ndarray:
    """Share of a group's resolved runs that had ended by x (interpolated on its quantiles)."""
    q = np.asarray(quantiles, dtype=np.float64)
    return np.interp(x, q, np.linspace(0.0, 1.0, len(q)), left=0.0, right=1.0)


@dataclass
class Stack:
    """The stack's parameters (training.model.stack fits them).

    Attributes:
        bases: the base scorers, in feature order.
        group_by: the run field groups are keyed by ("agent" or "source").
        lengths: group (or "*": all) -> {"steps", "tokens"}: quantiles of its resolved runs' ends.
        models: "own:<group>" or "shared" -> {"mean", "scale", "coef", "intercept"}.
        offsets: group -> intercept offset of the shared model.
    """

    bases: list[str]
    group_by: str
    lengths: dict[str, dict[str, list[float]]]
    models: dict[str, dict[str, Any]]
    offsets: dict[str, float]

    def features_for(
        self, group: str, base_scores: Mapping[str, np.ndarray], step_tokens: np.ndarray
    ) -> np.ndarray:
        """(n, F) inputs after steps 1..n: base logits, then the length features."""
        n = len(step_tokens)
        k = np.arange(1, n + 1, dtype=np.float64)
        tok = np.cumsum(np.asarray(step_tokens, dtype=np.float64))
        q = self.lengths.get(group) or self.lengths["*"]
        cols = [_logit(base_scores[b]) for b in self.bases]
        cols += [
            share_below(q["steps"], k),
            share_below(q["tokens"], tok),
            np.log1p(k),
            np.log1p(tok),
        ]
        return np.stack(cols, axis=1)

    def logits_for(
        self, group: str, base_scores: Mapping[str, np.ndarray], step_tokens: np.ndarray
    ) -> np.ndarray:
        """The logit of P(unresolved | steps 1..k) for k = 1..n."""
        x = self.features_for(group, base_scores, step_tokens)
        m = self.models.get(f"own:{group}")
        offset = 0.0
        if m is None:
            m = self.models["shared"]
            offset = self.offsets.get(group, 0.0)
        z = (x - np.asarray(m["mean"])) / np.asarray(m["scale"])
        return np.asarray(z @ np.asarray(m["coef"]) + float(m["intercept"]) + offset)

    def scores_for(
        self, group: str, base_scores: Mapping[str, np.ndarray], step_tokens: np.ndarray
    ) -> np.ndarray:
        """P(unresolved | steps 1..k) for k = 1..n."""
        return _sigmoid(self.logits_for(group, base_scores, step_tokens))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "stack",
            "bases": self.bases,
            "group_by": self.group_by,
            "lengths": self.lengths,
            "models": self.models,
            "offsets": self.offsets,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Stack:
        return cls(
            list(d["bases"]), str(d["group_by"]), dict(d["lengths"]), dict(d["models"]),
            {str(k): float(v) for k, v in d["offsets"].items()},
        )  # fmt: skip


@dataclass
class StackBag:
    """Stacks over the same bases, served as the mean of their logits (module docstring).

    Attributes:
        members: the stacks (training.evaluate.select.oof_stack fits one per inner fold).
    """

    members: list[Stack]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a stack bag needs at least one stack")
        first = self.members[0]
        for m in self.members[1:]:
            if m.bases != first.bases or m.group_by != first.group_by:
                raise ValueError(
                    "the stacks of a bag must share their bases and group_by: "
                    f"{m.bases}/{m.group_by} against {first.bases}/{first.group_by}"
                )

    @property
    def bases(self) -> list[str]:
        return self.members[0].bases

    @property
    def group_by(self) -> str:
        return self.members[0].group_by

    def logits_for(
        self, group: str, base_scores: Mapping[str, np.ndarray], step_tokens: np.ndarray
    ) -> np.ndarray:
        """The mean over the members of their logits after steps 1..n."""
        z = [m.logits_for(group, base_scores, step_tokens) for m in self.members]
        return np.asarray(np.mean(z, axis=0))

    def scores_for(
        self, group: str, base_scores: Mapping[str, np.ndarray], step_tokens: np.ndarray
    ) -> np.ndarray:
        """P(unresolved | steps 1..k) for k = 1..n: the sigmoid of the members' mean logit."""
        return _sigmoid(self.logits_for(group, base_scores, step_tokens))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "stack_bag", "members": [m.to_json() for m in self.members]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StackBag:
        return cls([Stack.from_json(m) for m in d["members"]])


def stack_from_json(d: Mapping[str, Any]) -> Stack | StackBag:
    """A candidates.json "stack": one stack (`kind` "stack", bundles before the bag) or a bag."""
    kind = d.get("kind", "stack")
    if kind == "stack_bag":
        return StackBag.from_json(d)
    if kind == "stack":
        return Stack.from_json(d)
    raise ValueError(f'unknown stack kind {kind!r} (expected "stack" or "stack_bag")')
