"""New thresholds for a trained bundle from the user's own labelled runs (`failfast calibrate`).

No retraining: the bundle's ONNX graphs score the runs (`score_runs`, serving.Scorer.score_run,
or the scores a live service logged: training.data.decisions), thresholds are picked on those
records under the bundle's check schedule (training.calibrate.thresholds), and `recalibrate`
merges them into the bundle's table: groups present in the new runs get new thresholds, the others
keep theirs (`replace=True` drops them). `calibration_record` is what the new bundle says about it
(docs/BUNDLE.md, "The calibration record").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.schedule import Schedule
from monitor.thresholds import ThresholdTable, target_key
from monitor.types import Trajectory
from training.calibrate.thresholds import ThresholdPicker, calibration_summary
from training.config import ThresholdConfig
from training.data.records import RunRecord, records_from_runs

if TYPE_CHECKING:
    from serving.scorer import Scorer

log = logging.getLogger(__name__)


def score_runs(
    scorer: Scorer, runs: Sequence[Trajectory], *, progress: bool = True
) -> list[RunRecord]:
    """RunRecords of labelled runs scored with the bundle's whole-run graph: the LM probe
    ("monitor") and, where the bundle has a second probe, its scores ("monitor_text").

    Args:
        scorer: a serving.Scorer.
        runs: runs with a verdict and steps (training.data.runs.labelled_runs).
        progress: a tqdm bar on stderr.
    """
    from tqdm import tqdm

    heads = [scorer.score_heads(r) for r in tqdm(runs, desc="scoring runs", unit="run",
                                                  disable=not progress)]  # fmt: skip
    names = [n for n in (heads[0] if heads else {"monitor": []}) if all(n in h for h in heads)]
    return records_from_runs(
        runs, {n: [np.asarray(h[n], dtype=np.float64) for h in heads] for n in names}
    )


@dataclass
class Recalibrated:
    """The merged table and what happened to each group.

    Attributes:
        table: the thresholds to serve.
        groups: group -> runs and resolved runs of the new records (these got new thresholds).
        kept: group -> why its thresholds were kept from the bundle.
        pooled: "recalibrated", or why the pooled thresholds were kept.
    """

    table: ThresholdTable
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    pooled: str = "recalibrated"


def recalibrate(
    old: ThresholdTable | None,
    records: Sequence[RunRecord],
    cfg: ThresholdConfig,
    *,
    schedule: Schedule,
    replace: bool = False,
) -> Recalibrated:
    """Thresholds picked on `records`, merged into the bundle's table `old`.

    Groups present in `records` get the new thresholds; groups of `old` absent from them keep
    theirs, and so does the pooled fallback unless the records cover every group of `old`
    (`replace`: the new table alone). The schedule is the bundle's: thresholds hold only for the
    rule they were calibrated under.

    Raises:
        ValueError: no records, or `cfg.group_by` differs from the table's without `replace`.
    """
    if not records:
        raise ValueError("no labelled runs to calibrate on")
    if old is not None and not replace and old.group_by != cfg.group_by:
        raise ValueError(
            f"the bundle's thresholds are grouped by {old.group_by}, not {cfg.group_by}: "
            "pass --group-by "
            f"{old.group_by}, or --replace to drop the bundle's thresholds"
        )
    new = ThresholdPicker(cfg, schedule=schedule).fit(records).thresholds_
    counts = calibration_summary(records, "failfast calibrate", group_by=cfg.group_by)["per_agent"]
    if old is None or replace:
        new.calibration = {"records": "failfast calibrate", "per_agent": counts}
        return Recalibrated(new, counts)
    kept = {
        g: "no runs of it in the calibration data: thresholds kept from the bundle"
        for g in old.groups
        if g not in new.groups
    }
    groups = {**{g: old.groups[g] for g in kept}, **new.groups}
    pooled, pooled_note = new.pooled, "recalibrated"
    if kept:
        pooled = old.pooled
        pooled_note = (
            "kept from the bundle: the calibration data has no runs of "
            + ", ".join(sorted(kept))
            + " (--replace recalibrates it on the new runs alone)"
        )
    before = (old.calibration or {}).get("per_agent") or {}
    calibration = {
        "records": "failfast calibrate",
        "per_agent": {
            **{g: {**before.get(g, {}), "kept_from": (old.calibration or {}).get("records")}
            for g in kept},
            **counts,
        },
    }  # fmt: skip
    table = new.model_copy(
        update={
            "groups": dict(sorted(groups.items())),
            "pooled": pooled,
            "targets": sorted(set(old.targets) | set(new.targets)),
            "calibration": calibration,
        }
    )
    return Recalibrated(table, counts, kept, pooled_note)


def refusals(table: ThresholdTable, groups: Sequence[str], target: float) -> dict[str, str]:
    """group -> why `target` was refused for it (groups of `groups` only; "pooled" too)."""
    out = {}
    for g in groups:
        entry = table.groups[g].stop.get(target_key(target)) if g in table.groups else None
        if entry is not None and entry.refused:
            out[g] = entry.refused
    pooled = table.pooled.stop.get(target_key(target))
    if pooled is not None and pooled.refused:
        out["pooled"] = pooled.refused
    return out


def calibration_record(
    result: Recalibrated,
    cfg: ThresholdConfig,
    *,
    data: dict[str, Any],
    served_target: float,
    bundle: Any,
    command: str,
) -> dict[str, Any]:
    """monitor.json's `calibration`: what data, when, which method and targets, by which command;
    the bundle's earlier records under `history` (newest first)."""
    from importlib import metadata

    try:
        version = metadata.version("failfast-monitor")
    except metadata.PackageNotFoundError:
        version = "unknown"
    earlier = bundle.manifest.calibration
    history = []
    if isinstance(earlier, dict):
        history = [{k: v for k, v in earlier.items() if k != "history"}]
        history += list(earlier.get("history") or [])
    return {
        "by": "failfast calibrate",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command,
        "failfast_monitor": version,
        "from_bundle": {"name": bundle.path.name, "sha256": bundle.sha256},
        "data": data,
        "thresholds": {
            "mode": cfg.mode,
            "method": cfg.method,
            "confidence": cfg.confidence,
            "targets": list(cfg.targets),
            "group_by": cfg.group_by,
            "warn_fraction": cfg.warn_fraction,
            "served_target": served_target,
        },
        "groups": {
            g: {**c, "refused": bool(refusals(result.table, [g], served_target))}
            for g, c in result.groups.items()
        },
        "kept": result.kept,
        "pooled": result.pooled,
        "history": history,
    }
