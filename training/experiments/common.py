"""What the experiments share: the targets and AUROC keys they report, the monitor's ledger at a
target, number formats and where results are written.

The experiments run the pipeline's own stages (training.pipeline): the same instance splits and
training subsample as `failfast train` (same data, same seed), the same feature cache (a probe
refitted on cached features costs seconds), the same probe selection and thresholds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.thresholds import ThresholdTable
from training.data.records import RunRecord
from training.evaluate.ledger import ledger_metrics
from training.evaluate.report import pct
from training.evaluate.stops import score_stops

TARGETS = (0.05, 0.10)
AUROC_KEYS = ("0.25", "0.5", "0.75", "overall")

__all__ = ["AUROC_KEYS", "TARGETS", "ledger", "num", "pct", "write_result"]


def ledger(
    test_records: Sequence[RunRecord], thresholds: ThresholdTable, *, target: float
) -> dict[str, Any]:
    """Realized FPR, recall and token savings of the monitor at `target` on the test records,
    with where each group's threshold came from (agent / pooled / refused)."""
    stops, used = score_stops(test_records, thresholds, target=target)
    m = ledger_metrics(test_records, stops, restart_pool=test_records)
    keys = ("runs", "resolved_runs", "realized_fpr", "fpr_ci", "recall", "token_savings")
    return {**{k: m[k] for k in keys}, "threshold": used}


def num(x: Any) -> str:
    """A number with three decimals ("-" for None)."""
    return "-" if x is None else f"{x:.3f}"


def write_result(out: Path, name: str, result: dict[str, Any], table: str) -> None:
    """OUT/experiments/NAME.json and NAME.md."""
    d = out / "experiments"
    d.mkdir(parents=True, exist_ok=True)
    from monitor.atomic import atomic_write_text  # each file whole or not at all

    atomic_write_text(d / f"{name}.json", json.dumps(result, indent=1, default=float) + "\n")
    atomic_write_text(d / f"{name}.md", table)
