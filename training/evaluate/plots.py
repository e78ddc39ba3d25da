"""PNG plots of an evaluation (matplotlib, Agg backend: no display needed).

- tokens_saved_vs_fpr.png: per source and overall, token savings against realized run-level FPR
  for one threshold swept over each score (monitor and score baselines), with every rule's
  operating point from the report (the monitor at its per-agent thresholds, rule baselines,
  LoopBrake, the oracle).
- roc_by_fraction.png: ROC of each score at 25 / 50 / 75 % of each run, one line per source
  (a pooled ROC mostly measures which agent wrote the run).
- score_over_steps.png: the monitor's score over the run for a sample of resolved and
  unresolved runs, with each group's stop threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from training.data.records import RunRecord
from training.evaluate.auroc import FRACTIONS
from training.evaluate.stops import tradeoff_curve


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tradeoff(
    records: Sequence[RunRecord], result: Mapping[str, Any], path: Path, *, scorers: Sequence[str]
) -> None:
    """Tokens saved vs realized FPR, one panel per source plus overall (no overall panel for a
    single source: it would repeat that panel)."""
    plt = pyplot()
    schedule = Schedule.model_validate(result["schedule"])
    scopes: list[tuple[str, list[RunRecord], Mapping[str, Any]]] = [
        (s, [r for r in records if r.source == s], sec) for s, sec in result["per_source"].items()
    ]
    if len(scopes) != 1:
        scopes.append(("overall", list(records), result))
    cols = min(3, len(scopes))
    rows = math.ceil(len(scopes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax, (name, recs, sec) in zip(axes.flat, scopes, strict=False):
        for s in scorers:
            if recs and all(s in r.scores for r in recs):
                pts = tradeoff_curve(recs, scorer=s, schedule=schedule)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{s} (swept)")
        # the monitor last and on top: baselines matched to its FPR sit on the same spot
        ops = [*sec["baselines"].items(), ("oracle", sec["oracle"]), ("monitor", sec["monitor"])]
        for label, m in ops:
            if m.get("realized_fpr") is not None and m.get("token_savings") is not None:
                mon = label == "monitor"
                ax.scatter(
                    [m["realized_fpr"]],
                    [m["token_savings"]],
                    marker="*" if mon else "o",
                    s=220 if mon else 40,
                    facecolor="gold" if mon else None,
                    edgecolor="black" if mon else None,
                    label="monitor (at its thresholds)" if mon else label,
                    zorder=6 if mon else 3,
                )
        t = result["target_fpr"]
        ax.axvline(t, color="grey", ls=":", lw=1, label=f"target FPR {t:g}")
        ax.set_title(f"{name} ({len(recs)} runs)")
        ax.set_xlabel("realized run-level FPR")
        ax.set_ylabel("token savings")
        ax.set_xlim(-0.02, 1.02)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(scopes) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_roc(records: Sequence[RunRecord], path: Path, *, scorers: Sequence[str]) -> None:
    """ROC at 25/50/75% of each run, one line per (scorer, source)."""
    from sklearn.metrics import roc_curve

    plt = pyplot()
    sources = sorted({r.source for r in records})
    fig, axes = plt.subplots(1, len(FRACTIONS), figsize=(5 * len(FRACTIONS), 4.5), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, f in zip(axes[0], FRACTIONS, strict=True):
        for si, s in enumerate(scorers):
            for ci, src in enumerate(sources):
                recs = [r for r in records if r.source == src and s in r.scores and r.n_steps]
                y = [0 if r.resolved else 1 for r in recs]
                if len(set(y)) < 2:
                    continue
                sc = [r.scores[s][max(1, math.ceil(f * r.n_steps)) - 1] for r in recs]
                fpr, tpr, _ = roc_curve(y, sc)
                ax.plot(fpr, tpr, ls=styles[si % len(styles)], color=f"C{ci}", label=f"{s} / {src}")
        ax.plot([0, 1], [0, 1], color="grey", lw=0.5)
        ax.set_title(f"ROC at {int(100 * f)}% of the run")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate (unresolved)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scores_over_steps(
    records: Sequence[RunRecord],
    path: Path,
    *,
    scorer: str = "monitor",
    n: int = 6,
    seed: int = 0,
    thresholds: Mapping[str, Any] | None = None,
) -> None:
    """Score after each step for `n` resolved and `n` unresolved runs drawn with a fixed seed,
    with each group's stop threshold (`thresholds`: the report's "threshold" section)."""
    plt = pyplot()
    rng = np.random.default_rng(seed)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = {True: 0, False: 0}
    for j, (g, used) in enumerate(sorted((thresholds or {}).items())):
        t = used.get("threshold") if isinstance(used, Mapping) else None
        if t is not None:
            ax.axhline(t, color=f"C{j}", ls="--", lw=1, label=f"stop threshold {g}: {t:.3f}")
    for resolved, color in ((True, "tab:green"), (False, "tab:red")):
        pool = [r for r in records if r.resolved == resolved and scorer in r.scores and r.n_steps]
        pick = rng.choice(len(pool), size=min(n, len(pool)), replace=False) if pool else ()
        drawn[resolved] = len(pick)
        for j, i in enumerate(pick):
            r = pool[int(i)]
            ax.plot(
                np.arange(1, r.n_steps + 1),
                r.scores[scorer],
                color=color,
                alpha=0.7,
                label=("resolved" if resolved else "unresolved") if j == 0 else None,
            )
    ax.set_xlabel("step k")
    ax.set_ylabel(f"{scorer} score P(unresolved | steps 1..k)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(
        f"{scorer} score over steps: {drawn[True]} resolved and {drawn[False]} unresolved runs "
        f"drawn from {len(records)}",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(
    records: Sequence[RunRecord],
    result: Mapping[str, Any],
    out_dir: str | Path,
    *,
    scorers: Sequence[str] = ("monitor",),
    n_runs: int = 6,
) -> list[Path]:
    """Write the three plots into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        out / "tokens_saved_vs_fpr.png",
        out / "roc_by_fraction.png",
        out / "score_over_steps.png",
    ]
    plot_tradeoff(records, result, paths[0], scorers=scorers)
    plot_roc(records, paths[1], scorers=scorers)
    plot_scores_over_steps(
        records, paths[2], scorer=scorers[0], n=n_runs, thresholds=result.get("threshold")
    )
    return paths
