"""`failfast crossfit`: every labelled run scored once by a head that never saw its task.

The frozen backbone's features are encoded once for all runs (the feature cache); then, for each
(train, test) pair of a view (training.data.folds), the probe and the learned baselines are
fitted on the training runs, the stop thresholds are calibrated on the training runs' own
out-of-fold scores (inner instance folds: thresholds never see the test runs either), and the
test runs are scored and stopped. The records of all pairs are pooled and reported per agent
and per source with bootstrap intervals (training.evaluate.crossfit_report).

Every threshold method of `methods` is calibrated on the same inner scores, so the shift views
compare methods on the same stops' inputs (issue: a target that holds when the tasks change).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor.atomic import atomic_dir
from monitor.types import Trajectory
from serving.choice import MONITOR_TEXT
from training.baselines.rules import loopbrake_stops
from training.config import PipelineConfig, ThresholdConfig
from training.data.examples import probe_examples
from training.data.folds import view_pairs
from training.data.records import RunRecord, save_records
from training.data.runs import balanced_subset, labelled_runs, load_runs
from training.evaluate.auroc import auroc_report
from training.evaluate.calibrated import STEP_LIMIT, length_scores
from training.evaluate.stops import Stops, score_stops
from training.evaluate.views import K_FOLD_VIEWS, PAIRS_JSON, calibration_file
from training.pipeline import stages
from training.pipeline.encode import Encoded, Encoder, encode, load_encoder
from training.pipeline.text_probe import text_oof_scores
from training.pipeline.view_report import write_view_report

log = logging.getLogger(__name__)


@dataclass
class CrossfitResult:
    """The pooled test records of a view and every rule's stops on them.

    Attributes:
        view: the view's name.
        records: test records of every pair (scores: monitor, baselines, step_limit).
        stops: method -> target key -> run_id -> stop step (None: not stopped).
        loopbrake: target key -> stops of LoopBrake calibrated on each pair's training runs.
        thresholds: method -> per pair, the thresholds.json dict it was stopped with.
        seconds: wall time of each pair.
        probes: the (C, hidden scale) kept for each pair.
        calibration: per pair of a view without K folds (time, benchmark), its training runs
            scored out of fold by every candidate (the as-shipped comparison's calibration
            runs); empty for the K-fold views, whose other folds' records calibrate.
        pair_tests: the test run ids of each pair (with `calibration`).
    """

    view: str
    records: list[RunRecord] = field(default_factory=list)
    stops: dict[str, dict[str, Stops]] = field(default_factory=dict)
    loopbrake: dict[str, Stops] = field(default_factory=dict)
    thresholds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    probes: list[dict[str, float]] = field(default_factory=list)
    calibration: list[list[RunRecord]] = field(default_factory=list)
    pair_tests: list[list[str]] = field(default_factory=list)


def _criterion(records: Sequence[RunRecord]) -> float:
    """`failfast train`'s probe criterion on records: the mean over agents of the AUROC at 25 /
    50 / 75 % of each run and overall."""
    mean = auroc_report(records, scorers=["monitor"])["mean_per_agent"]["monitor"]
    vals = [v for v in mean.values() if v is not None]
    return float(np.mean(vals)) if vals else 0.0


def _fit_on_training(
    cfg: PipelineConfig, encoder: Encoder, train: Encoded, grid: Sequence[tuple[float, float]]
) -> tuple[stages.HeadFit, list[RunRecord]]:
    """The probe for each (C, scale) of `grid`, scored on the training runs out of fold; keeps
    the pair whose out-of-fold scores are best by the train criterion (what validation does in
    `failfast train`, here without touching the test runs). Returns the kept head (refitted on
    every training run) and its out-of-fold records, the calibration records."""
    best: tuple[float, tuple[float, float], list[RunRecord]] | None = None
    for pair in grid:
        head = stages.fit_head(cfg, encoder.model, train, grid=[pair], text_probe=False)
        oof = stages.train_oof_records(cfg, encoder.model, train, head)
        crit = _criterion(oof) if len(grid) > 1 else 0.0
        if best is None or crit > best[0]:
            best = (crit, pair, oof)
    assert best is not None
    head = stages.fit_head(cfg, encoder.model, train, grid=[best[1]], text_probe=True)
    if head.text is not None:  # the second probe at the kept pair, out of fold as well
        for r, s in zip(best[2], text_oof_scores(cfg, train, head.text, head.probe), strict=True):
            r.scores[MONITOR_TEXT] = s
    return head, best[2]


def add_step_score(records: Sequence[RunRecord]) -> None:
    """The step count as a score (STEP_LIMIT, the length rule's score), in place."""
    for r in records:
        r.scores[STEP_LIMIT] = length_scores(r)[STEP_LIMIT]


def _pair_records(
    cfg: PipelineConfig,
    encoder: Encoder,
    train: Encoded,
    test: Encoded,
    *,
    oof_baselines: bool = False,
) -> tuple[list[RunRecord], list[RunRecord], tuple[float, float]]:
    """Fit the probe (grid selected out of fold) and the baselines on `train`; return the test
    records (monitor, baselines, step count), the training runs' out-of-fold records (the
    monitor's; with `oof_baselines` every candidate's, the baselines refitted per inner fold)
    and the (C, scale) kept."""
    tc = cfg.train
    grid = [(c, s) for s in tc.probe_hidden_scale for c in tc.probe_C]
    head, calibration = _fit_on_training(cfg, encoder, train, grid)
    baselines = stages.fit_baselines(cfg, encoder, train, head)
    test_recs = stages.score_records(encoder, test, baselines)
    add_step_score(test_recs)
    if oof_baselines and baselines:
        extra = stages.train_oof_baselines(cfg, encoder.featuriser, train)
        for i, r in enumerate(calibration):
            r.scores.update({name: per_run[i] for name, per_run in extra.items()})
        add_step_score(calibration)
    return test_recs, calibration, (head.probe.C, head.probe.hidden_scale)


def crossfit_view(
    cfg: PipelineConfig,
    encoder: Encoder,
    data: Encoded,
    view: str,
    *,
    methods: Mapping[str, ThresholdConfig],
    folds: int = 5,
) -> CrossfitResult:
    """Cross-fit the configured probe over one view (see the module docstring)."""
    schedule = cfg.policy.schedule()
    result = CrossfitResult(view)
    targets = [f"{t:g}" for t in cfg.thresholds.targets]
    for name in methods:
        result.stops[name] = {t: {} for t in targets}
        result.thresholds[name] = []
    for t in targets:
        result.loopbrake[t] = {}
    pairs = view_pairs(view, data.runs, k=folds, seed=cfg.data.split_seed)
    k_fold = view in K_FOLD_VIEWS
    for i, (tr, te) in enumerate(pairs):
        t0 = time.perf_counter()
        test_recs, calibration, pair = _pair_records(
            cfg, encoder, data.subset(list(tr)), data.subset(list(te)), oof_baselines=not k_fold
        )
        result.probes.append({"C": pair[0], "hidden_scale": pair[1]})
        if not k_fold:
            result.calibration.append(calibration)
            result.pair_tests.append([r.run_id for r in test_recs])
        for name, tcfg in methods.items():
            table = stages.calibrate(cfg.model_copy(update={"thresholds": tcfg}), calibration)
            result.thresholds[name].append(table.to_json())
            for t in targets:
                stops, _ = score_stops(test_recs, table, target=float(t))
                result.stops[name][t].update(stops)
        for t in targets:
            lb, _ = loopbrake_stops(calibration, test_recs, alpha=float(t), schedule=schedule)
            result.loopbrake[t].update(lb)
        result.records += test_recs
        result.seconds.append(time.perf_counter() - t0)
        log.info("%s pair %d: %d train / %d test runs, %.0f s", view, i, len(tr), len(te),
                 result.seconds[-1])  # fmt: skip
    return result


def default_methods(cfg: PipelineConfig) -> dict[str, ThresholdConfig]:
    """The configured threshold method, and the others worth comparing on the same scores."""
    base = cfg.thresholds
    # the fixed-margin comparisons fit every group at their margin (no adaptive_margin)
    conformal = {"mode": "bound", "method": "conformal", "adaptive_margin": None}
    return {
        "configured": base,
        "conformal": base.model_copy(update={**conformal, "margin": 1.0}),
        "conformal-margin1.5": base.model_copy(update={**conformal, "margin": 1.5}),
        "conformal-margin2": base.model_copy(update={**conformal, "margin": 2.0}),
        "clopper-pearson": base.model_copy(
            update={
                "mode": "bound",
                "method": "clopper-pearson",
                "margin": 1.0,
                "adaptive_margin": None,
            }
        ),
    }


def main(
    cfg: PipelineConfig,
    data: Sequence[str | Path],
    out: str | Path,
    *,
    views: Sequence[str] = ("instance",),
    folds: int = 5,
    per_label: int = 0,
) -> dict[str, Any]:
    """Read the runs under `data`, then `run_crossfit` (on `balanced_subset` of the labelled
    runs when `per_label` > 0)."""
    runs = load_runs(data)
    if per_label > 0:
        runs = balanced_subset(labelled_runs(runs).runs, per_label, seed=cfg.data.split_seed)
        log.info("balanced subset: %d runs (at most %d per agent and label)", len(runs), per_label)
    return run_crossfit(cfg, runs, out, views=views, folds=folds)


def run_crossfit(
    cfg: PipelineConfig,
    runs: Sequence[Trajectory],
    out: str | Path,
    *,
    views: Sequence[str] = ("instance",),
    folds: int = 5,
) -> dict[str, Any]:
    """Encode every labelled run, cross-fit each view, write OUT/<view>/ and its report."""
    from training.evaluate.crossfit_plots import plot_threshold_methods

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = labelled_runs(runs).runs
    encoder = load_encoder(cfg)
    encoded = encode(encoder, runs)
    probe_examples(cfg, runs)  # a config whose schedule leaves no example fails here, not later
    methods = default_methods(cfg)
    summary: dict[str, Any] = {}
    for view in views:
        res = crossfit_view(cfg, encoder, encoded, view, methods=methods, folds=folds)
        # the view's folder is written beside its place and renamed in whole (a kill keeps the old)
        with atomic_dir(out / view) as folder:
            save_records(folder / "records.parquet", res.records)
            stops = {"methods": res.stops, "loopbrake": res.loopbrake}
            (folder / "stops.json").write_text(json.dumps(stops))
            (folder / "thresholds.json").write_text(json.dumps(res.thresholds, indent=1))
            (folder / "probes.json").write_text(json.dumps(res.probes))
            for i, cal in enumerate(res.calibration):
                save_records(calibration_file(folder, i), cal)
            if res.pair_tests:
                (folder / PAIRS_JSON).write_text(json.dumps(res.pair_tests))
            summary[view] = write_view_report(cfg, folder, view, res.records, stops, folds=folds)
    if len(summary) > 1:
        plot_threshold_methods(summary, out / "threshold_methods.png")
    return summary
