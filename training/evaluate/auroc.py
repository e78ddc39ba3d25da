"""AUROC of per-prefix scores, per agent first (the figures in metrics.json).

Failure rates differ by agent, so a pooled AUROC mostly measures which agent wrote the transcript;
the per-agent figures come first and model selection uses their mean.

- At fraction f: each run scored once, at k = ceil(f * n) (n = its steps).
- overall: every prefix k = 1..n of every run, each run carrying total weight 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score

from training.data.records import RunRecord

FRACTIONS = (0.25, 0.5, 0.75)


def _auroc(y: np.ndarray, s: np.ndarray, w: np.ndarray | None = None) -> float | None:
    if len(np.unique(y)) < 2:
        return None
    return float(roc_auc_score(y, s, sample_weight=w))


def auroc_at_fractions(
    records: Sequence[RunRecord], *, scorer: str, fractions: Sequence[float] = FRACTIONS
) -> dict[str, float | None]:
    """AUROC (positive = unresolved) of the score at fraction f of each run (k = ceil(f * n)),
    keyed "0.25", "0.5", "0.75"; None where the runs hold one class only."""
    recs = [r for r in records if r.n_steps and scorer in r.scores]
    y = np.array([0 if r.resolved else 1 for r in recs])
    out: dict[str, float | None] = {}
    for f in fractions:
        s = np.array([r.scores[scorer][max(1, math.ceil(f * r.n_steps)) - 1] for r in recs])
        out[f"{f:g}"] = _auroc(y, s)
    return out


def auroc_scores(records: Sequence[RunRecord], *, scorer: str) -> dict[str, float | None]:
    """AUROC at 25/50/75 % of each run (`auroc_at_fractions`) and over all prefixes ("overall":
    every prefix k = 1..n of every run, each run carrying total weight 1)."""
    out = auroc_at_fractions(records, scorer=scorer)
    recs = [r for r in records if r.n_steps and scorer in r.scores]
    out["overall"] = None
    if recs:
        ys = np.concatenate([np.full(r.n_steps, 0 if r.resolved else 1) for r in recs])
        ss = np.concatenate([r.scores[scorer] for r in recs])
        ws = np.concatenate([np.full(r.n_steps, 1.0 / r.n_steps) for r in recs])
        out["overall"] = _auroc(ys, ss, ws)
    return out


def auroc_report(records: Sequence[RunRecord], *, scorers: Sequence[str]) -> dict:
    """{"per_agent": {agent: {"runs", "unresolved", scorer: {...}}}, "pooled": {...},
    "mean_per_agent": {scorer: {...}}} with AUROCs from `auroc_scores`."""
    agents = sorted({r.agent for r in records})
    per_agent: dict[str, dict] = {}
    for a in agents:
        recs = [r for r in records if r.agent == a]
        entry: dict = {"runs": len(recs), "unresolved": sum(not r.resolved for r in recs)}
        for name in scorers:
            entry[name] = auroc_scores(recs, scorer=name)
        per_agent[a] = entry
    pooled: dict = {"runs": len(records), "unresolved": sum(not r.resolved for r in records)}
    mean: dict = {}
    for name in scorers:
        pooled[name] = auroc_scores(records, scorer=name)
        keys = [*(f"{f:g}" for f in FRACTIONS), "overall"]
        mean[name] = {k: _mean([per_agent[a][name][k] for a in agents]) for k in keys}
    return {"per_agent": per_agent, "mean_per_agent": mean, "pooled": pooled}


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def _overall_arrays(recs: Sequence[RunRecord], scorer: str) -> list[tuple[np.ndarray, float]]:
    return [
        (np.asarray(r.scores[scorer], dtype=np.float64), 0.0 if r.resolved else 1.0) for r in recs
    ]


def paired_auroc_delta(
    reference: Sequence[RunRecord],
    variant: Sequence[RunRecord],
    *,
    scorer: str = "monitor",
    n_boot: int = 500,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, float | int | None]:
    """Mean per-agent overall AUROC of `variant` minus `reference` on the same runs, with a
    paired bootstrap interval (runs resampled within each agent and label, the same draw for
    both).

    Far tighter than comparing two independent standard errors: both variants score the same
    runs, so most of the sampling noise cancels. Runs missing from either side are dropped.
    """
    ref = {(r.source, r.run_id): r for r in reference if r.n_steps and scorer in r.scores}
    var = {(r.source, r.run_id): r for r in variant if r.n_steps and scorer in r.scores}
    ids = sorted(ref.keys() & var.keys())
    by_agent: dict[str, list[tuple[str, str]]] = {}
    for i in ids:
        by_agent.setdefault(ref[i].agent, []).append(i)
    groups = []
    for rids in by_agent.values():
        a = _overall_arrays([ref[i] for i in rids], scorer)
        b = _overall_arrays([var[i] for i in rids], scorer)
        if len({y for _, y in a}) == 2:
            groups.append((a, b))
    if not groups:
        return {"delta": None, "lo": None, "hi": None, "runs": len(ids), "n_boot": n_boot}

    def auc(arrs: list[tuple[np.ndarray, float]], idx: np.ndarray) -> float | None:
        s = np.concatenate([arrs[i][0] for i in idx])
        y = np.concatenate([np.full(len(arrs[i][0]), arrs[i][1]) for i in idx])
        w = np.concatenate([np.full(len(arrs[i][0]), 1.0 / len(arrs[i][0])) for i in idx])
        return _auroc(y, s, w)

    def delta(draws: list[np.ndarray]) -> float | None:
        d = []
        for (a, b), idx in zip(groups, draws, strict=True):
            x, z = auc(a, idx), auc(b, idx)
            if x is None or z is None:
                return None
            d.append(z - x)
        return float(np.mean(d))

    point = delta([np.arange(len(a)) for a, _ in groups])
    # resampled within (agent, label): every draw keeps both classes of every agent
    strata = [[np.flatnonzero([y == lab for _, y in a]) for lab in (0.0, 1.0)] for a, _ in groups]
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        d = delta([np.concatenate([rng.choice(ix, len(ix)) for ix in st]) for st in strata])
        if d is not None:
            boots.append(d)
    q = (1 - confidence) / 2
    lo, hi = (
        (float(np.quantile(boots, q)), float(np.quantile(boots, 1 - q))) if boots else (None, None)
    )
    return {"delta": point, "lo": lo, "hi": hi, "runs": len(ids), "n_boot": len(boots)}
