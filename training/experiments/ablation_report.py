"""The ablation report: standard errors of the AUROCs, the markdown table and the plot.

ablations.png: mean per-agent test AUROC of each variant with +-2 standard errors (and the paired
difference to lm_signals), and the tokens saved at 5 % target FPR of the variants with thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.data.records import RunRecord
from training.evaluate.auroc import auroc_report, paired_auroc_delta
from training.evaluate.plots import pyplot
from training.experiments.common import AUROC_KEYS, TARGETS, num, pct


def auroc_summary(recs: list[RunRecord]) -> dict[str, Any]:
    """A variant's test AUROC: mean per agent, per agent and pooled (the monitor score)."""
    rep = auroc_report(recs, scorers=["monitor"])
    return {
        "mean_per_agent": rep["mean_per_agent"]["monitor"],
        "per_agent": {a: e["monitor"] for a, e in rep["per_agent"].items()},
        "pooled": rep["pooled"]["monitor"],
    }


def paired_deltas(out: dict[str, Any], tests: dict[str, list[RunRecord]]) -> None:
    """Each variant vs its scope's lm_signals reference on the same test runs (paired bootstrap
    of the mean per-agent overall AUROC difference), once both exist."""
    for v, e in out["variants"].items():
        ref = f"{e['scope']}:lm_signals"
        if v == ref or ref not in tests or "vs_reference" in e:
            continue
        e["vs_reference"] = {"reference": ref, **paired_auroc_delta(tests[ref], tests[v])}


def test_counts(runs: Sequence[Any]) -> dict[str, dict[str, int]]:
    """Per agent: test runs and unresolved runs (for the AUROC standard errors)."""
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        c = out.setdefault(r.agent, {"runs": 0, "unresolved": 0})
        c["runs"] += 1
        c["unresolved"] += int(not r.resolved)
    return dict(sorted(out.items()))


def auroc_se(auc: float, n_pos: int, n_neg: int) -> float | None:
    """Hanley & McNeil (1982) standard error of an AUROC from n_pos positive and n_neg negative
    runs (run-level counts: prefixes of one run are not independent)."""
    if n_pos < 1 or n_neg < 1:
        return None
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc**2) + (n_neg - 1) * (q2 - auc**2)) / (
        n_pos * n_neg
    )
    return math.sqrt(max(var, 0.0))


def mean_se(per_agent: dict[str, Any], counts: dict[str, dict[str, int]] | None) -> float | None:
    """Standard error of the mean over agents of the overall AUROC (agents independent)."""
    ses = []
    for a, vals in per_agent.items():
        auc, c = vals.get("overall"), (counts or {}).get(a)
        if auc is None or c is None:
            continue
        se = auroc_se(auc, c["unresolved"], c["runs"] - c["unresolved"])
        if se is not None:
            ses.append(se)
    return math.sqrt(sum(x * x for x in ses)) / len(ses) if ses else None


def _mean_se(per_agent: dict[str, Any], counts: dict[str, dict[str, int]] | None) -> str:
    se = mean_se(per_agent, counts)
    return "-" if se is None else f"{se:.3f}"


def _delta(d: dict[str, Any] | None) -> str:
    if not d or d.get("delta") is None:
        return "-"
    if d.get("lo") is None or d.get("hi") is None:
        return f"{d['delta']:+.3f}"
    return f"{d['delta']:+.3f} ({d['lo']:+.3f}, {d['hi']:+.3f})"


