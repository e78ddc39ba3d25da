"""A stack over the scorers' outputs with group-relative length, fitted on calibration records.

Inputs at prefix k of a run of group g: the logit of each base score (the LM probe, the signals
LR, TF-IDF) and the run's length so far against g's own resolved runs: the share of them that
had already ended by k steps and by the run's tokens so far (their empirical distribution), plus
log steps and log tokens. A logistic regression on the checked prefixes, each run weighing 1 and
each (group, label) cell weighing the same; one model per group whose calibration runs support it
(`min_runs` of each label), the rest share one model with a per-group offset.

The fitted stack is plain numpy (`StackModel.to_json`): weights, standardisation and length
quantiles, so serving needs no scikit-learn or torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from training.data.records import RunRecord, group_records

LENGTH_FEATURES = ("done_by_steps", "done_by_tokens", "log_steps", "log_tokens")
_QUANTILES = np.linspace(0.0, 1.0, 101)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


@dataclass
class StackModel:
    """Fitted stack (see the module docstring).

    Attributes:
        bases: the base scorers, in feature order.
        group_by: the record field groups are keyed by.
        lengths: group -> {"steps": quantiles, "tokens": quantiles} of its resolved runs' ends.
        models: "own:<group>" or "shared" -> {"mean", "scale", "coef", "intercept"} (lists).
        offsets: group -> intercept offset of the shared model (its one-hot column's weight).
    """

    bases: list[str]
    group_by: str
    lengths: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    offsets: dict[str, float] = field(default_factory=dict)

    def features(self, record: RunRecord) -> np.ndarray:
        """(n, F) inputs after steps 1..n of `record`."""
        g = str(getattr(record, self.group_by))
        n = record.n_steps
        k = np.arange(1, n + 1, dtype=np.float64)
        tok = np.cumsum(np.asarray(record.step_tokens, dtype=np.float64))
        q = self.lengths.get(g) or self.lengths["*"]
        cols = [_logit(record.scores[b]) for b in self.bases]
        cols += [
            _share_below(q["steps"], k),
            _share_below(q["tokens"], tok),
            np.log1p(k),
            np.log1p(tok),
        ]
        return np.stack(cols, axis=1)

    def scores(self, record: RunRecord) -> np.ndarray:
        """P(unresolved | steps 1..k) for k = 1..n."""
        g = str(getattr(record, self.group_by))
        x = self.features(record)
        m = self.models.get(f"own:{g}")
        offset = 0.0
        if m is None:
            m = self.models["shared"]
            offset = self.offsets.get(g, 0.0)
        z = (x - np.asarray(m["mean"])) / np.asarray(m["scale"])
        logit = z @ np.asarray(m["coef"]) + float(m["intercept"]) + offset
        return 1.0 / (1.0 + np.exp(-logit))

    def to_json(self) -> dict[str, Any]:
        return {
            "bases": self.bases,
            "group_by": self.group_by,
            "lengths": self.lengths,
            "models": self.models,
            "offsets": self.offsets,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StackModel:
        return cls(d["bases"], d["group_by"], d["lengths"], d["models"], d["offsets"])


def _share_below(sorted_q: Sequence[float], x: np.ndarray) -> np.ndarray:
    """Share of the group's resolved runs that had ended by x (interpolated on its quantiles)."""
    q = np.asarray(sorted_q, dtype=np.float64)
    return np.interp(x, q, np.linspace(0.0, 1.0, len(q)), left=0.0, right=1.0)


def _lengths(recs: Sequence[RunRecord]) -> dict[str, list[float]]:
    res = [r for r in recs if r.resolved] or list(recs)
    steps = np.array([r.n_steps for r in res], dtype=np.float64)
    tokens = np.array([float(np.sum(r.step_tokens)) for r in res])
    return {
        "steps": np.quantile(steps, _QUANTILES).tolist(),
        "tokens": np.quantile(tokens, _QUANTILES).tolist(),
    }


def _rows(
    model: StackModel, recs: Sequence[RunRecord], schedule: Schedule, max_per_run: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    xs, ys, ws, gs = [], [], [], []
    for r in recs:
        ks = schedule.checked_steps(r.n_steps)
        if not len(ks):
            continue
        if len(ks) > max_per_run:
            ks = ks[np.unique(np.linspace(0, len(ks) - 1, max_per_run).round().astype(int))]
        x = model.features(r)[ks - 1]
        xs.append(x)
        ys.append(np.full(len(ks), 0 if r.resolved else 1))
        ws.append(np.full(len(ks), 1.0 / len(ks)))
        gs += [str(getattr(r, model.group_by))] * len(ks)
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ws), gs


def _balance(y: np.ndarray, w: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each (group, label) cell carries the same total weight; mean weight 1."""
    out = w.copy()
    for g in np.unique(groups):
        for lab in (0, 1):
            m = (groups == g) & (y == lab)
            if m.any():
                out[m] = w[m] / w[m].sum()
    return out * len(out) / out.sum()


def _fit_lr(x: np.ndarray, y: np.ndarray, w: np.ndarray, C: float) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    lr = LogisticRegression(C=C, max_iter=2000).fit((x - mean) / scale, y, sample_weight=w)
    return {
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": lr.coef_[0].tolist(),
        "intercept": float(lr.intercept_[0]),
    }


def fit_stack(
    records: Sequence[RunRecord],
    *,
    bases: Sequence[str],
    schedule: Schedule,
    group_by: str = "agent",
    min_runs: int = 60,
    C: float = 0.1,
    max_per_run: int = 20,
) -> StackModel:
    """Fit the stack on calibration records (which must carry every base score)."""
    recs = [r for r in records if all(b in r.scores for b in bases) and r.n_steps]
    if not recs:
        raise ValueError(f"no calibration records with the stack's base scores {list(bases)}")
    model = StackModel(list(bases), group_by)
    by_group = group_records(recs, group_by)
    model.lengths = {g: _lengths(rs) for g, rs in by_group.items()}
    model.lengths["*"] = _lengths(recs)
    x, y, w, gl = _rows(model, recs, schedule, max_per_run)
    groups = np.array(gl)
    if len(np.unique(y)) < 2:
        raise ValueError("the stack's calibration records hold one label only")
    w = _balance(y, w, groups)
    names = sorted(by_group)
    onehot = (groups[:, None] == np.array(names)[None, :]).astype(np.float64)
    shared = _fit_lr(np.concatenate([x, onehot], axis=1), y, w, C)
    f = x.shape[1]
    # the one-hot columns' standardised weights become plain per-group intercept offsets
    coef = np.asarray(shared["coef"])
    mean, scale = np.asarray(shared["mean"]), np.asarray(shared["scale"])
    gcoef = coef[f:] / scale[f:]
    base_off = float(-(mean[f:] * gcoef).sum())
    model.models["shared"] = {
        "mean": shared["mean"][:f],
        "scale": shared["scale"][:f],
        "coef": coef[:f].tolist(),
        "intercept": shared["intercept"] + base_off,
    }
    model.offsets = {g: float(gcoef[i]) for i, g in enumerate(names)}
    for g in names:
        m = groups == g
        if min(int((y[m] == 0).sum() > 0), int((y[m] == 1).sum() > 0)) == 0:
            continue
        rs = by_group[g]
        n_pos = sum(not r.resolved for r in rs)
        if min(n_pos, len(rs) - n_pos) >= min_runs:
            model.models[f"own:{g}"] = _fit_lr(x[m], y[m], w[m], C)
    return model
