"""Cross-fitted LoRA: every layer of the backbone tuned on every run, scored like `failfast crossfit`.

`bench/gpu_crossfit.sh` runs it (bench/gpu_crossfit.py, configs/gpu-crossfit.yaml). For each pair of K instance folds:

1. the training folds' instances are split once more (seeded, by instance): a *calibration* fold
   (1 of K-1) and the *tuning* runs (the rest);
2. the probe (grid chosen out of fold, as in `failfast crossfit`) and the learned baselines are
   fitted on the tuning runs' frozen features; the LoRA adapters (every layer, attention + MLP
   projections) and the head are then tuned from the probe on the tuning runs' windows;
3. the calibration and test runs are encoded by the tuned model; the stop thresholds of every
   method are calibrated on the calibration runs' scores and the test runs are stopped.

The one departure from `failfast crossfit`: there the calibration scores are the training runs'
own out-of-fold probe scores (cheap probes refitted in inner folds); here an inner fine-tune per
inner fold would multiply the GPU time by K, so one held-out fold of the training instances,
never seen by the tune, plays that part. The report is the same
(training.pipeline.crossfit.write_view_report: the crossfit report and the as-shipped
candidates), so its numbers compare with the CPU quick config's crossfit.

A wall-clock budget is checked after every pair: when the time so far plus the mean pair time
for the pairs left would pass it, the run stops and writes the pairs done (report marked
partial) instead of running past it.

Here: the job (`run_gpu_crossfit`) and its loop over the pairs (`crossfit_lora`); one pair's
split, fit and tune are training.pipeline.lora_pair, the headline training.pipeline.gpu_headline.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.types import Trajectory
from training.baselines.rules import loopbrake_stops
from training.config import PipelineConfig, ThresholdConfig
from training.data.examples import probe_examples
from training.data.folds import view_pairs
from training.data.records import save_records
from training.data.runs import labelled_runs, stratified_subsample
from training.evaluate.stops import score_stops
from training.pipeline import stages
from training.pipeline.crossfit import CrossfitResult, add_step_score, default_methods
from training.pipeline.encode import encode, load_encoder
from training.pipeline.gpu_headline import (
    LIVE_STEPS,
    SAVED_TARGETS,
    live_auroc,
    summary,
    summary_markdown,
)
from training.pipeline.lora_pair import MemoWindows, bf16_autocast, split_tuning, tune_and_score
from training.pipeline.view_report import write_view_report

__all__ = [
    "DRY_RUN",
    "LIVE_STEPS",
    "SAVED_TARGETS",
    "crossfit_lora",
    "device_info",
    "live_auroc",
    "run_gpu_crossfit",
    "summary",
    "summary_markdown",
]

log = logging.getLogger(__name__)
DRY_RUN = [
    "model.n_layers=2",
    "train.lora_top_layers=2",
    "train.max_steps=3",
    "train.batch_size=2",
    "train.probe_C=[0.1]",
    "train.probe_hidden_scale=[0.02]",
    "evaluate.n_boot=50",
]
"""Overrides of `--dry-run`: two layers, three optimiser steps, one probe pair, few resamples."""


def device_info() -> dict[str, Any]:
    """What torch sees: CUDA or not, the GPU's name and memory, bf16 support."""
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if info["cuda"]:
        p = torch.cuda.get_device_properties(0)
        info |= {
            "device": p.name,
            "devices": torch.cuda.device_count(),
            "memory_gib": round(p.total_memory / 2**30, 1),
            "bf16": bool(torch.cuda.is_bf16_supported()),
        }
    else:
        info |= {"device": "cpu", "threads": torch.get_num_threads()}
    return info


