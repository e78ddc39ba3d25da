"""The pipeline's stages after encoding, each a function of the config: split, fit the head,
fine-tune, fit the baselines, score records, calibrate, save, export.

`failfast train` (training.pipeline.train) runs them in order; `failfast demo` runs that, and the
experiments (training.experiments) run the same stages on their own variants.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.thresholds import ThresholdTable
from monitor.types import Trajectory
from serving.choice import MONITOR_TEXT
from training.config import PipelineConfig
from training.data.examples import PrefixSet, probe_examples, window_examples
from training.data.records import RunRecord, records_from_runs
from training.data.runs import Labelled, labelled_runs, stratified_subsample
from training.data.splits import Splits, make_splits
from training.evaluate.auroc import auroc_report
from training.model.classifier import PrefixClassifier
from training.model.probe import ProbeFit, ProbeRows, head_scores, select_probe
from training.pipeline.encode import Encoded, Encoder, encode
from training.pipeline.text_probe import (
    TextProbeFit,
    add_text_columns,
    fit_text_probe,
    probe_rows,
    text_oof_scores,
)

log = logging.getLogger(__name__)

EVAL_SPLITS = ("val", "test")


@dataclass
class SplitRuns:
    """The labelled runs of each split, as training uses them.

    Attributes:
        labelled: the runs kept (a verdict and steps) and the counts of those dropped.
        splits: instance ids per split.
        train_all: every run of the training split.
        use: "train" (the config's stratified subsample of train_all), "val", "test" -> runs.
    """

    labelled: Labelled
    splits: Splits
    train_all: list[Trajectory]
    use: dict[str, list[Trajectory]]


def split(cfg: PipelineConfig, runs: Sequence[Trajectory]) -> SplitRuns:
    """Keep the labelled runs, split them by instance and subsample the training split."""
    lab = labelled_runs(runs)
    if not lab.runs:
        raise ValueError("no labelled runs with steps")
    splits = make_splits(lab.runs, fractions=cfg.data.split_fractions, seed=cfg.data.split_seed)
    train_all = splits.select(lab.runs, "train")
    train = stratified_subsample(
        train_all, cfg.data.train_max_runs or 0, seed=cfg.data.subsample_seed
    )
    use = {"train": train, **{n: splits.select(lab.runs, n) for n in EVAL_SPLITS}}
    return SplitRuns(lab, splits, train_all, use)


def score(model: PrefixClassifier, data: Encoded) -> list[np.ndarray]:
    """The model head's score after every step of every run of `data`."""
    return [
        head_scores(model, h, s, r)
        for h, s, r in zip(data.hidden, data.signals, data.runs, strict=True)
    ]


def records(data: Encoded, scores: Mapping[str, Sequence[np.ndarray]]) -> list[RunRecord]:
    """RunRecords of the runs of `data` with these scores (scorer name -> one array per run)."""
    return records_from_runs(data.runs, dict(scores), data.encoded_tokens)


def monitor_records(model: PrefixClassifier, data: Encoded) -> list[RunRecord]:
    """Records of `data` with the model head's scores (scorer "monitor")."""
    return records(data, {"monitor": score(model, data)})


def probe_criterion(model: PrefixClassifier, val: Encoded) -> tuple[float, dict[str, Any]]:
    """How good the head just fitted is on validation runs: the mean over agents of the AUROC at
    25/50/75 % of the run and overall, so early discrimination counts as much as late. Returns
    (criterion, the four per-agent means)."""
    recs = monitor_records(model, val)
    mean = auroc_report(recs, scorers=["monitor"])["mean_per_agent"]["monitor"]
    vals = [v for v in mean.values() if v is not None]
    return (float(np.mean(vals)) if vals else 0.0), mean


@dataclass
class HeadFit:
    """The probe kept by `fit_head`, how it was picked, and the rows it was fitted on.

    Attributes:
        probe: the kept fit (already in the model's head).
        selection: every (C, hidden scale) tried -> criterion, per-agent AUROC, training loss.
        criterion: the kept pair's validation criterion (None without validation runs).
        examples: the training prefixes; rows: what the probe was fitted on, one per prefix.
        text: the second probe (train.text_candidate), None without one.
    """

    probe: ProbeFit
    selection: dict[str, dict[str, Any]]
    criterion: float | None
    examples: PrefixSet
    rows: ProbeRows
    text: TextProbeFit | None = None

    def summary(self) -> dict[str, Any]:
        """What the experiments report of a fit."""
        return {
            "C": self.probe.C,
            "hidden_scale": self.probe.hidden_scale,
            "criterion": self.criterion,
            "examples": len(self.examples),
        }


def fit_head(
    cfg: PipelineConfig,
    model: PrefixClassifier,
    train: Encoded,
    val: Encoded | None = None,
    *,
    grid: Sequence[tuple[float, float]] | None = None,
    text_probe: bool = False,
) -> HeadFit:
    """Fit the probe of `model` (in place) on the training runs' checked prefixes, for every
    (C, hidden scale) of `grid` (default: the config's probe_C x probe_hidden_scale), and keep the
    pair with the best `probe_criterion` on `val` (without validation runs the grid must hold one
    pair). With `text_probe` and train.text_candidate, then fit the second probe at the kept
    pair (training.pipeline.text_probe); otherwise the model is left without one (a stale
    second probe would score records its calibration never saw)."""
    tc = cfg.train
    ex = probe_examples(cfg, train.runs)
    rows = probe_rows(train, ex)
    if tc.probe_text is not None:
        add_text_columns(cfg, train, ex, rows, tc.probe_text)
    pairs = list(grid or [(c, s) for s in tc.probe_hidden_scale for c in tc.probe_C])
    fit, selection, crit = select_probe(
        model,
        rows,
        pairs=pairs,
        agent_columns=cfg.model.agent_columns,
        val_criterion=(lambda: probe_criterion(model, val)) if val is not None else None,
        max_focus=tc.probe_max_focus,
        rank_weight=tc.probe_rank_weight,
    )
    head = HeadFit(fit, selection, crit, ex, rows)
    model.text_probe = None
    if tc.text_candidate is not None and text_probe:
        head.text = fit_text_probe(cfg, model, train, fit)
    return head


def fine_tune(
    encoder: Encoder, train: Encoded, head: HeadFit, *, kind: str, out_dir: str | Path
) -> tuple[list[float], int]:
    """Fine-tune the encoder's model from the probe's head ("lora" or "full", the config's train.*
    settings) on the windows holding the probe's examples; the tuned model is left in eval mode,
    fp32 on the CPU. Returns (the logged losses, the number of training windows)."""
    from training.model.finetune import tune_backbone

    windows = window_examples(encoder.featuriser, train.runs, train.signals, head.examples)
    losses = tune_backbone(encoder.model, windows, encoder.cfg.train, head=kind, out_dir=out_dir)
    encoder.model = encoder.model.float().cpu().eval()
    return losses, len(windows)


def reencode(encoder: Encoder, data: dict[str, Encoded]) -> dict[str, Encoded]:
    """Encode the same runs again with a tuned backbone (never cached)."""
    return {n: encode(encoder, d.runs, cached=False) for n, d in data.items()}


def fit_baselines(cfg: PipelineConfig, encoder: Encoder, train: Encoded, head: HeadFit) -> dict:
    """The learned baselines (train.baselines) on the probe's training runs and examples."""
    if not cfg.train.baselines:
        return {}
    from training.baselines.learned import fit_baselines as fit

    return fit(encoder.featuriser, train.runs, head.examples, cfg.train, schedule=cfg.policy)


def score_records(encoder: Encoder, data: Encoded, baselines: Mapping[str, Any]) -> list[RunRecord]:
    """Records of `data` scored by the encoder's model ("monitor") and every learned baseline."""
    from training.baselines.learned import baseline_run_scores

    scores: dict[str, list[np.ndarray]] = {"monitor": score(encoder.model, data)}
    if encoder.model.text_probe is not None:
        scores[MONITOR_TEXT] = [
            head_scores(encoder.model, h, s, r, second=True)
            for h, s, r in zip(data.hidden, data.signals, data.runs, strict=True)
        ]
    per_run = [baseline_run_scores(baselines, encoder.featuriser, r) for r in data.runs]
    for name in baselines:
        scores[name] = [p[name] for p in per_run]
    return records(data, scores)


def train_oof_records(
    cfg: PipelineConfig,
    model: PrefixClassifier,
    train: Encoded,
    head: HeadFit,
    encoder_featuriser: Any = None,
) -> list[RunRecord]:
    """The training runs as calibration records, scored out of fold (training.model.crossfit)
    by probes refitted with the kept (C, hidden scale) on the head's own rows, and (given the
    featuriser) by the learned baselines refitted the same way (`train_oof_baselines`)."""
    from training.model.crossfit import out_of_fold_scores

    ex = head.examples
    scores = out_of_fold_scores(
        model,
        train.runs,
        train.hidden,
        train.signals,
        ex.run,
        head.rows,
        C=head.probe.C,
        hidden_scale=head.probe.hidden_scale,
        max_focus=head.probe.max_focus,
        rank_weight=head.probe.rank_weight,
        agent_columns=cfg.model.agent_columns,
        folds=cfg.thresholds.crossfit_folds,
        seed=cfg.train.seed,
    )
    out: dict[str, Any] = {"monitor": scores}
    if head.text is not None:
        out[MONITOR_TEXT] = text_oof_scores(cfg, train, head.text, head.probe)
    baselines = train_oof_baselines(cfg, encoder_featuriser, train) if encoder_featuriser else {}
    return records(train, {**out, **baselines})


def train_oof_baselines(cfg: PipelineConfig, featuriser: Any, train: Encoded) -> dict:
    """The learned baselines' scores of the training runs, out of fold: per instance fold (the
    probe's folds and seed), the baselines fitted on the other folds' runs score this fold's.
    Returns name -> one array per run ({} without train.baselines). The candidates then calibrate
    on the same val + out-of-fold runs as the monitor (roughly 6.75 s per fit on the main job)."""
    if not cfg.train.baselines:
        return {}
    from training.baselines.learned import baseline_run_scores
    from training.baselines.learned import fit_baselines as fit
    from training.data.folds import instance_folds

    folds = cfg.thresholds.crossfit_folds
    fold = instance_folds(train.runs, folds, seed=cfg.train.seed)
    out: dict[str, list[np.ndarray | None]] = {}
    for f in range(folds):
        fit_runs = [r for r, g in zip(train.runs, fold, strict=True) if g != f]
        pipes = fit(
            featuriser, fit_runs, probe_examples(cfg, fit_runs), cfg.train, schedule=cfg.policy
        )
        for i in np.flatnonzero(fold == f).tolist():
            for name, s in baseline_run_scores(pipes, featuriser, train.runs[i]).items():
                out.setdefault(name, [None] * len(train.runs))[i] = s
        log.info("baselines out of fold %d/%d", f + 1, folds)
    return {n: [s if s is not None else np.zeros(0) for s in v] for n, v in out.items()}


def calibrate(cfg: PipelineConfig, calibration: Sequence[RunRecord]) -> ThresholdTable:
    """Stop and warn thresholds picked on calibration records under the config's schedule."""
    from training.calibrate.thresholds import ThresholdPicker

    return ThresholdPicker(cfg.thresholds, schedule=cfg.policy).fit(calibration).thresholds_


def save_model(cfg: PipelineConfig, encoder: Encoder, head: HeadFit, out: Path) -> Path:
    """OUT/model: the classifier with its tokenizer, and how its probe was picked."""
    from training.model.classifier_files import save_classifier

    probe = head.probe
    return save_classifier(
        encoder.model,
        out / "model",
        tokenizer_dir=encoder.base_dir,
        base=cfg.model.base,
        head_kind=cfg.model.head,
        featuriser=cfg.featurise.model_dump(),
        extra={
            "probe": {
                "C": probe.C,
                "hidden_scale": probe.hidden_scale,
                "max_focus": probe.max_focus,
                "rank_weight": probe.rank_weight,
                "agent_offsets": probe.agent_offsets,
                "selection": head.selection,
            }
        },
    )


def export(cfg: PipelineConfig, out: Path) -> None:
    """OUT/bundle from OUT/model and the training outputs beside it (docs/BUNDLE.md)."""
    from training.export.bundle import write_bundle

    write_bundle(out / "model", out / "bundle", cfg=cfg.export, train_dir=out)