def ablation_table(result: dict[str, Any]) -> str:
    """One markdown table: a row per variant."""
    agents = sorted({a for e in result["variants"].values() for a in e["auroc"]["per_agent"]})
    head = ["variant", "train runs", "test runs", "mean/agent AUROC " + " / ".join(AUROC_KEYS),
            "SE", "vs lm_signals (95% CI)", *(f"{a} overall" for a in agents)]  # fmt: skip
    for tg in TARGETS:
        head += [f"FPR@{tg:g}", f"saved@{tg:g}"]
    head.append("s")
    lines = [
        "Ablations on the test split. full: training subsample "
        f"{result['full']['train']} runs, validation {result['full']['val']}, test "
        f"{result['full']['test']} runs; subset: {result['subset']['train']} training and "
        f"{result['subset']['test']} test runs ({result['subset_rule']}; no thresholds, AUROC only).",
        "SE: Hanley-McNeil standard error of the mean/agent overall AUROC from the run counts "
        "(of one row alone). vs lm_signals: the difference to the same scope's LM + signals row "
        "on the same test runs, with a paired bootstrap 95% interval (runs resampled within "
        "agent): the test for whether a variant helps. "
        "FPR/saved: realized run-level FPR and token savings (%) at target FPR 5 % / 10 %, "
        "thresholds picked on validation. s: wall seconds of the variant (feature pass included).",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for v, e in result["variants"].items():
        a = e["auroc"]
        cells = [v, str(e["train_runs"]), str(e["test_runs"]),
                 " / ".join(num(a["mean_per_agent"][k]) for k in AUROC_KEYS),
                 _mean_se(a["per_agent"], (result.get("test_counts") or {}).get(e["scope"])),
                 _delta(e.get("vs_reference")),
                 *(num(a["per_agent"].get(g, {}).get("overall")) for g in agents)]  # fmt: skip
        for tg in TARGETS:
            m = (e.get("ledger") or {}).get(f"{tg:g}")
            cells += [pct(m["realized_fpr"]), pct(m["token_savings"])] if m else ["-", "-"]
        cells.append(f"{e['seconds']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    for v, e in result["variants"].items():
        grid = {k: x for k, x in (e.get("grid") or {}).items() if x is not None}
        if grid:
            best = max(grid, key=lambda k: grid[k])
            lines.append(
                f"\n{v}: over the {len(grid)} probe pairs of the grid, test AUROC "
                f"{min(grid.values()):.3f}-{grid[best]:.3f} (best {best}; hindsight, not a pick)."
            )
    return "\n".join(lines) + "\n"


def plot_ablations(result: Mapping[str, Any], path: Path) -> None:
    """Ablation variants: AUROC with +-2 SE (left), tokens saved and realized FPR at 5 % (right)."""
    plt = pyplot()
    names = list(result["variants"])
    counts = result.get("test_counts") or {}
    auc, err = [], []
    for v in names:
        e = result["variants"][v]
        a = e["auroc"]
        auc.append(a["mean_per_agent"].get("overall") or math.nan)
        se = mean_se(a["per_agent"], counts.get(e["scope"]))
        err.append(2 * se if se is not None else 0.0)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.6), sharey=True)
    y = np.arange(len(names))
    colors = ["C0" if result["variants"][v]["scope"] == "full" else "C1" for v in names]
    ax1.barh(y, auc, xerr=err, color=colors, capsize=3)
    for yi, v, a, e in zip(y, names, auc, err, strict=True):
        d = result["variants"][v].get("vs_reference") or {}
        if d.get("delta") is not None and d.get("lo") is not None:  # the paired comparison
            ax1.text(a + e + 0.005, yi, f"{d['delta']:+.3f}\n[{d['lo']:+.3f}, {d['hi']:+.3f}]",
                     fontsize=7, va="center")  # fmt: skip
    ax1.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax1.set_xlim(0.4, 0.92)
    ax1.set_yticks(y, names)
    ax1.invert_yaxis()
    ax1.set_xlabel(
        "mean per-agent test AUROC, all prefixes (+-2 SE of the row; text: paired 95% CI)"
    )
    saved, labels = [], []
    for v in names:
        m = (result["variants"][v].get("ledger") or {}).get("0.05") or {}
        ok = m.get("token_savings") is not None and m.get("realized_fpr") is not None
        saved.append(100 * m["token_savings"] if ok else math.nan)
        labels.append(f"FPR {100 * m['realized_fpr']:.1f}%" if ok else "no thresholds")
    ax2.barh(y, [0 if math.isnan(x) else x for x in saved], color=colors)
    for yi, x, lab in zip(y, saved, labels, strict=True):
        ax2.text((0 if math.isnan(x) else x) + 0.5, yi, lab, va="center", fontsize=8)
    ax2.set_xlabel("tokens saved at 5 % target FPR, test split (%)")
    ax2.set_xlim(0, max([x for x in saved if not math.isnan(x)] + [10]) * 1.4)
    fig.suptitle(
        "Ablations (blue: full splits, thresholds on validation; orange: subset, AUROC only)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
