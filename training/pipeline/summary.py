"""What `failfast train` reports: data_summary.json, metrics.json and the validation AUROC table."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from monitor.types import Trajectory
from training.data.records import RunRecord
from training.evaluate.auroc import auroc_report
from training.model.features import PassStats
from training.pipeline.stages import SplitRuns

AUROC_DEFINITION = (
    "AUROC, positive = unresolved; 0.25/0.5/0.75: score at k=ceil(f*n); "
    "overall: every prefix, each run weight 1"
)


@contextmanager
def timed(times: dict[str, float], name: str) -> Iterator[None]:
    """Add the wall seconds of the block to times[name]."""
    t = time.perf_counter()
    try:
        yield
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - t


def data_summary(runs: Sequence[Trajectory], sr: SplitRuns, prefix_examples: int) -> dict:
    """Per source: runs, verdicts and runs per split; what was dropped; the training examples."""
    by_source: dict[str, Counter] = {}
    for r in runs:
        c = by_source.setdefault(r.source or r.agent, Counter())
        c["runs"] += 1
        c["resolved" if r.resolved else "unknown" if r.resolved is None else "unresolved"] += 1
    splits = {"train": sr.train_all, "val": sr.use["val"], "test": sr.use["test"]}
    for name, rs in splits.items():
        for r in rs:
            by_source[r.source or r.agent][f"{name}_runs"] += 1
    for r in sr.use["train"]:
        by_source[r.source or r.agent]["train_runs_used"] += 1
    return {
        "sources": {s: dict(c) for s, c in sorted(by_source.items())},
        "dropped_unknown_label": sr.labelled.unknown,
        "dropped_no_steps": sr.labelled.empty,
        "agents": sorted({r.agent for r in sr.labelled.runs}),
        "train_subsample": len(sr.use["train"]) < len(sr.train_all),
        "prefix_examples": prefix_examples,
    }


def train_metrics(
    val: Sequence[RunRecord],
    *,
    scorers: Sequence[str],
    passes: Sequence[PassStats],
    examples: int,
    losses: list[float],
    times: dict[str, float],
) -> dict[str, Any]:
    """metrics.json: validation AUROC per agent, then what the feature pass and training cost."""
    total = PassStats(
        runs=sum(p.runs for p in passes),
        cached_runs=sum(p.cached_runs for p in passes),
        tokens=sum(p.tokens for p in passes),
        seconds=sum(p.seconds for p in passes),
    )
    return {
        "split": "val",
        "definition": AUROC_DEFINITION,
        **auroc_report(val, scorers=scorers),
        "feature_pass": {
            "runs_encoded": total.runs,
            "runs_cached": total.cached_runs,
            "tokens": total.tokens,
            "seconds": round(total.seconds, 2),
            "tokens_per_s": round(total.tokens_per_s, 1),
        },
        "train_examples": examples,
        "finetune_losses": losses,
        "seconds": {k: round(v, 2) for k, v in times.items()},
    }


def format_metrics(metrics: dict[str, Any]) -> str:
    """A small text table: validation AUROC per agent (then pooled) for each scorer."""
    keys = ("0.25", "0.5", "0.75", "overall")
    lines = [f"{'validation AUROC':<34}" + "".join(f"{k:>9}" for k in keys)]

    def row(name: str, entry: dict[str, Any]) -> None:
        for scorer, vals in entry.items():
            if isinstance(vals, dict):
                cells = "".join(
                    f"{vals[k]:>9.3f}" if vals.get(k) is not None else f"{'-':>9}" for k in keys
                )
                lines.append(f"{name + ' / ' + scorer:<34}{cells}")

    for agent, entry in metrics["per_agent"].items():
        row(f"{agent} ({entry['runs']} runs)", entry)
    row("mean per agent", metrics["mean_per_agent"])
    row("pooled (agent mix)", {k: v for k, v in metrics["pooled"].items() if isinstance(v, dict)})
    return "\n".join(lines)
