"""The probe: a linear head fitted on frozen boundary features (LoRA and full fine-tuning: finetune.py).

- `fit_probe`: L2 logistic regression (scikit-learn) on [hidden ; standardised signals ; agent
  one-hot], folded into PrefixClassifier.head. The agent columns absorb each agent's base failure
  rate while fitting, so the other weights learn what separates runs WITHIN an agent; they are
  then dropped (their weighted mean goes into the bias). Within one agent this only shifts every
  logit by a constant, so per-agent rankings, AUROC and per-agent thresholds are unchanged.
  With text columns (`ProbeRows.text`, train.probe_text) the same regression also reads each
  prefix's TF-IDF; their weights become `model.text_head`, whose logit `head_scores` (and the
  served scorer) add to the head's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression

from serving.numeric import sigmoid
from training.model.classifier import PrefixClassifier
from training.model.stop_loss import ranking_pairs, stop_loss_fit

log = logging.getLogger(__name__)


@dataclass
class ProbeFit:
    """What fit_probe learned (already copied into the model's head).

    Attributes:
        C: the inverse regularisation strength used.
        hidden_scale: the scale of the standardised hidden columns (see fit_probe).
        max_focus: > 0: the loss on a resolved run was on its highest logits (see fit_probe).
        rank_weight: > 0: the weight of the same-step ranking loss (see fit_probe).
        agent_offsets: agent -> logit offset learned and dropped from the exported head.
        train_loss: weighted log loss on the training examples (fitted head, agents included).
        initial_loss: the same loss for a zero head (log 2).
    """

    C: float
    hidden_scale: float = 1.0
    max_focus: float = 0.0
    rank_weight: float = 0.0
    agent_offsets: dict[str, float] = field(default_factory=dict)
    train_loss: float = 0.0
    initial_loss: float = float(np.log(2.0))


def _std(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = np.average(x, axis=0, weights=w)
    std = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    return mean, np.where(std > 1e-6, std, 1.0)


def _log_loss(p: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(np.average(-(y * np.log(p) + (1 - y) * np.log(1 - p)), weights=w))


@dataclass
class ProbeRows:
    """The probe's training rows, one per example prefix.

    Attributes:
        hidden: (N, F) boundary features.
        signals: (N, S) raw signal values (S = model.n_signals; may be 0 columns).
        labels: (N,) 1 = unresolved.
        weights: (N,) example weights.
        agents: (N,) agent of each example's run.
        runs: (N,) index of each example's run (None: unknown; `max_focus` needs it).
        steps: (N,) prefix length of each example (None: unknown; `rank_weight` needs it).
        text: (N, V) the examples' text columns, already scaled (train.probe_text), or None.
        text_head: with `text`: what the fitted text weights become the model's `text_head`
            through (`with_coef(coef)`; training.baselines.probe_text.TextHead).
    """

    hidden: np.ndarray
    signals: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    agents: list[str]
    runs: np.ndarray | None = None
    steps: np.ndarray | None = None
    text: sp.csr_matrix | None = None
    text_head: Any = None

    def take(self, keep: np.ndarray) -> ProbeRows:
        """The rows where the boolean mask `keep` is set."""
        agents = [a for a, k in zip(self.agents, keep, strict=True) if k]
        runs = self.runs[keep] if self.runs is not None else None
        steps = self.steps[keep] if self.steps is not None else None
        text = self.text[np.flatnonzero(keep)] if self.text is not None else None
        return ProbeRows(
            self.hidden[keep],
            self.signals[keep],
            self.labels[keep],
            self.weights[keep],
            agents,
            runs,
            steps,
            text,
            self.text_head,
        )


def fit_probe(
    model: PrefixClassifier,
    rows: ProbeRows,
    *,
    C: float = 0.1,
    hidden_scale: float = 1.0,
    agent_columns: bool = True,
    max_iter: int = 500,
    max_focus: float = 0.0,
    rank_weight: float = 0.0,
) -> ProbeFit:
    """Fit the head of `model` on frozen features (in place).

    Args:
        model: the classifier; its head and signal buffers are overwritten.
        rows: the training rows.
        C: inverse L2 strength of the logistic regression.
        hidden_scale: the standardised hidden columns are multiplied by this before fitting, so
            their L2 penalty is 1 / hidden_scale**2 times that of the signal columns (hundreds
            of hidden dimensions overfit a few thousand runs; the signals do not).
        agent_columns: add agent one-hot columns while fitting (see module docstring).
        max_iter: lbfgs iterations.
        max_focus: > 0: a resolved run's loss is on the soft maximum of its checked logits
            (`stop_loss_fit`, temperature 1 / max_focus; needs `rows.runs`), started from the
            plain fit; 0: per-prefix log loss.
        rank_weight: > 0: add a ranking loss between failing and resolved prefixes of the same
            agent at the same step (`ranking_pairs`; needs `rows.steps`), this weight times the
            log loss's total weight.
    """
    hidden, signals, agents = rows.hidden, rows.signals, rows.agents
    w = np.asarray(rows.weights, dtype=np.float64)
    w = w * len(w) / w.sum()
    y = np.asarray(rows.labels, dtype=np.int64)
    h_mean, h_std = _std(hidden, w)
    h_std = h_std / hidden_scale
    if model.signal_transform == "asinh":
        signals = np.arcsinh(signals)
    s_mean, s_std = _std(signals, w) if signals.shape[1] else (np.zeros(0), np.ones(0))
    names = sorted(set(agents)) if agent_columns else []
    onehot = np.zeros((len(y), len(names)))
    if names:
        col = {a: j for j, a in enumerate(names)}
        onehot[np.arange(len(y)), [col[a] for a in agents]] = 1.0
    x: Any = np.hstack([(hidden - h_mean) / h_std, (signals - s_mean) / s_std, onehot])
    if rows.text is not None:
        if rows.text_head is None or max_focus > 0 or rank_weight > 0:
            raise ValueError(
                "fit_probe: text columns need their text_head, and neither max_focus nor "
                "rank_weight"
            )
        x = sp.hstack([sp.csr_matrix(x), rows.text]).tocsr()
    lr = LogisticRegression(C=C, max_iter=max_iter)
    lr.fit(x, y, sample_weight=w)
    if max_focus > 0 or rank_weight > 0:
        if max_focus > 0 and rows.runs is None:
            raise ValueError("fit_probe: max_focus needs the rows' run indices")
        if rank_weight > 0 and rows.steps is None:
            raise ValueError("fit_probe: rank_weight needs the rows' prefix lengths")
        pairs = ranking_pairs(y, agents, np.asarray(rows.steps)) if rank_weight > 0 else None
        runs = np.asarray(rows.runs) if rows.runs is not None else np.arange(len(y))
        coef0, icpt0 = lr.coef_[0].copy(), float(lr.intercept_[0])
        coef1, icpt1 = stop_loss_fit(
            x, y, w, runs, C=C, focus=max_focus, start=(coef0, icpt0),
            pairs=pairs, rank_weight=rank_weight,
        )  # fmt: skip
        lr.coef_[0], lr.intercept_[0] = coef1, icpt1
    coef = lr.coef_[0]
    hdim, sdim, adim = hidden.shape[1], signals.shape[1], len(names)
    c_h, c_s = coef[:hdim], coef[hdim : hdim + sdim]
    c_a = coef[hdim + sdim : hdim + sdim + adim]
    model.text_head = (
        rows.text_head.with_coef(coef[hdim + sdim + adim :]) if rows.text is not None else None
    )
    share = onehot.T @ w / w.sum() if names else np.zeros(0)
    bias = float(lr.intercept_[0] - np.sum(c_h * h_mean / h_std) + float(share @ c_a))
    with torch.no_grad():
        model.head.weight.copy_(
            torch.tensor(np.concatenate([c_h / h_std, c_s])[None], dtype=torch.float32)
        )
        model.head.bias.fill_(bias)
        model.signal_mean.copy_(torch.tensor(s_mean, dtype=torch.float32))
        model.signal_std.copy_(torch.tensor(s_std, dtype=torch.float32))
    offsets = {a: float(c - share @ c_a) for a, c in zip(names, c_a, strict=True)}
    loss = _log_loss(lr.predict_proba(x)[:, 1], y, w)
    return ProbeFit(C, hidden_scale, max_focus, rank_weight, offsets, loss)


def select_probe(
    model: PrefixClassifier,
    rows: ProbeRows,
    *,
    pairs: Sequence[tuple[float, float]],
    agent_columns: bool = True,
    val_criterion: Callable[[], tuple[float, Any]] | None = None,
    max_focus: float = 0.0,
    rank_weight: float = 0.0,
) -> tuple[ProbeFit, dict[str, dict[str, Any]], float | None]:
    """Fit the probe for every (C, hidden_scale) pair and keep the best head on validation.

    Args:
        model, rows, agent_columns, max_focus, rank_weight: as for `fit_probe`.
        pairs: the (C, hidden_scale) grid, fitted in this order.
        val_criterion: scores the head just fitted on validation runs -> (criterion, details);
            higher is better. None: no selection, so `pairs` must hold one pair.

    Returns:
        (the kept fit, {"C=..,hidden_scale=..": {"C", "hidden_scale", "criterion",
        "val_mean_per_agent_auroc" (the details), "train_loss"}}, the kept criterion).
    """
    if len(pairs) > 1 and val_criterion is None:
        raise ValueError("select_probe: a grid of more than one (C, scale) needs validation runs")
    best: tuple[float, dict[str, torch.Tensor], ProbeFit, float | None, Any] | None = None
    selection: dict[str, dict[str, Any]] = {}
    for c, scale in pairs:
        fit = fit_probe(
            model,
            rows,
            C=c,
            hidden_scale=scale,
            agent_columns=agent_columns,
            max_focus=max_focus,
            rank_weight=rank_weight,
        )
        crit, details = val_criterion() if val_criterion is not None else (None, None)
        selection[f"C={c:g},hidden_scale={scale:g}"] = {
            "C": c,
            "hidden_scale": scale,
            "criterion": crit,
            "val_mean_per_agent_auroc": details,
            "train_loss": fit.train_loss,
        }
        log.info(
            "probe C=%g hidden_scale=%g: train loss %.4f, val criterion %s",
            c,
            scale,
            fit.train_loss,
            "-" if crit is None else f"{crit:.4f}",
        )
        if best is None or (crit is not None and crit > best[0]):
            head = {
                k: v.clone() for k, v in model.state_dict().items() if not k.startswith("backbone.")
            }
            best = (crit if crit is not None else 0.0, head, fit, crit, model.text_head)
    if best is None:
        raise ValueError("select_probe: empty (C, hidden_scale) grid")
    with torch.no_grad():
        model.load_state_dict(best[1], strict=False)
    model.text_head = best[4]
    return best[2], selection, best[3]


def head_scores(
    model: PrefixClassifier,
    hidden: np.ndarray,
    signals: np.ndarray,
    run: Any = None,
    *,
    second: bool = False,
) -> np.ndarray:
    """sigmoid(head) for boundary states (N, H) and raw signals (N, S) -> (N,) float64, the
    head's logit plus the text's (`model.text_head`, train.probe_text) when the probe reads the
    run's text: then `run` (the Trajectory of those N steps) is required. `second`: the second
    probe's (`model.text_probe`, train.text_candidate) instead, its head plus its text part."""
    if second and model.text_probe is None:
        raise ValueError("head_scores: the model has no second probe")
    logits_of = model.text_probe_logits if second else model.head_logits
    text = model.text_probe.text if second and model.text_probe is not None else model.text_head
    with torch.no_grad():
        logits = logits_of(
            torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32))[None],
            torch.from_numpy(np.ascontiguousarray(signals, dtype=np.float32))[None],
        )
    if text is None:
        return torch.sigmoid(logits[0]).double().numpy()
    if run is None:
        raise ValueError("head_scores: this probe reads the run's text; pass the run")
    z = logits[0].double().numpy() + text.run_logits(run)[: len(hidden)]
    return np.asarray(sigmoid(z), dtype=np.float64)
