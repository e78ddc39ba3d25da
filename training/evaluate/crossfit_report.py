"""The report of a cross-fitted view: per agent and per source, with bootstrap intervals.

For each group: AUROC at 25 / 50 / 75 % of each run for the monitor and every baseline score;
for each target FPR, every threshold method's realized FPR and tokens saved; the baselines at
the monitor's realized FPR (configured method), i.e. each tuned on the test runs to stop at most
as many resolved runs as the monitor did, with the paired difference in tokens saved; and
LoopBrake's conformal step limit calibrated on the training runs (its own FPR).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from monitor.escape import md
from monitor.schedule import Schedule
from training.data.records import RunRecord
from training.evaluate.calibrated import live_auroc, mean_live_auroc
from training.evaluate.intervals import (
    FRACTIONS,
    Outcome,
    auroc_with_ci,
    by_group,
    paired_saved_delta,
    resample_weights,
    rule_with_ci,
)
from training.evaluate.stops import Stops, matched_score_stops

MONITOR = "monitor"
REFERENCE_METHOD = "configured"


def _group_report(
    recs: list[RunRecord],
    stops: Mapping[str, Mapping[str, Stops]],
    loopbrake: Mapping[str, Stops],
    *,
    schedule: Schedule,
    weights: np.ndarray,
) -> dict[str, Any]:
    scorers = sorted(recs[0].scores)
    out: dict[str, Any] = {
        "runs": len(recs),
        "resolved": int(sum(r.resolved for r in recs)),
        "auroc": {s: auroc_with_ci(recs, s, weights) for s in scorers},
        "auroc_live": {s: live_auroc(recs, s) for s in scorers},
        "targets": {},
    }
    for t in stops[REFERENCE_METHOD]:
        ref = stops[REFERENCE_METHOD][t]
        mon = Outcome.of(recs, ref)
        row: dict[str, Any] = {
            "methods": {m: rule_with_ci(Outcome.of(recs, s[t]), weights) for m, s in stops.items()},
            "loopbrake": rule_with_ci(Outcome.of(recs, loopbrake[t]), weights),
            "equal_fpr": {},
        }
        for base in (s for s in scorers if s != MONITOR):
            matched, _ = matched_score_stops(
                recs, ref, scorer=base, schedule=schedule, group_by="agent"
            )
            b = Outcome.of(recs, matched)
            row["equal_fpr"][base] = {
                **rule_with_ci(b, weights),
                "monitor_minus": paired_saved_delta(mon, b, weights),
            }
        out["targets"][t] = row
    return out


def crossfit_report(
    records: Sequence[RunRecord],
    stops: Mapping[str, Mapping[str, Stops]],
    loopbrake: Mapping[str, Stops],
    *,
    view: str,
    schedule: Schedule,
    n_boot: int = 500,
    seed: int = 0,
) -> dict[str, Any]:
    """Per-agent and per-source metrics of pooled cross-fitted test records (module docstring)."""
    report: dict[str, Any] = {"view": view, "runs": len(records), "groups": {}}
    for key in ("agent", "source"):
        groups = by_group(records, _field(key))
        report["groups"][key] = {}
        for g, idx in groups.items():
            recs = [records[i] for i in idx]
            labels = np.array([int(r.resolved) for r in recs])
            weights = resample_weights(labels, n_boot, seed=seed)
            report["groups"][key][g] = _group_report(
                recs, stops, loopbrake, schedule=schedule, weights=weights
            )
    agents = report["groups"]["agent"]
    report["mean_per_agent_auroc"] = {
        f"{f:g}": float(
            np.nanmean([a["auroc"][MONITOR][f"{f:g}"]["auroc"] for a in agents.values()])
        )
        for f in FRACTIONS
    }
    report["mean_per_agent_live_auroc"] = {
        s: mean_live_auroc({a: v["auroc_live"][s] for a, v in agents.items()})
        for s in sorted(records[0].scores)
    }
    return report


def _field(key: str) -> Callable[[RunRecord], str]:
    return lambda r: str(getattr(r, key))


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def _ci(c: Sequence[float | None], scale: float = 100.0, digits: int = 1) -> str:
    if c[0] is None or c[1] is None:
        return ""
    return f" [{scale * c[0]:.{digits}f}, {scale * c[1]:.{digits}f}]"


def _auroc_cell(a: Mapping[str, Any]) -> str:
    return f"{a['auroc']:.3f}{_ci(a['ci'], 1.0, 2)}"


def report_markdown(report: Mapping[str, Any], *, key: str = "agent") -> str:
    """Markdown tables of a crossfit report: discrimination, then stops per target."""
    groups = report["groups"][key]
    lines = [
        f"## Cross-fitted, view `{report['view']}` ({report['runs']} runs), per {key}",
        "",
        "| " + key + " | runs | resolved | scorer | AUROC 25% | 50% | 75% |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for g, row in groups.items():
        g = md(g)  # a group name from the data stays in its cell
        for s, a in row["auroc"].items():
            cells = [_auroc_cell(a[f"{f:g}"]) for f in FRACTIONS]
            lines.append(
                f"| {g} | {row['runs']} | {row['resolved']} | {s} | " + " | ".join(cells) + " |"
            )
    mean = report.get("mean_per_agent_auroc", {})
    lines += [
        "",
        "Mean per-agent monitor AUROC: " + ", ".join(f"{md(k)}: {v:.3f}" for k, v in mean.items()),
        "",
        "Mean per-agent AUROC among runs still going (what modelling decisions use):",
        "",
    ]
    for scorer, pts in report.get("mean_per_agent_live_auroc", {}).items():
        text = ", ".join(f"{k} {v:.3f}" for k, v in pts.items() if v is not None)
        lines.append(f"- {scorer}: {text}")
    for t in next(iter(groups.values()))["targets"]:
        lines += [
            "",
            f"### Target FPR {t}: realized FPR / tokens saved, % [95% CI] (baselines at equal "
            "FPR are tuned on the evaluated runs: hindsight, not as shipped)",
            "",
            f"| {key} | monitor FPR | monitor saved | baselines at equal FPR: saved (monitor minus) | LoopBrake FPR / saved |",
            "|---|---|---|---|---|",
        ]
        for g, row in groups.items():
            g = md(g)  # a group name from the data stays in its cell
            tr = row["targets"][t]
            m = tr["methods"][REFERENCE_METHOD]
            eq = "; ".join(
                f"{b} {_pct(v['saved'])} ({_pct(v['monitor_minus']['delta'])}{_ci(v['monitor_minus']['ci'])})"
                for b, v in tr["equal_fpr"].items()
            )
            lb = tr["loopbrake"]
            lines.append(
                f"| {g} | {_pct(m['fpr'])}{_ci(m['fpr_ci'])} | {_pct(m['saved'])}{_ci(m['saved_ci'])} "
                f"| {eq} | {_pct(lb['fpr'])} / {_pct(lb['saved'])} |"
            )
        lines += ["", f"Threshold methods at {t} (realized FPR / saved, %):", ""]
        for g, row in groups.items():
            g = md(g)  # a group name from the data stays in its cell
            methods = ", ".join(
                f"{name} {_pct(v['fpr'])} / {_pct(v['saved'])}"
                for name, v in row["targets"][t]["methods"].items()
            )
            lines.append(f"- {g}: {methods}")
    return "\n".join(lines) + "\n"
