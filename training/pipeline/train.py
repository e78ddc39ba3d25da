"""`failfast train`: runs -> split -> encode -> fit head (-> fine-tune) -> baselines -> records ->
metrics -> calibrate -> export.

Writes OUT/: config.yaml, splits.json, data_summary.json, model/, baselines/, records/{val,test}
.parquet, metrics.json, thresholds.json and bundle/ (docs/BUNDLE.md). Under torchrun or
accelerate launch every process encodes and fine-tunes; only the main one (RANK 0) writes.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from monitor.types import Trajectory
from serving.choice import MONITOR_TEXT
from training.config import PipelineConfig
from training.data.records import save_records
from training.data.runs import load_runs
from training.data.splits import save_splits
from training.pipeline import stages
from training.pipeline.encode import encode_splits, load_encoder
from training.pipeline.summary import data_summary, timed, train_metrics

log = logging.getLogger(__name__)


def main(cfg: PipelineConfig, data: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Read the runs under `data` and train; returns the metrics (also in OUT/metrics.json)."""
    t = time.perf_counter()
    runs = load_runs(data)
    log.info("read %d runs in %.1f s", len(runs), time.perf_counter() - t)
    if not any(r.resolved is not None and r.steps for r in runs):
        raise ValueError(f"no labelled runs with steps in {', '.join(map(str, data))}")
    return run_pipeline(cfg, runs, out, load_seconds=time.perf_counter() - t)


def _check(cfg: PipelineConfig) -> None:
    """Refuse, before hours of training, a config whose last stage could not run."""
    if cfg.thresholds.calibration == "val+train-oof" and cfg.model.head != "probe":
        raise ValueError(
            "thresholds.calibration=val+train-oof needs model.head=probe (a fine-tuned backbone "
            "has seen every training run)"
        )


def _seed(seed: int, threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


def run_pipeline(
    cfg: PipelineConfig, runs: Sequence[Trajectory], out: str | Path, *, load_seconds: float = 0.0
) -> dict[str, Any]:
    """Train on `runs` (labels in Trajectory.resolved) and write OUT/; returns the metrics."""
    t_start = time.perf_counter() - load_seconds
    times: dict[str, float] = {"read": load_seconds}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tc = cfg.train
    oof = cfg.thresholds.calibration == "val+train-oof" and tc.bundle
    _check(cfg)
    _seed(tc.seed, tc.threads)
    main_process = int(os.environ.get("RANK", "0")) == 0
    with timed(times, "split"):
        sr = stages.split(cfg, runs)
        if main_process:
            (out / "config.yaml").write_text(
                yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
            )
            save_splits(out / "splits.json", sr.splits)
        if oof:  # too few training instances for the folds: fail now, not after training
            from training.data.folds import instance_folds

            instance_folds(sr.use["train"], cfg.thresholds.crossfit_folds)
    log.info("runs: %s", {n: len(r) for n, r in sr.use.items()})
    with timed(times, "features"):
        encoder = load_encoder(cfg)
        data = encode_splits(encoder, sr.use)
    passes = [d.stats for d in data.values()]
    with timed(times, "probe"):
        head = stages.fit_head(cfg, encoder.model, data["train"], data["val"], text_probe=True)
    losses: list[float] = []
    if cfg.model.head != "probe":
        with timed(times, "finetune"):
            losses, _ = stages.fine_tune(
                encoder, data["train"], head, kind=cfg.model.head, out_dir=out / "checkpoints"
            )
            data.update(stages.reencode(encoder, {n: data[n] for n in stages.EVAL_SPLITS}))
    if not main_process:  # data-parallel work is done; the main process writes the outputs
        return {}
    with timed(times, "baselines"):
        baselines = stages.fit_baselines(cfg, encoder, data["train"], head)
        if baselines:
            from training.baselines.learned import save_baselines

            save_baselines(baselines, out / "baselines")
    with timed(times, "records"):
        records = {}
        for n in stages.EVAL_SPLITS:
            records[n] = stages.score_records(encoder, data[n], baselines)
            save_records(out / "records" / f"{n}.parquet", records[n])
        stages.save_model(cfg, encoder, head, out)
    times["total"] = time.perf_counter() - t_start
    scorers = ["monitor", *([MONITOR_TEXT] if head.text is not None else []), *baselines]
    metrics = train_metrics(
        records["val"],
        scorers=scorers,
        passes=passes,
        examples=len(head.examples),
        losses=losses,
        times=times,
    )
    summary = data_summary(runs, sr, len(head.examples))
    (out / "data_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    if tc.bundle:
        calibration = records["val"]
        if oof:
            oof_records = stages.train_oof_records(
                cfg, encoder.model, data["train"], head, encoder.featuriser if baselines else None
            )
            save_records(out / "records" / "train_oof.parquet", oof_records)
            calibration = calibration + oof_records
        _write_thresholds(cfg, out, calibration)
        if baselines:
            known = [*sr.train_all, *sr.use["val"]] if tc.task_prior_min_runs else None
            _write_candidates(cfg, out, calibration, baselines, scorers, known)
        stages.export(cfg, out)
    return metrics


def _write_thresholds(cfg: PipelineConfig, out: Path, calibration: list[Any]) -> None:
    """OUT/thresholds.json, with which runs calibrated it."""
    from training.calibrate.thresholds import calibration_summary

    th = stages.calibrate(cfg, calibration)
    th.calibration = calibration_summary(
        calibration, cfg.thresholds.calibration, group_by=cfg.thresholds.group_by
    )
    (out / "thresholds.json").write_text(json.dumps(th.to_json(), indent=1) + "\n")


def _write_candidates(
    cfg: PipelineConfig,
    out: Path,
    calibration: list[Any],
    baselines: dict[str, Any],
    scorers: Sequence[str],
    known: Sequence[Trajectory] | None = None,
) -> None:
    """OUT/candidates.json: the calibrated baselines, the stack and the per-group choice
    (training.evaluate.shipped), with the baselines as numpy parameters; copied into the bundle.
    `known`: the runs whose verdicts make the table of known tasks (train.task_prior_min_runs;
    the training and validation splits, never the test split) and its known-task choice."""
    from monitor.thresholds import ThresholdTable
    from training.evaluate.shipped import shipped_candidates
    from training.export.candidates import baseline_params

    table = ThresholdTable.model_validate(json.loads((out / "thresholds.json").read_text()))
    cands = shipped_candidates(calibration, table, scorers=scorers)
    cands["params"] = baseline_params(baselines)
    if known is not None:
        from training.evaluate.known_tasks import known_candidates, task_table

        tc = cfg.train
        prior = task_table(
            known,
            min_runs=tc.task_prior_min_runs,
            weight=tc.task_prior_weight,
            group_by=cfg.thresholds.group_by,
        )
        try:
            cands["known_tasks"] = known_candidates(
                calibration, table, scorers=scorers, prior=prior, ordinary=cands
            )
        except ValueError as e:  # the bundle serves every task as unknown, and says why
            log.warning("no known-task choice: %s", e)
            cands["known_tasks_refused"] = str(e)
    tmp = out / "candidates.json.tmp"
    tmp.write_text(json.dumps(cands) + "\n")
    tmp.replace(out / "candidates.json")
