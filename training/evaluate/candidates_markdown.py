"""The as-shipped comparison's tables (training.evaluate.candidates' report) as markdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def candidates_markdown(rep: dict[str, Any]) -> str:
    """Tables of the as-shipped comparison: mean per agent, then per agent."""
    lines = ["## Calibrated as shipped (every candidate by the monitor's procedure)", ""]
    lines += ["| target | scorer | mean per-agent saved % [CI] | mean FPR % | max FPR % | "
              "selected minus [CI] | selected_per_target minus [CI] |",
              "|---|---|---|---:|---:|---|---|"]  # fmt: skip
    for key, per in rep["mean_per_agent"].items():
        for n, v in per.items():
            dd = [
                f"{100 * d['delta']:.1f}{_ci(d['ci'])}" if (d := v.get(f)) else ""
                for f in ("selected_minus", "per_target_minus")
            ]
            lines.append(
                f"| {key} | {n} | {100 * v['saved']:.1f}{_ci(v['saved_ci'])} | "
                f"{100 * v['fpr_mean']:.1f} | {100 * v['fpr_max']:.1f} | {dd[0]} | {dd[1]} |"
            )
    lines += ["", "Mean per-agent live AUROC: ", ""]
    for s, pts in rep["mean_per_agent_live_auroc"].items():
        lines.append(
            f"- {s}: " + ", ".join(f"{k} {v:.3f}" for k, v in pts.items() if v is not None)
        )
    for key in rep["mean_per_agent"]:
        lines += ["", f"### Target {key} per agent: FPR % / saved % [CI]", ""]
        names = list(next(iter(rep["per_agent"].values()))["targets"][key])
        names = [n for n in names if n != "selected_minus"]
        lines += ["| agent | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for a, e in rep["per_agent"].items():
            row = e["targets"][key]
            cells = [
                f"{100 * row[n]['fpr']:.1f} / {100 * row[n]['saved']:.1f}{_ci(row[n]['saved_ci'])}"
                for n in names
            ]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines += ["", "Chosen per group (fold 0): " + ", ".join(
        f"{g} {c['chosen']}" for g, c in rep["choices"][0].items())]  # fmt: skip
    return "\n".join(lines) + "\n"


def _ci(c: Sequence[float | None]) -> str:
    if c[0] is None or c[1] is None:
        return ""
    return f" [{100 * c[0]:.1f}, {100 * c[1]:.1f}]"
