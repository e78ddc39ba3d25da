"""PNG plots of cross-fitted reports (training.evaluate.crossfit_report), Agg backend.

- threshold_methods.png: per agent, the realized run-level FPR of each threshold method with its
  95% interval, at each of the given targets, against the target and 1.5x the target (the bar the
  shift views are judged by); one row per view when several reports are given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from training.evaluate.plots import pyplot

METHODS = ("conformal", "conformal-margin1.5", "conformal-margin2", "clopper-pearson")


def plot_threshold_methods(
    reports: Mapping[str, Mapping[str, Any]],
    path: Path,
    *,
    targets: Sequence[float] = (0.05, 0.1),
    methods: Sequence[str] = METHODS,
) -> Path:
    """Realized FPR per agent and threshold method, one panel per (view, target).

    Args:
        reports: view name -> its cross-fitted report (report.json of `failfast crossfit`).
        path: the PNG to write.
        targets: targets to draw (those a report lacks are left empty).
        methods: threshold methods to draw, in legend order (those a report lacks are skipped).

    Returns:
        path.
    """
    plt = pyplot()
    views = list(reports)
    fig, axes = plt.subplots(
        len(views),
        len(targets),
        figsize=(5.5 * len(targets), 3.2 * len(views)),
        squeeze=False,
    )
    width = 0.8 / max(len(methods), 1)
    for i, view in enumerate(views):
        agents = reports[view]["groups"]["agent"]
        names = sorted(agents)
        for j, target in enumerate(targets):
            ax = axes[i][j]
            key = f"{target:g}"
            for m, method in enumerate(methods):
                xs, ys, lo, hi = [], [], [], []
                for a, name in enumerate(names):
                    got = agents[name].get("targets", {}).get(key, {}).get("methods", {})
                    if method not in got:
                        continue
                    fpr, (low, high) = 100 * got[method]["fpr"], got[method]["fpr_ci"]
                    if low is None or high is None or not math.isfinite(fpr):
                        continue  # no resolved runs in the group: no rate to draw
                    xs.append(a + (m - (len(methods) - 1) / 2) * width)
                    ys.append(fpr)
                    lo.append(max(fpr - 100 * low, 0.0))  # an interval need not contain the
                    hi.append(max(100 * high - fpr, 0.0))  # point (bootstrap percentiles)
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=4, capsize=2, label=method)
            ax.axhline(100 * target, color="black", lw=1, ls="--", label="target")
            ax.axhline(150 * target, color="red", lw=1, ls=":", label="1.5x target")
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
            ax.set_title(f"{view}: target {100 * target:g}%", fontsize=10)
            ax.set_ylabel("realized FPR, %")
            ax.set_ylim(0, max([150 * target, *ax.get_ylim()[1:]]) * 1.05)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.2 * len(views))))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
