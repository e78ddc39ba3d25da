"""The headline of a GPU crossfit (training.pipeline.gpu_crossfit): OUT/report.json's per-agent
figures (`summary`) and OUT/report.md's table (`summary_markdown`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from training.data.records import RunRecord
from training.evaluate.auroc import _auroc

LIVE_STEPS = (5, 10)
"""Steps at which the report gives the AUROC among runs still going (what a stop needs)."""
SAVED_TARGETS = ("0.05", "0.1")


def live_auroc(records: Sequence[RunRecord], scorer: str, step: int) -> dict[str, Any]:
    """AUROC (positive = unresolved) of the score after `step` among the runs still going then
    (more than `step` steps: only there can a stop at `step` save tokens)."""
    recs = [r for r in records if r.n_steps > step and scorer in r.scores]
    y = np.array([0 if r.resolved else 1 for r in recs])
    s = np.array([r.scores[scorer][step - 1] for r in recs])
    return {"auroc": _auroc(y, s) if len(recs) else None, "runs": len(recs)}


def summary(report: Mapping[str, Any], records: Sequence[RunRecord]) -> dict[str, Any]:
    """Per agent: AUROC among live runs at steps 5 / 10 (monitor and every baseline) and the
    configured method's tokens saved / realized FPR at 5 % and 10 %; and their means."""
    by_agent: dict[str, list[RunRecord]] = {}
    for r in records:
        by_agent.setdefault(r.agent, []).append(r)
    scorers = sorted(records[0].scores) if records else []
    agents: dict[str, Any] = {}
    for agent, recs in sorted(by_agent.items()):
        row: dict[str, Any] = {"runs": len(recs), "live_auroc": {}, "saved": {}}
        for s in scorers:
            row["live_auroc"][s] = {f"{k}": live_auroc(recs, s, k) for k in LIVE_STEPS}
        targets = report["groups"]["agent"][agent]["targets"]
        for t in SAVED_TARGETS:
            if t in targets:
                m = targets[t]["methods"]["configured"]
                row["saved"][t] = {k: m[k] for k in ("saved", "saved_ci", "fpr", "fpr_ci")}
        agents[agent] = row

    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None and not math.isnan(x)]
        return float(np.mean(v)) if v else None

    means = {
        "live_auroc": {
            s: {
                f"{k}": mean([a["live_auroc"][s][f"{k}"]["auroc"] for a in agents.values()])
                for k in LIVE_STEPS
            }
            for s in scorers
        },
        "saved": {
            t: mean([a["saved"][t]["saved"] for a in agents.values() if t in a["saved"]])
            for t in SAVED_TARGETS
        },
    }
    return {"agents": agents, "mean_per_agent": means}


def _f(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x * scale:.{digits}f}"


def summary_markdown(s: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The headline table of a GPU crossfit: where it ran, and the per-agent figures."""
    dev = meta["device"]
    lines = [
        "# LoRA crossfit (every layer, every run)",
        "",
        f"Device: {dev['device']} (CUDA: {dev['cuda']}); "
        f"{'DRY RUN (tiny subset, not a result)' if meta['dry_run'] else 'full run'}; "
        f"{meta['runs']} runs, {meta['folds']} instance folds, "
        f"{len(meta['pairs'])} pair(s) done, {meta['total_s']:.0f} s of {meta['budget_s']:.0f} s.",
    ]
    if meta["aborted"]:
        lines += ["", f"**PARTIAL: {meta['aborted']}.** Only the pairs done are scored."]
    scorers = sorted(s["mean_per_agent"]["live_auroc"])
    head = " | ".join(f"{sc} @5 | {sc} @10" for sc in scorers)
    lines += [
        "",
        "AUROC among runs still going at step 5 / 10; the monitor's tokens saved (realized FPR) "
        "at the 5 % and 10 % targets, configured thresholds calibrated on held-out training runs.",
        "",
        f"| agent | runs | {head} | saved @5% | saved @10% |",
        "|---" * (4 + 2 * len(scorers)) + "|",
    ]
    for agent, a in s["agents"].items():
        cells = []
        for sc in scorers:
            cells += [_f(a["live_auroc"][sc][f"{k}"]["auroc"]) for k in LIVE_STEPS]
        saved = []
        for t in SAVED_TARGETS:
            m = a["saved"].get(t)
            saved.append(f"{_f(m['saved'], 100, 1)}% ({_f(m['fpr'], 100, 1)}%)" if m else "-")
        lines.append(f"| {agent} | {a['runs']} | {' | '.join(cells + saved)} |")
    m = s["mean_per_agent"]
    cells = []
    for sc in scorers:
        cells += [_f(m["live_auroc"][sc][f"{k}"]) for k in LIVE_STEPS]
    saved = [f"{_f(m['saved'][t], 100, 1)}%" for t in SAVED_TARGETS]
    lines.append(f"| **mean per agent** | | {' | '.join(cells + saved)} |")
    return "\n".join(lines) + "\n"
