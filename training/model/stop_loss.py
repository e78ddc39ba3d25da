"""The probe objectives beyond per-prefix log loss (issue 26, item 5; both off by default).

A run is falsely stopped when its highest checked score crosses the threshold, and a stop needs
what separates runs still going at the same step. `stop_loss` is one convex objective over a
linear head with sklearn's LogisticRegression penalty and scale: failing runs' prefixes keep the
log loss; a resolved run's loss can be on the soft maximum of its checked logits (`focus`), and a
ranking loss between failing and resolved prefixes of one agent at the same step can be added
(`ranking_pairs`, `rank_weight`). training.model.probe.fit_probe fits it by L-BFGS from the plain
fit (`stop_loss_fit`). Cross-fitted, both lost (docs/RESULTS.md, "As served").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def ranking_pairs(
    y: np.ndarray,
    agents: Sequence[str],
    steps: np.ndarray,
    *,
    max_pairs: int = 50_000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(failing row, resolved row) index pairs of the same agent at the same prefix length:
    runs alive at the same step, so a ranking loss on them learns what separates live runs, not
    how long a run has gone on. At most `max_pairs`, drawn evenly over the (agent, step) cells."""
    rng = np.random.default_rng(seed)
    cells: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    for i, (a, k, lab) in enumerate(zip(agents, steps.tolist(), y.tolist(), strict=True)):
        cells.setdefault((a, int(k)), ([], []))[0 if lab else 1].append(i)
    usable = [(np.array(f), np.array(r)) for f, r in cells.values() if f and r]
    if not usable:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    per = max(1, max_pairs // len(usable))
    fi, ri = [], []
    for f, r in usable:
        n = min(per, len(f) * len(r))
        fi.append(rng.choice(f, n))
        ri.append(rng.choice(r, n))
    return np.concatenate(fi), np.concatenate(ri)


def stop_loss(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    runs: np.ndarray,
    *,
    C: float,
    focus: float,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    rank_weight: float = 0.0,
) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """The objective of `stop_loss_fit` over theta = (coef, intercept): (value, gradient).

    C * (sum over failing runs' prefixes of w * log loss + sum over resolved runs of their total
    weight * softplus(soft max of the run's logits)) + |coef|^2 / 2, the soft max being
    log-sum-exp at temperature 1 / `focus` (sklearn's LogisticRegression penalty and scale).
    focus 0: the per-prefix log loss on resolved runs too. With `pairs` and `rank_weight`, plus
    C * rank_weight * sum(w) / n_pairs * sum over pairs of log(1 + exp(z_resolved - z_failing))
    (a ranking loss between runs alive at the same step, `ranking_pairs`)."""
    from scipy.special import expit, logsumexp

    neg = np.flatnonzero(y == 0)
    order = neg[np.argsort(runs[neg], kind="stable")]
    groups = np.split(order, np.flatnonzero(np.diff(runs[order])) + 1) if len(order) else []
    wr = np.array([w[idx].sum() for idx in groups])
    pos = np.flatnonzero(y == 1)

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        beta, b = theta[:-1], theta[-1]
        z = x @ beta + b
        g = np.zeros(len(y))
        zp = z[pos]  # failing prefixes: -log sigmoid(z)
        loss = float(np.sum(w[pos] * np.logaddexp(0.0, -zp)))
        g[pos] = -w[pos] * expit(-zp)
        if focus > 0:
            for j, idx in enumerate(groups):  # resolved runs: softplus(soft max of the logits)
                m = float(logsumexp(focus * z[idx])) / focus
                loss += wr[j] * float(np.logaddexp(0.0, m))
                g[idx] = wr[j] * expit(m) * np.exp(focus * (z[idx] - m))
        else:
            zn = z[neg]
            loss += float(np.sum(w[neg] * np.logaddexp(0.0, zn)))
            g[neg] = w[neg] * expit(zn)
        if pairs is not None and rank_weight > 0 and len(pairs[0]):
            fi, ri = pairs
            d = z[ri] - z[fi]
            scale = rank_weight * float(w.sum()) / len(fi)
            loss += scale * float(np.sum(np.logaddexp(0.0, d)))
            gd = scale * expit(d)
            np.add.at(g, ri, gd)
            np.add.at(g, fi, -gd)
        grad = np.concatenate([C * (x.T @ g) + beta, [C * g.sum()]])
        return C * loss + 0.5 * float(beta @ beta), grad

    return f


def stop_loss_fit(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    runs: np.ndarray,
    *,
    C: float,
    focus: float,
    start: tuple[np.ndarray, float],
    max_iter: int = 500,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    rank_weight: float = 0.0,
) -> tuple[np.ndarray, float]:
    """L2 logistic regression whose loss on a resolved run is on its highest checked logits
    (`stop_loss`): a resolved run is stopped by its highest checked score, so that is the score
    its loss is on; failing runs keep the per-prefix loss (each prefix should detect). Convex;
    L-BFGS from `start` (coef, intercept). Returns (coef, intercept)."""
    from scipy.optimize import minimize

    f = stop_loss(x, y, w, runs, C=C, focus=focus, pairs=pairs, rank_weight=rank_weight)
    theta0 = np.concatenate([start[0], [start[1]]])
    res = minimize(f, theta0, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    return res.x[:-1], float(res.x[-1])
