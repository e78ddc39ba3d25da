"""A cross-fitted view's report, from what `failfast crossfit` saved in OUT/<view>/.

`write_view_report` writes report.json / report.md from the view's records and stops: the
crossfit report (training.evaluate.crossfit_report) and every candidate calibrated as shipped
with the per-group choice (training.evaluate.candidates), calibrated on the other folds' records
(K-fold views) or on the pairs' saved calibration records (time, benchmark:
training.evaluate.views). `rereport` writes them again without encoding or fitting anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_write_text
from training.config import PipelineConfig
from training.data.records import RunRecord, load_records
from training.evaluate.views import view_calibration, view_folds


def write_view_report(
    cfg: PipelineConfig,
    folder: Path,
    view: str,
    records: list[RunRecord],
    stops: Mapping[str, Any],
    *,
    folds: int,
) -> dict[str, Any]:
    """FOLDER/report.json and report.md of one view from its records and stops: the crossfit
    report, and every candidate calibrated as shipped with the per-group choice
    (training.evaluate.candidates) where the view has calibration records for it (module
    docstring)."""
    from training.evaluate.candidates import crossfit_candidates, pair_candidates
    from training.evaluate.candidates_markdown import candidates_markdown
    from training.evaluate.crossfit_plots import plot_threshold_methods
    from training.evaluate.crossfit_report import crossfit_report, report_markdown

    schedule = cfg.policy.schedule()
    report = crossfit_report(
        records,
        stops["methods"],
        stops["loopbrake"],
        view=view,
        schedule=schedule,
        n_boot=cfg.evaluate.n_boot,
    )
    md = report_markdown(report)
    fold = view_folds(view, records, folds, cfg.data.split_seed)
    if fold is not None:
        report["calibrated"] = crossfit_candidates(
            records, cfg.thresholds, schedule, fold=fold, seed=cfg.data.split_seed,
            n_boot=cfg.evaluate.n_boot,
        )  # fmt: skip
    elif (pairs := view_calibration(folder, records)) is not None:
        report["calibrated"] = pair_candidates(
            pairs, cfg.thresholds, schedule, seed=cfg.data.split_seed, n_boot=cfg.evaluate.n_boot
        )
    if "calibrated" in report:
        md += "\n" + candidates_markdown(report["calibrated"])
    # whole or not at all: `rereport` overwrites a view's reports in place
    atomic_write_text(folder / "report.json", json.dumps(report, indent=1))
    atomic_write_text(folder / "report.md", md)
    plot_threshold_methods({view: report}, folder / "threshold_methods.png")
    return report


def rereport(cfg: PipelineConfig, out: str | Path, *, views: Sequence[str], folds: int) -> None:
    """Write each view's report again from OUT/<view>/records.parquet and stops.json (no
    encoding, no fitting)."""
    for view in views:
        folder = Path(out) / view
        stops = json.loads((folder / "stops.json").read_text())
        records = load_records(folder / "records.parquet")
        write_view_report(cfg, folder, view, records, stops, folds=folds)
