"""The stack a bundle can ship: plain numpy parameters over the base candidates' scores.

`Stack`: logistic regression over the base scores' logits and the run's length so far against
its group's resolved runs (training.model.stack fits it).
`StackBag`: the stacks fitted on the inner folds of the calibration runs, served as the mean
of their logits: the models whose out-of-fold scores set the stack's thresholds, so its served
scores are no sharper than those it was calibrated on (one refit on all of them was, and
stopped more resolved runs than the target: docs/RESULTS.md, "Issue 26, sixth round").
`stack_from_json` reads either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from serving.numeric import logit as _logit
from serving.numeric import sigmoid as _sigmoid


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