def crossfit_lora(
    cfg: PipelineConfig,
    runs: Sequence[Trajectory],
    out: Path,
    *,
    methods: Mapping[str, ThresholdConfig],
    folds: int,
    budget_s: float,
    t_start: float,
) -> tuple[CrossfitResult, dict[str, Any]]:
    """The instance view cross-fitted with a LoRA tune per pair (module docstring). Returns the
    pooled result and what happened per pair (runs, windows, losses, seconds, budget)."""
    import torch

    gpu = torch.cuda.is_available()
    schedule = cfg.policy.schedule()
    targets = [f"{t:g}" for t in cfg.thresholds.targets]
    res = CrossfitResult("instance")
    res.stops = {m: {t: {} for t in targets} for m in methods}
    res.thresholds = {m: [] for m in methods}
    res.loopbrake = {t: {} for t in targets}
    encoder = load_encoder(cfg)
    memo = MemoWindows(encoder.featuriser)
    encoder.featuriser = memo  # type: ignore[assignment]
    if gpu:
        encoder.model.to("cuda")
    with bf16_autocast(gpu):
        data = encode(encoder, runs)  # the frozen features of every run, cached
    del encoder  # each pair loads its own base model
    pairs = view_pairs("instance", data.runs, k=folds, seed=cfg.data.split_seed)
    info: dict[str, Any] = {"pairs": [], "aborted": None, "folds": folds, "budget_s": budget_s}
    info["frozen_pass_s"] = time.perf_counter() - t_start
    for i, (tr, te) in enumerate(pairs):
        t0 = time.perf_counter()
        fresh = load_encoder(cfg)  # every pair tunes the base model, never the last pair's
        fresh.featuriser = memo  # type: ignore[assignment]
        tune, cal = split_tuning(data.subset(list(tr)), folds - 1, cfg.data.split_seed)
        test = data.subset(list(te))
        head, baselines, (cal_t, test_t), losses, n_windows = tune_and_score(
            cfg, fresh, tune, [cal, test], out / "checkpoints" / f"pair{i}"
        )
        calibration = stages.monitor_records(fresh.model, cal_t)
        test_recs = stages.score_records(fresh, test_t, baselines)
        add_step_score(test_recs)
        for name, tcfg in methods.items():
            table = stages.calibrate(cfg.model_copy(update={"thresholds": tcfg}), calibration)
            res.thresholds[name].append(table.to_json())
            for t in targets:
                res.stops[name][t].update(score_stops(test_recs, table, target=float(t))[0])
        for t in targets:
            lb, _ = loopbrake_stops(calibration, test_recs, alpha=float(t), schedule=schedule)
            res.loopbrake[t].update(lb)
        res.records += test_recs
        res.probes.append({"C": head.probe.C, "hidden_scale": head.probe.hidden_scale})
        res.seconds.append(time.perf_counter() - t0)
        info["pairs"].append(
            {
                "tune_runs": len(tune.runs),
                "calibration_runs": len(cal.runs),
                "test_runs": len(test.runs),
                "windows": n_windows,
                "losses": losses,
                "seconds": res.seconds[-1],
            }
        )
        elapsed = time.perf_counter() - t_start
        left = len(pairs) - i - 1
        projected = elapsed + float(np.mean(res.seconds)) * left
        info["projected_s"] = projected
        log.info(
            "pair %d/%d: %d tune / %d calibration / %d test runs, %d windows, %.0f s; "
            "projected total %.0f s of %.0f s",
            i + 1, len(pairs), len(tune.runs), len(cal.runs), len(test.runs), n_windows,
            res.seconds[-1], projected, budget_s,
        )  # fmt: skip
        if left and projected > budget_s:
            info["aborted"] = (
                f"projected {projected:.0f} s after pair {i + 1} exceeds the {budget_s:.0f} s "
                f"budget; {left} pair(s) not run"
            )
            break
    return res, info


def _write(path: Path, text: str) -> None:
    """Write beside, then rename into place: a kill mid-write leaves the old file whole."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run_gpu_crossfit(
    cfg: PipelineConfig,
    runs: Sequence[Trajectory],
    out: str | Path,
    *,
    folds: int = 5,
    budget_s: float = 600.0,
    max_runs: int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Cross-fit a LoRA tune over the instance view and write OUT/report.md|json (the headline)
    and OUT/instance/ (records, stops, thresholds, the full crossfit report)."""
    t_start = time.perf_counter()
    out = Path(out)
    (out / "instance").mkdir(parents=True, exist_ok=True)
    dev = device_info()
    log.info("device: %s", json.dumps(dev))
    runs = labelled_runs(runs).runs
    if max_runs:
        runs = stratified_subsample(runs, max_runs, seed=cfg.data.subsample_seed)
    probe_examples(cfg, runs)  # a config whose schedule leaves no example fails here, not later
    res, info = crossfit_lora(
        cfg, runs, out, methods=default_methods(cfg), folds=folds, budget_s=budget_s,
        t_start=t_start,
    )  # fmt: skip
    folder = out / "instance"
    save_records(folder / "records.parquet", res.records)
    _write(folder / "stops.json", json.dumps({"methods": res.stops, "loopbrake": res.loopbrake}))
    _write(folder / "thresholds.json", json.dumps(res.thresholds, indent=1))
    stops = {"methods": res.stops, "loopbrake": res.loopbrake}
    # the report `failfast crossfit` writes, as-shipped candidates included: comparable figures
    report = write_view_report(cfg, folder, "instance", res.records, stops, folds=folds)
    meta = {
        "device": dev,
        "dry_run": dry_run,
        "runs": len(runs),
        **info,
        "total_s": time.perf_counter() - t_start,
    }
    head = summary(report, res.records)
    _write(out / "report.json", json.dumps({"meta": meta, **head}, indent=1))
    _write(out / "report.md", summary_markdown(head, meta))
    return {"meta": meta, **head}
