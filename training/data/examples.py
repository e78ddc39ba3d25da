"""Labelled runs -> prefix examples: what the probe, the baselines and the fine-tune train on.

- A prefix example is a checked step boundary k of a labelled run (the served check schedule,
  monitor.schedule); label 1 = the run ends unresolved.
- Each run carries one unit of weight spread evenly over its examples, so long runs do not
  dominate; runs are further weighted so that every (agent, label) cell (or every label) carries
  the same total weight: failure rates differ by agent, and the goal is discrimination within
  each agent.
- With `savings_power` (train.savings_power) a failing run's weight follows what stopping it
  saves instead (`savings_weights`): spread over its prefixes in proportion to the tokens still
  to come after each, and scaled by (its tokens / its agent's mean run tokens) ** power, so the
  long failing runs that hold the tokens weigh most. Resolved runs keep the even spread: the stop
  rule's false positives count runs, not tokens. The probe and the TF-IDF baseline train on
  these weights; the signals LR keeps the even spread (`even_weights`): savings-weighted, it
  stopped 14.6% of SWE-agent's resolved runs on new repositories at a 10% target
  (docs/RESULTS.md, "Issue 26, sixth round").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitor.featurise import Featuriser
from monitor.schedule import Schedule
from monitor.types import Trajectory
from training.config import PipelineConfig
from training.data.runs import label_of

BALANCE_MODES = ("agent_class", "class", "none")


def run_weights(runs: Sequence[Trajectory], *, balance: str = "agent_class") -> np.ndarray:
    """One weight per run; mean 1.

    Args:
        runs: labelled runs.
        balance: "agent_class": every (agent, label) cell carries equal total weight;
            "class": both labels carry equal total weight; "none": all runs weigh 1.
    """
    if balance not in BALANCE_MODES:
        raise ValueError(f"balance must be one of {BALANCE_MODES}, not {balance!r}")
    if not runs:
        return np.zeros(0)
    if balance == "none":
        return np.ones(len(runs))
    cells = [
        (r.agent, label_of(r)) if balance == "agent_class" else ("", label_of(r)) for r in runs
    ]
    counts = Counter(cells)
    w = np.array([1.0 / counts[c] for c in cells])
    return w * len(runs) / w.sum()


@dataclass
class PrefixSet:
    """Prefix examples (one row per checked step boundary).

    Attributes:
        run: (N,) index of the run in the list the set was built from.
        step: (N,) prefix length k (1-based).
        label: (N,) 1 = the run ends unresolved.
        weight: (N,) example weight (run weight / examples of that run).
    """

    run: np.ndarray
    step: np.ndarray
    label: np.ndarray
    weight: np.ndarray

    def __len__(self) -> int:
        return int(len(self.run))

    def rows(self, per_run: Sequence[np.ndarray]) -> np.ndarray:
        """Row k-1 of per-run arrays (features or signals, one array per run) for each example:
        (N, ...) stacked."""
        return np.stack([per_run[i][k - 1] for i, k in zip(self.run, self.step, strict=True)])


def probe_examples(cfg: PipelineConfig, runs: Sequence[Trajectory]) -> PrefixSet:
    """The probe's training prefixes of `runs` under a pipeline config: its check schedule,
    its run weighting (train.balance) and its per-run cap (train.max_prefixes_per_run)."""
    ex = prefix_examples(
        runs,
        schedule=cfg.policy,
        weights=run_weights(runs, balance=cfg.train.balance),
        max_per_run=cfg.train.max_prefixes_per_run,
    )
    return savings_weights(runs, ex, cfg.train.savings_power)


def even_weights(runs: Sequence[Trajectory], examples: PrefixSet, balance: str) -> np.ndarray:
    """The weights `prefix_examples` gives `examples` (each run's weight spread evenly), whatever
    they carry now: what the signals LR trains on when the probe's examples are savings-weighted."""
    w_run = run_weights(runs, balance=balance)
    n = np.bincount(examples.run, minlength=len(runs))
    return np.asarray(w_run[examples.run] / n[examples.run])


def run_step_tokens(run: Trajectory) -> np.ndarray:
    """Tokens of each step's model call (float64)."""
    return np.array([s.tokens for s in run.steps], dtype=np.float64)


def savings_weights(
    runs: Sequence[Trajectory], examples: PrefixSet, power: float | None
) -> PrefixSet:
    """`examples` with each failing run's weight following what a stop saves (module docstring).

    A failing run i keeps weight W_i * (T_i / mean T of its agent's runs) ** power, spread over its
    prefixes k in proportion to (T_i - tokens after step k) / T_i + 1e-3 (the floor keeps its
    last prefix in); W_i is its run weight, T_i its tokens. Resolved runs are unchanged; so is
    everything when `power` is None.
    """
    if power is None or not len(examples.run):
        return examples
    tokens = [run_step_tokens(r) for r in runs]
    by_agent: dict[str, list[float]] = {}
    for r, t in zip(runs, tokens, strict=True):
        by_agent.setdefault(r.agent, []).append(float(t.sum()))
    mean = {a: float(np.mean(v)) for a, v in by_agent.items()}
    weight = examples.weight.copy()
    for i in np.unique(examples.run[examples.label == 1]).tolist():
        rows = np.flatnonzero(examples.run == i)
        cum = np.cumsum(tokens[i])
        total = float(cum[-1]) if len(cum) else 0.0
        if total <= 0 or mean[runs[i].agent] <= 0:
            continue  # no token counts: the even spread stays
        left = (total - cum[examples.step[rows] - 1]) / total + 1e-3
        scale = (total / mean[runs[i].agent]) ** power
        weight[rows] = weight[rows].sum() * scale * left / left.sum()
    return PrefixSet(examples.run, examples.step, examples.label, weight)


def prefix_examples(
    runs: Sequence[Trajectory],
    *,
    schedule: Schedule,
    weights: np.ndarray | None = None,
    max_per_run: int | None = None,
) -> PrefixSet:
    """Checked prefixes of every run with per-run weights spread over them.

    Runs shorter than `min_steps` have no checked step and contribute nothing (the monitor
    never decides on them).

    Args:
        runs: labelled runs.
        schedule: the check schedule (its checked prefixes are the examples).
        weights: one weight per run (default 1 each).
        max_per_run: keep at most this many checked prefixes per run, evenly spaced and always
            including the last (None: all).
    """
    w_run = np.ones(len(runs)) if weights is None else np.asarray(weights, dtype=np.float64)
    cols: list[list[np.ndarray]] = [[], [], [], []]
    for i, r in enumerate(runs):
        ks = schedule.checked_steps(len(r.steps))
        if max_per_run and len(ks) > max_per_run:
            pick = np.unique(np.linspace(0, len(ks) - 1, max_per_run).round().astype(int))
            ks = ks[pick]
        if len(ks) == 0:
            continue
        cols[0].append(np.full(len(ks), i, dtype=np.int64))
        cols[1].append(ks)
        cols[2].append(np.full(len(ks), label_of(r), dtype=np.int64))
        cols[3].append(np.full(len(ks), w_run[i] / len(ks)))
    if not cols[0]:
        z = np.zeros(0, dtype=np.int64)
        return PrefixSet(z, z, z, np.zeros(0))
    run, step, label, weight = (np.concatenate(c) for c in cols)
    return PrefixSet(run, step, label, weight)


def window_examples(
    featuriser: Featuriser,
    runs: Sequence[Trajectory],
    signals: Sequence[np.ndarray],
    prefixes: PrefixSet,
) -> list[dict]:
    """Fine-tuning examples: one per featuriser window holding at least one example prefix.

    Each dict has input_ids, positions (indices of the example boundaries in the window),
    signals (raw signal rows at those prefixes), labels and weights (as in `prefixes`).
    """
    by_run: dict[int, dict[int, float]] = {}
    for i, k, w in zip(prefixes.run, prefixes.step, prefixes.weight, strict=True):
        by_run.setdefault(int(i), {})[int(k)] = float(w)
    out = []
    for i, ks in sorted(by_run.items()):
        label = float(label_of(runs[i]))
        for win in featuriser.windows(runs[i]):
            pos = [(b, k) for b, k in zip(win.boundaries, win.steps, strict=True) if k in ks]
            if not pos:
                continue
            out.append(
                {
                    "input_ids": list(win.ids),
                    "positions": [b for b, _ in pos],
                    "signals": [signals[i][k - 1].tolist() for _, k in pos],
                    "labels": [label] * len(pos),
                    "weights": [ks[k] for _, k in pos],
                }
            )
    return out
