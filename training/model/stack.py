"""A stack over the scorers' outputs with group-relative length, fitted on calibration records.

Inputs at prefix k of a run of group g: the logit of each base score (the LM probe, the signals
LR, TF-IDF) and the run's length so far against g's own resolved runs: the share of them that
had already ended by k steps and by the run's tokens so far (their empirical distribution), plus
log steps and log tokens. Not time so far: in ../shared/data only mini-swe-agent's runs carry
step timestamps (300 of 4,078), and a live session's clock also counts the harness's own waits,
so offline and live would disagree. A logistic regression on the checked prefixes, each run weighing 1 and
each (group, label) cell weighing the same; one model per group whose calibration runs support it
(`min_runs` of each label), the rest share one model with a per-group offset.

The fitted stack is plain numpy (`StackModel.to_json`): weights, standardisation and length
quantiles, so serving needs no scikit-learn or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from serving.stack import Stack, StackBag
from training.data.records import RunRecord, group_records

LENGTH_FEATURES = ("done_by_steps", "done_by_tokens", "log_steps", "log_tokens")
_QUANTILES = np.linspace(0.0, 1.0, 101)


class StackModel(Stack):
    """The fitted stack: serving.stack.Stack (plain numpy) scored on RunRecords."""

    def features(self, record: RunRecord) -> np.ndarray:
        """(n, F) inputs after steps 1..n of `record`."""
        g = str(getattr(record, self.group_by))
        return self.features_for(g, record.scores, record.step_tokens)

    def scores(self, record: RunRecord) -> np.ndarray:
        """P(unresolved | steps 1..k) for k = 1..n."""
        g = str(getattr(record, self.group_by))
        return self.scores_for(g, record.scores, record.step_tokens)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StackModel:
        s = Stack.from_json(d)
        return cls(s.bases, s.group_by, s.lengths, s.models, s.offsets)


class StackBagModel(StackBag):
    """A bag of fitted stacks (serving.stack.StackBag) scored on RunRecords."""

    def scores(self, record: RunRecord) -> np.ndarray:
        """P(unresolved | steps 1..k) for k = 1..n: the sigmoid of the members' mean logit."""
        g = str(getattr(record, self.group_by))
        return self.scores_for(g, record.scores, record.step_tokens)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StackBagModel:
        return cls(list(StackBag.from_json(d).members))


def stack_model_from_json(d: Mapping[str, Any]) -> StackModel | StackBagModel:
    """The fitted form of a candidates.json "stack" (one stack, or a bag of them)."""
    if d.get("kind", "stack") == "stack_bag":
        return StackBagModel.from_json(d)
    return StackModel.from_json(d)


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
    model = StackModel(list(bases), group_by, {}, {}, {})
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
