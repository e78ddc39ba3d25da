"""`failfast train`: corpus -> splits -> features -> head -> baselines -> records -> metrics.

Flat on purpose: `main(cfg, data, out)` runs the steps in order and writes OUT/ as described in
the shared MODEL_CONTRACT (config.yaml, data_summary.json, splits.json, model/, records/,
baselines/, metrics.json), then thresholds.json and the bundle when training.thresholds and
training.export are available.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from monitor.featurise import Featuriser
from monitor.signals import SIGNAL_NAMES, signal_matrix
from monitor.types import Trajectory
from training import baselines as bl
from training.backbone import backbone_key, cache_dir, resolve_base
from training.config import PipelineConfig
from training.data import (
    label_of,
    labelled_runs,
    load_runs,
    prefix_examples,
    probe_examples,
    run_weights,
    stratified_subsample,
    window_examples,
)
from training.features import (
    FeatureCache,
    PassStats,
    extract_features,
    feature_key,
    shard_features,
)
from training.heads import head_scores, select_probe, tune_backbone
from training.model import PrefixClassifier, build_classifier, save_classifier
from training.prefix_metrics import auroc_report
from training.records import RunRecord, records_from_runs, save_records
from training.splits import make_splits, save_splits

log = logging.getLogger(__name__)
EVAL_SPLITS = ("val", "test")


def _seed(seed: int, threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)


def _rows(per_run: Sequence[np.ndarray], run: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Rows k-1 of per-run arrays for each (run index, k) example."""
    return np.stack([per_run[i][k - 1] for i, k in zip(run, step, strict=True)])


def _summary(
    runs: Sequence[Trajectory],
    lab: Any,
    split_runs: dict[str, list[Trajectory]],
    train_used: Sequence[Trajectory],
) -> dict[str, Any]:
    by_source: dict[str, Counter] = {}
    for r in runs:
        c = by_source.setdefault(r.source or r.agent, Counter())
        c["runs"] += 1
        c["resolved" if r.resolved else "unknown" if r.resolved is None else "unresolved"] += 1
    for name, rs in split_runs.items():
        for r in rs:
            by_source[r.source or r.agent][f"{name}_runs"] += 1
    for r in train_used:
        by_source[r.source or r.agent]["train_runs_used"] += 1
    return {
        "sources": {s: dict(c) for s, c in sorted(by_source.items())},
        "dropped_unknown_label": lab.unknown,
        "dropped_no_steps": lab.empty,
        "agents": sorted({r.agent for r in lab.runs}),
        "train_subsample": len(train_used) < len(split_runs["train"]),
    }


def _score_split(
    model: PrefixClassifier, feats: Sequence[Any], signals: Sequence[np.ndarray]
) -> list[np.ndarray]:
    return [head_scores(model, f.hidden, s) for f, s in zip(feats, signals, strict=True)]


