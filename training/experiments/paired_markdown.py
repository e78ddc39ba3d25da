"""`training.experiments.paired`'s results as markdown: per view the tokens saved by each scorer
and the served choice, the live AUROC, and per agent the served choice minus each baseline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from serving.choice import MONITOR


def _pct(x: float | None, scale: float = 100.0, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else \
        f"{scale * x:.{digits}f}"  # fmt: skip


def markdown(results: Sequence[dict[str, Any]], a: str, b: str) -> str:
    """One table per view: served and each candidate's tokens saved, then live AUROC."""
    lines = [f"B = {b} minus A = {a}, paired bootstrap within agent and label", ""]
    for res in results:
        lines += [f"### {res['view']} ({res['runs']} runs in both)", "",
                  "| scorer | target | A saved % | B saved % | B - A [95% CI] | worst FPR A -> B |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for t, per in res["saved"].items():
            for n, c in per.items():
                lo, hi = c["ci"]
                lines.append(
                    f"| {n} | {float(t):.0%} | {_pct(c['a'])} | {_pct(c['b'])} | "
                    f"{100 * c['delta']:+.2f} [{_pct(lo, digits=2)}, {_pct(hi, digits=2)}] | "
                    f"{_pct(c['fpr_max_a'])} -> {_pct(c['fpr_max_b'])} |"
                )
        names = res.get("live_scores") or {"a": MONITOR, "b": MONITOR}
        scored = names["a"] if names["a"] == names["b"] else f"A {names['a']} / B {names['b']}"
        for k, c in res["live_auroc"].items():
            lo, hi = c["ci"]
            lines.append(
                f"\n{scored} AUROC among runs live at {k} (mean per agent): A {c['a']:.3f}, "
                f"B {c['b']:.3f}, B - A {c['delta']:+.3f} [{_pct(lo, 1, 3)}, {_pct(hi, 1, 3)}]"
            )
        lines += _per_agent_markdown(res)
        lines += _chosen_markdown(res)
        lines.append("")
    return "\n".join(lines)


def _per_agent_markdown(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for t, agents in res.get("per_agent", {}).items():
        if not agents:
            continue
        count = res["agents_above_baselines"][t]
        vs = next(iter(agents.values()))["b"]["vs"]
        lines += [
            "",
            f"Served minus each calibrated baseline per agent at {float(t):.0%}, B "
            f"(above every one with the paired interval > 0: A {count['a']} of {len(agents)}, "
            f"B {count['b']} of {len(agents)})",
            "",
            "| agent | served % | " + " | ".join(f"minus {n} [CI]" for n in vs) + " | above all |",
            "|---|---|" + "---|" * len(vs) + "---|",
        ]
        for agent, per in agents.items():
            b = per["b"]
            cells = [
                f"{100 * c['delta']:+.1f} [{_pct(c['ci'][0])}, {_pct(c['ci'][1])}]"
                for c in b["vs"].values()
            ]
            mark = "yes" if b["above_all"] else "no"
            lines.append(f"| {agent} | {_pct(b['saved'])} | " + " | ".join(cells) + f" | {mark} |")
    return lines


def _chosen_markdown(res: dict[str, Any]) -> list[str]:
    """Per target, the groups whose served choice differs between A and B: each side's
    candidates with the number of pairs (folds) that chose them."""
    lines: list[str] = []
    for t, groups in res.get("chosen", {}).items():
        differ = {g: c for g, c in groups.items() if c["a"] != c["b"]}
        if not differ:
            continue
        lines += [
            "",
            f"Served choice at {float(t):.0%} where A and B differ (pairs choosing each):",
            "",
        ]
        for g, c in differ.items():
            a, b = (", ".join(f"{n} {k}" for n, k in sorted(c[s].items())) for s in "ab")
            lines.append(f"- {g}: A {a}; B {b}")
    return lines
