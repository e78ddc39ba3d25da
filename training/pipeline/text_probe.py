"""The second probe (`train.text_candidate`, served as the candidate "monitor_text"): the LM
probe's inputs plus each prefix's TF-IDF text, one logistic regression, fitted beside the LM
probe (which stays as it is) and scored out of fold for calibration like it.

Cross-fitted on ../shared/data, this joint probe ranks live runs better than the LM probe but,
replacing it, saved less on new repositories (docs/RESULTS.md, eighteenth round); offered to the
per-group choice beside it, it saved a little more on every view (twenty-first round).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from training.config import PipelineConfig
from training.data.examples import PrefixSet, probe_examples
from training.model.classifier import PrefixClassifier
from training.model.crossfit import out_of_fold_scores
from training.model.probe import ProbeFit, ProbeRows, fit_probe
from training.model.text_probe import fold_text_probe
from training.pipeline.encode import Encoded

log = logging.getLogger(__name__)


@dataclass
class TextProbeFit:
    """The second probe (train.text_candidate) as fitted: a classifier sharing the backbone
    whose head (and text part) `fold_text_probe` copied into the model, its
    training prefixes and rows (what its out-of-fold refits use)."""

    model: PrefixClassifier
    examples: PrefixSet
    rows: ProbeRows


def probe_rows(train: Encoded, ex: PrefixSet) -> ProbeRows:
    """The probe's rows of the example prefixes `ex` of the encoded runs `train`."""
    return ProbeRows(
        ex.rows(train.hidden),
        ex.rows(train.signals),
        ex.label,
        ex.weight,
        [train.runs[i].agent for i in ex.run],
        ex.run,
        ex.step,
    )


def add_text_columns(
    cfg: PipelineConfig, train: Encoded, ex: PrefixSet, rows: ProbeRows, scale: float
) -> None:
    """The TF-IDF text columns (training.baselines.probe_text) of `ex` into `rows`."""
    from training.baselines.learned import piece_text
    from training.baselines.probe_text import TextColumns

    text = piece_text(cfg.train)
    assert text is not None  # the config requires tfidf_text with probe_text / text_candidate
    cols, rows.text = TextColumns.fit(
        train.runs, ex, text=text, scale=scale, max_features=cfg.train.tfidf_max_features
    )
    rows.text_head = cols.head()


def fit_text_probe(
    cfg: PipelineConfig, model: PrefixClassifier, train: Encoded, fit: ProbeFit
) -> TextProbeFit:
    """The second probe (train.text_candidate): the LM probe's inputs plus the TF-IDF text, one
    logistic regression at the LM probe's (C, hidden scale) on `text_candidate_prefixes` checked
    prefixes per run; its head goes into `model.text_probe` (the LM probe is left as it is)."""
    tc = cfg.train
    assert tc.text_candidate is not None
    sub = cfg.model_copy(
        update={"train": tc.model_copy(update={"max_prefixes_per_run": tc.text_candidate_prefixes})}
    )
    ex = probe_examples(sub, train.runs)
    rows = probe_rows(train, ex)
    add_text_columns(cfg, train, ex, rows, tc.text_candidate)
    twin = PrefixClassifier(
        model.backbone, model.signal_names, model.signal_transform, model.pooling
    )
    fit_probe(
        twin,
        rows,
        C=fit.C,
        hidden_scale=fit.hidden_scale,
        agent_columns=cfg.model.agent_columns,
    )
    model.text_probe = fold_text_probe(model, twin)
    log.info("text probe (monitor_text): fitted on %d prefixes", len(ex))
    return TextProbeFit(twin, ex, rows)


def text_oof_scores(
    cfg: PipelineConfig, train: Encoded, text: TextProbeFit, probe: ProbeFit
) -> list[np.ndarray]:
    """The second probe's (train.text_candidate) scores of the training runs, out of fold: the
    LM probe's instance folds and seed, refitted on its own rows at the kept (C, scale)."""
    return out_of_fold_scores(
        text.model,
        train.runs,
        train.hidden,
        train.signals,
        text.examples.run,
        text.rows,
        C=probe.C,
        hidden_scale=probe.hidden_scale,
        agent_columns=cfg.model.agent_columns,
        folds=cfg.thresholds.crossfit_folds,
        seed=cfg.train.seed,
    )