def main(cfg: PipelineConfig, data: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Read the runs under `data` and train; returns the metrics (also in OUT/metrics.json)."""
    t = time.perf_counter()
    runs = load_runs(data)
    log.info("read %d runs in %.1f s", len(runs), time.perf_counter() - t)
    if not any(r.resolved is not None and r.steps for r in runs):
        raise ValueError(f"no labelled runs with steps in {', '.join(map(str, data))}")
    return run_pipeline(cfg, runs, out, load_seconds=time.perf_counter() - t)


def run_pipeline(
    cfg: PipelineConfig, runs: Sequence[Trajectory], out: str | Path, *, load_seconds: float = 0.0
) -> dict[str, Any]:
    """Train on `runs` (labels in Trajectory.resolved) and write OUT/; returns the metrics."""
    t_start = time.perf_counter() - load_seconds
    times: dict[str, float] = {"read": load_seconds}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tc, mc = cfg.train, cfg.model
    if cfg.thresholds.calibration == "val+train-oof" and mc.head != "probe":
        # checked before hours of training, not after
        raise ValueError(
            "thresholds.calibration=val+train-oof needs model.head=probe (a fine-tuned backbone "
            "has seen every training run)"
        )
    _seed(tc.seed, tc.threads)
    # Under torchrun / accelerate launch only the main process (RANK 0) writes OUT/.
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if rank == 0:
        (out / "config.yaml").write_text(
            yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
        )

    # -- labels and splits
    t = time.perf_counter()
    lab = labelled_runs(runs)
    if not lab.runs:
        raise ValueError("no labelled runs with steps")
    splits = make_splits(lab.runs, fractions=cfg.data.split_fractions, seed=cfg.data.split_seed)
    if rank == 0:
        save_splits(out / "splits.json", splits)
    split_runs = {n: splits.select(lab.runs, n) for n in ("train", "val", "test")}
    train_runs = stratified_subsample(
        split_runs["train"], cfg.data.train_max_runs or 0, seed=cfg.data.subsample_seed
    )
    if cfg.thresholds.calibration == "val+train-oof" and tc.bundle:
        from training.crossfit import instance_folds

        instance_folds(train_runs, cfg.thresholds.crossfit_folds)  # too few instances: fail now
    summary = _summary(runs, lab, split_runs, train_runs)
    times["split"] = time.perf_counter() - t
    use = {"train": train_runs, "val": split_runs["val"], "test": split_runs["test"]}
    log.info("runs: %s", {n: len(r) for n, r in use.items()})

    # -- model and features (one causal pass per window, cached)
    t = time.perf_counter()
    base_dir = resolve_base(mc.base)
    names = list(SIGNAL_NAMES) if mc.use_signals else []
    model = build_classifier(
        mc.base, mc.n_layers, names, mc.dtype, mc.signal_transform, mc.pooling
    ).eval()
    featuriser = Featuriser.from_tokenizer_file(base_dir, cfg.featurise)
    pad_id = int(getattr(model.backbone.config, "pad_token_id", None) or 0)
    root = Path(tc.cache_dir) if tc.cache_dir else cache_dir()
    cache = FeatureCache(
        root / "features",
        backbone_key(mc.base, mc.n_layers),
        feature_key(cfg.featurise, mc.pooling),
    )
    stats = PassStats()
    if world > 1:  # torchrun / accelerate launch: each process encodes a share into the cache
        all_runs = [r for rs in use.values() for r in rs]
        shard_features(
            model,
            featuriser,
            all_runs,
            cache=cache,
            rank=rank,
            world=world,
            batch_tokens=tc.batch_tokens,
            pad_id=pad_id,
            progress=tc.progress and rank == 0,
        )
    feats = {
        n: extract_features(
            model,
            featuriser,
            rs,
            cache=cache,
            batch_tokens=tc.batch_tokens,
            chunk_runs=tc.chunk_runs,
            pad_id=pad_id,
            progress=tc.progress,
            stats=stats,
        )
        for n, rs in use.items()
    }
    sig = {
        n: [signal_matrix(r)[:, : len(names)] if names else np.zeros((len(r.steps), 0)) for r in rs]
        for n, rs in use.items()
    }
    times["features"] = time.perf_counter() - t

    # -- probe (C picked on validation by mean per-agent AUROC)
    t = time.perf_counter()
    sched = {"min_steps": cfg.policy.min_steps, "every": cfg.policy.every}
    ex = probe_examples(cfg, train_runs)
    x_h = _rows([f.hidden for f in feats["train"]], ex.run, ex.step)
    x_s = _rows(sig["train"], ex.run, ex.step)
    agents = [train_runs[i].agent for i in ex.run]
    probe, selection = _select_probe(
        model, cfg, x_h, x_s, ex, agents, feats["val"], sig["val"], use["val"]
    )
    times["probe"] = time.perf_counter() - t

    # -- optional fine-tuning (LoRA / full), head warm-started from the probe
    losses: list[float] = []
    if mc.head != "probe":
        t = time.perf_counter()
        ex_w = window_examples(featuriser, train_runs, sig["train"], ex)
        losses = tune_backbone(model, ex_w, tc, head=mc.head, out_dir=out / "checkpoints")
        model = model.float().cpu().eval()
        for n in EVAL_SPLITS:  # features changed: one more pass, not cached
            feats[n] = extract_features(
                model,
                featuriser,
                use[n],
                cache=None,
                batch_tokens=tc.batch_tokens,
                pad_id=pad_id,
                progress=tc.progress,
            )
        times["finetune"] = time.perf_counter() - t

    if rank != 0:  # data-parallel fine-tuning is done; the main process writes the outputs
        return {}

    # -- baselines on the same splits
    t = time.perf_counter()
    base_models: dict[str, Any] = {}
    if tc.baselines:
        all_sig = [signal_matrix(r) for r in train_runs]
        base_models["signals_lr"] = bl.fit_signals_lr(
            _rows(all_sig, ex.run, ex.step), ex.label, ex.weight, C=tc.signals_C
        )
        tf_ex = prefix_examples(
            train_runs,
            **sched,
            weights=run_weights(train_runs, balance=tc.balance),
            max_per_run=tc.tfidf_max_prefixes_per_run,
        )
        steps = [tf_ex.step[tf_ex.run == i] for i in range(len(train_runs))]
        w = [tf_ex.weight[tf_ex.run == i] for i in range(len(train_runs))]
        base_models["tfidf_lr"] = bl.fit_tfidf_lr(
            featuriser,
            train_runs,
            steps,
            [label_of(r) for r in train_runs],
            w,
            max_features=tc.tfidf_max_features,
            C=tc.tfidf_C,
        )
        for name, pipe in base_models.items():
            bl.save_baseline(pipe, out / "baselines" / f"{name}.joblib")
    times["baselines"] = time.perf_counter() - t

    # -- records and metrics
    t = time.perf_counter()
    records: dict[str, list[RunRecord]] = {}
    for n in EVAL_SPLITS:
        scores: dict[str, list[np.ndarray]] = {"monitor": _score_split(model, feats[n], sig[n])}
        if "signals_lr" in base_models:
            scores["signals_lr"] = [
                bl.signals_run_scores(base_models["signals_lr"], signal_matrix(r)) for r in use[n]
            ]
        if "tfidf_lr" in base_models:
            scores["tfidf_lr"] = [
                bl.tfidf_run_scores(base_models["tfidf_lr"], featuriser, r) for r in use[n]
            ]
        records[n] = _records(use[n], scores, [f.encoded_tokens for f in feats[n]])
        save_records(out / "records" / f"{n}.parquet", records[n])
    scorers = ["monitor", *base_models]
    model_dir = save_classifier(
        model,
        out / "model",
        tokenizer_dir=base_dir,
        base=mc.base,
        head_kind=mc.head,
        featuriser=cfg.featurise.model_dump(),
        extra={
            "probe": {
                "C": probe.C,
                "hidden_scale": probe.hidden_scale,
                "agent_offsets": probe.agent_offsets,
                "selection": selection,
            }
        },
    )
    times["records"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t_start
    metrics = {
        "split": "val",
        "definition": "AUROC, positive = unresolved; 0.25/0.5/0.75: score at k=ceil(f*n); "
        "overall: every prefix, each run weight 1",
        **auroc_report(records["val"], scorers=scorers),
        "feature_pass": {
            "runs_encoded": stats.runs,
            "runs_cached": stats.cached_runs,
            "tokens": stats.tokens,
            "seconds": round(stats.seconds, 2),
            "tokens_per_s": round(stats.tokens_per_s, 1),
        },
        "train_examples": len(ex),
        "finetune_losses": losses,
        "seconds": {k: round(v, 2) for k, v in times.items()},
    }
    summary["prefix_examples"] = len(ex)
    (out / "data_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    if tc.bundle:
        calib = records["val"]
        if cfg.thresholds.calibration == "val+train-oof":
            t = time.perf_counter()
            calib = calib + _train_oof_records(
                cfg, model, probe, use["train"], feats["train"], sig["train"], ex, x_h, x_s
            )
            save_records(out / "records" / "train_oof.parquet", calib[len(records["val"]) :])
            log.info("cross-fitted training scores in %.1f s", time.perf_counter() - t)
        _after(cfg, out, model_dir, calib)
    return metrics


def _train_oof_records(
    cfg: PipelineConfig,
    model: PrefixClassifier,
    probe: Any,
    runs: list[Trajectory],
    feats: list[Any],
    sig: list[np.ndarray],
    ex: Any,
    x_h: np.ndarray,
    x_s: np.ndarray,
) -> list[RunRecord]:
    """The training runs as calibration records, scored out of fold (training.crossfit), from
    the probe's own training rows `x_h` / `x_s` of examples `ex`."""
    from training.crossfit import out_of_fold_scores

    scores = out_of_fold_scores(
        model,
        runs,
        [f.hidden for f in feats],
        sig,
        ex.run,
        x_h,
        x_s,
        ex.label,
        ex.weight,
        C=probe.C,
        hidden_scale=probe.hidden_scale,
        agent_columns=cfg.model.agent_columns,
        folds=cfg.thresholds.crossfit_folds,
        seed=cfg.train.seed,
    )
    return _records(runs, {"monitor": scores}, [f.encoded_tokens for f in feats])


def _select_probe(
    model: PrefixClassifier,
    cfg: PipelineConfig,
    x_h: np.ndarray,
    x_s: np.ndarray,
    ex: Any,
    agents: list[str],
    val_feats: Sequence[Any],
    val_sig: Sequence[np.ndarray],
    val_runs: Sequence[Trajectory],
) -> tuple[Any, dict[str, Any]]:
    """Fit the probe for every (C, hidden_scale) and keep the best on validation.

    The criterion is the mean over agents of the AUROC at 25/50/75 % of the run and overall,
    so early discrimination counts as much as late.
    """
    tc = cfg.train

    def criterion() -> tuple[float, Any]:
        recs = _records(val_runs, {"monitor": _score_split(model, val_feats, val_sig)})
        mean = auroc_report(recs, scorers=["monitor"])["mean_per_agent"]["monitor"]
        vals = [v for v in mean.values() if v is not None]
        return (float(np.mean(vals)) if vals else 0.0), mean

    fit, selection, _ = select_probe(
        model,
        x_h,
        x_s,
        ex.label,
        ex.weight,
        agents,
        pairs=[(c, scale) for scale in tc.probe_hidden_scale for c in tc.probe_C],
        agent_columns=cfg.model.agent_columns,
        val_criterion=criterion,
    )
    return fit, selection


def _records(
    runs: Sequence[Trajectory],
    scores: dict[str, list[np.ndarray]],
    encoded: Sequence[int] | None = None,
) -> list[RunRecord]:
    return records_from_runs(runs, scores, encoded)


def _after(cfg: PipelineConfig, out: Path, model_dir: Path, val: list[RunRecord]) -> None:
    """thresholds.json and the bundle, when those modules exist."""
    try:
        from training.thresholds import ThresholdPicker
    except ImportError:
        log.warning("training.thresholds not available: no thresholds.json written")
        return
    picker = ThresholdPicker(
        cfg.thresholds,
        min_steps=cfg.policy.min_steps,
        every=cfg.policy.every,
        persist=cfg.policy.persist,
    )
    from training.crossfit import calibration_summary

    th = picker.fit(val).thresholds_
    th["calibration"] = calibration_summary(
        val, cfg.thresholds.calibration, group_by=cfg.thresholds.group_by
    )
    (out / "thresholds.json").write_text(json.dumps(th, indent=1) + "\n")
    try:
        from training.export import write_bundle
    except ImportError:
        log.warning("training.export not available: no bundle written")
        return
    write_bundle(model_dir, out / "bundle", cfg=cfg.export, train_dir=out)


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
