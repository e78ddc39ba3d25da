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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.types import Trajectory
from training.baselines.rules import loopbrake_stops
from training.config import PipelineConfig, ThresholdConfig
from training.data.examples import probe_examples, window_examples
from training.data.folds import instance_folds, view_pairs
from training.data.records import RunRecord, save_records
from training.data.runs import labelled_runs, stratified_subsample
from training.evaluate.auroc import _auroc
from training.evaluate.stops import score_stops
from training.pipeline import stages
from training.pipeline.crossfit import (
    CrossfitResult,
    _fit_on_training,
    add_step_score,
    default_methods,
)
from training.pipeline.encode import Encoded, Encoder, encode, load_encoder
from training.pipeline.view_report import write_view_report

log = logging.getLogger(__name__)
LIVE_STEPS = (5, 10)
"""Steps at which the report gives the AUROC among runs still going (what a stop needs)."""
SAVED_TARGETS = ("0.05", "0.1")
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


@contextlib.contextmanager
def _autocast(on_gpu: bool) -> Iterator[None]:
    """bf16 autocast for the GPU feature passes (the weights stay fp32 for the optimiser)."""
    import torch

    if on_gpu:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


def live_auroc(records: Sequence[RunRecord], scorer: str, step: int) -> dict[str, Any]:
    """AUROC (positive = unresolved) of the score after `step` among the runs still going then
    (more than `step` steps: only there can a stop at `step` save tokens)."""
    recs = [r for r in records if r.n_steps > step and scorer in r.scores]
    y = np.array([0 if r.resolved else 1 for r in recs])
    s = np.array([r.scores[scorer][step - 1] for r in recs])
    return {"auroc": _auroc(y, s) if len(recs) else None, "runs": len(recs)}


class _MemoWindows:
    """A featuriser that renders each run once: every pair re-encodes and trains on runs the
    frozen pass already rendered, and the CPU rendering would otherwise cost every pair again."""

    def __init__(self, featuriser: Any) -> None:
        self._featuriser = featuriser
        self._windows: dict[str, list[Any]] = {}

    def windows(self, traj: Trajectory) -> list[Any]:
        if traj.id not in self._windows:
            self._windows[traj.id] = self._featuriser.windows(traj)
        return self._windows[traj.id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._featuriser, name)


def _split_tuning(train: Encoded, k: int, seed: int) -> tuple[Encoded, Encoded]:
    """(tuning runs, calibration runs): one instance fold of k (at least 2) held out."""
    fold = instance_folds(train.runs, max(k, 2), seed=seed + 1)
    tune = [i for i, f in enumerate(fold) if f != 0]
    cal = [i for i, f in enumerate(fold) if f == 0]
    return train.subset(tune), train.subset(cal)


def _tune_and_score(
    cfg: PipelineConfig, encoder: Encoder, tune: Encoded, parts: Sequence[Encoded], out_dir: Path
) -> tuple[stages.HeadFit, dict[str, Any], list[Encoded], list[float], int]:
    """Probe + baselines on `tune`'s frozen features, LoRA from the probe on its windows, then
    `parts` encoded by the tuned model. The model ends fp32 on the CPU (for the head scores)."""
    import torch

    from training.model.finetune import tune_backbone

    tc = cfg.train
    grid = [(c, s) for s in tc.probe_hidden_scale for c in tc.probe_C]
    if len(grid) > 1:  # chosen by the tuning runs' out-of-fold scores, as `failfast crossfit` does
        head, _ = _fit_on_training(cfg, encoder, tune, grid)
    else:
        head = stages.fit_head(cfg, encoder.model, tune, grid=grid)
    baselines = stages.fit_baselines(cfg, encoder, tune, head)
    windows = window_examples(encoder.featuriser, tune.runs, tune.signals, head.examples)
    gpu = torch.cuda.is_available()
    encoder.model.to("cuda" if gpu else "cpu")
    losses = tune_backbone(encoder.model, windows, tc, head="lora", out_dir=out_dir)
    encoder.model.eval()
    with _autocast(gpu):
        tuned = [encode(encoder, p.runs, cached=False) for p in parts]
    encoder.model = encoder.model.float().cpu().eval()
    return head, baselines, tuned, losses, len(windows)


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
    memo = _MemoWindows(encoder.featuriser)
    encoder.featuriser = memo  # type: ignore[assignment]
    if gpu:
        encoder.model.to("cuda")
    with _autocast(gpu):
        data = encode(encoder, runs)  # the frozen features of every run, cached
    del encoder  # each pair loads its own base model
    pairs = view_pairs("instance", data.runs, k=folds, seed=cfg.data.split_seed)
    info: dict[str, Any] = {"pairs": [], "aborted": None, "folds": folds, "budget_s": budget_s}
    info["frozen_pass_s"] = time.perf_counter() - t_start
    for i, (tr, te) in enumerate(pairs):
        t0 = time.perf_counter()
        fresh = load_encoder(cfg)  # every pair tunes the base model, never the last pair's
        fresh.featuriser = memo  # type: ignore[assignment]
        tune, cal = _split_tuning(data.subset(list(tr)), folds - 1, cfg.data.split_seed)
        test = data.subset(list(te))
        head, baselines, (cal_t, test_t), losses, n_windows = _tune_and_score(
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


def summary(report: Mapping[str, Any], records: Sequence[RunRecord]) -> dict[str, Any]:
    """Per agent: AUROC among live runs at steps 5 / 10 (monitor and every baseline) and the
    configured method's tokens saved / realized FPR at 5 % and 10 %; and their means."""
    by_agent: dict[str, list[RunRecord]] = {}
    for r in records:
        by_agent.setdefault(r.agent, []).append(r)
    scorers = sorted(records[0].scores) if records else []
    agents: dict[str, Any] = {}
    for agent, recs in sorted(by_agent.items()):
        row: dict[str, Any] = {"runs": len(recs), "live_auroc": {}, "saved": {}}
        for s in scorers:
            row["live_auroc"][s] = {f"{k}": live_auroc(recs, s, k) for k in LIVE_STEPS}
        targets = report["groups"]["agent"][agent]["targets"]
        for t in SAVED_TARGETS:
            if t in targets:
                m = targets[t]["methods"]["configured"]
                row["saved"][t] = {k: m[k] for k in ("saved", "saved_ci", "fpr", "fpr_ci")}
        agents[agent] = row

    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None and not math.isnan(x)]
        return float(np.mean(v)) if v else None

    means = {
        "live_auroc": {
            s: {
                f"{k}": mean([a["live_auroc"][s][f"{k}"]["auroc"] for a in agents.values()])
                for k in LIVE_STEPS
            }
            for s in scorers
        },
        "saved": {
            t: mean([a["saved"][t]["saved"] for a in agents.values() if t in a["saved"]])
            for t in SAVED_TARGETS
        },
    }
    return {"agents": agents, "mean_per_agent": means}


def _f(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x * scale:.{digits}f}"


def summary_markdown(s: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The headline table of a GPU crossfit: where it ran, and the per-agent figures."""
    dev = meta["device"]
    lines = [
        "# LoRA crossfit (every layer, every run)",
        "",
        f"Device: {dev['device']} (CUDA: {dev['cuda']}); "
        f"{'DRY RUN (tiny subset, not a result)' if meta['dry_run'] else 'full run'}; "
        f"{meta['runs']} runs, {meta['folds']} instance folds, "
        f"{len(meta['pairs'])} pair(s) done, {meta['total_s']:.0f} s of {meta['budget_s']:.0f} s.",
    ]
    if meta["aborted"]:
        lines += ["", f"**PARTIAL: {meta['aborted']}.** Only the pairs done are scored."]
    scorers = sorted(s["mean_per_agent"]["live_auroc"])
    head = " | ".join(f"{sc} @5 | {sc} @10" for sc in scorers)
    lines += [
        "",
        "AUROC among runs still going at step 5 / 10; the monitor's tokens saved (realized FPR) "
        "at the 5 % and 10 % targets, configured thresholds calibrated on held-out training runs.",
        "",
        f"| agent | runs | {head} | saved @5% | saved @10% |",
        "|---" * (4 + 2 * len(scorers)) + "|",
    ]
    for agent, a in s["agents"].items():
        cells = []
        for sc in scorers:
            cells += [_f(a["live_auroc"][sc][f"{k}"]["auroc"]) for k in LIVE_STEPS]
        saved = []
        for t in SAVED_TARGETS:
            m = a["saved"].get(t)
            saved.append(f"{_f(m['saved'], 100, 1)}% ({_f(m['fpr'], 100, 1)}%)" if m else "-")
        lines.append(f"| {agent} | {a['runs']} | {' | '.join(cells + saved)} |")
    m = s["mean_per_agent"]
    cells = []
    for sc in scorers:
        cells += [_f(m["live_auroc"][sc][f"{k}"]) for k in LIVE_STEPS]
    saved = [f"{_f(m['saved'][t], 100, 1)}%" for t in SAVED_TARGETS]
    lines.append(f"| **mean per agent** | | {' | '.join(cells + saved)} |")
    return "\n".join(lines) + "\n"


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
