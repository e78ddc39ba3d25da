"""Learned baselines on the same splits as the monitor (scikit-learn, saved with joblib).

- `signals_lr`: logistic regression on the loop signals (monitor.signals.signal_matrix rows),
  after arcsinh (a signed log, so large counts do not dominate) and standardisation.
- `tfidf_lr`: TF-IDF + logistic regression on the rendered prefix text: the renderer's header and
  step pieces with the baseline's own cuts (`train.tfidf_text`, serving.candidates.PieceText;
  null: the featuriser's pieces), without the window limit. The fitted pipeline carries its
  PieceText as `piece_text`, so scoring and export count the same text.

Both pipelines take their natural input (`predict_proba(signal rows)`, `predict_proba([text])`).
To score every prefix of a run cheaply, `tfidf_run_scores` adds up per-piece term counts instead
of re-vectorising each prefix; pieces start and end with a newline, so no token spans two pieces
and the result equals the pipeline applied to each prefix text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import joblib
import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from monitor.featurise import Featuriser
from monitor.schedule import Schedule
from monitor.types import Trajectory
from serving.candidates import TOKEN_PATTERN, PieceText
from training.baselines.piece_counts import PIECES, prefix_counts
from training.config import TrainConfig
from training.data.examples import (
    PrefixSet,
    even_weights,
    prefix_examples,
    run_weights,
    savings_weights,
)
from training.data.run_signals import run_signals
from training.data.runs import label_of

log = logging.getLogger(__name__)


def signals_pipeline(C: float = 1.0) -> Pipeline:
    """arcsinh -> StandardScaler -> LogisticRegression."""
    return Pipeline(
        [
            ("asinh", FunctionTransformer(np.arcsinh)),
            ("scale", StandardScaler()),
            ("lr", LogisticRegression(C=C, max_iter=1000)),
        ]
    )


def fit_signals_lr(x: np.ndarray, y: np.ndarray, w: np.ndarray, *, C: float = 1.0) -> Pipeline:
    """Fit the signals baseline on signal rows `x` (N, S), labels and example weights."""
    pipe = signals_pipeline(C)
    pipe.fit(x, y, lr__sample_weight=np.asarray(w) * len(w) / np.sum(w))
    return pipe


def tfidf_vectorizer(max_features: int, ngram_max: int = 1) -> CountVectorizer:
    """The TF-IDF baseline's (unfitted) term counter: the served token pattern, words up to
    `ngram_max`-grams, the `max_features` most frequent terms."""
    return CountVectorizer(
        max_features=max_features,
        token_pattern=TOKEN_PATTERN,
        ngram_range=(1, ngram_max),
        dtype=np.float64,
    )


def tfidf_examples(runs: Sequence[Trajectory], tc: TrainConfig, schedule: Schedule) -> PrefixSet:
    """The TF-IDF baseline's training prefixes: at most `tc.tfidf_max_prefixes_per_run` checked
    prefixes per run (bounds its memory), with the probe's run weighting and savings weights."""
    tf = prefix_examples(
        runs,
        schedule=schedule,
        weights=run_weights(runs, balance=tc.balance),
        max_per_run=tc.tfidf_max_prefixes_per_run,
    )
    return savings_weights(runs, tf, tc.savings_power)


def fit_tfidf_lr(
    featuriser: Featuriser,
    runs: Sequence[Trajectory],
    steps: Sequence[np.ndarray],
    y: Sequence[int],
    w: Sequence[np.ndarray],
    *,
    max_features: int = 20000,
    C: float = 1.0,
    text: PieceText | None = None,
    ngram_max: int = 1,
) -> Pipeline:
    """Fit the TF-IDF baseline.

    Args:
        featuriser: renders the text (its config sets the cuts).
        runs: training runs.
        steps: per run, the prefix lengths k used as examples.
        y: per run, its label (1 = unresolved).
        w: per run, the weight of each of its examples.
        max_features: vocabulary size (terms by corpus frequency, fitted on whole runs).
        C: inverse L2 strength.
        text: the pieces counted (None: the featuriser's); kept on the pipeline as `piece_text`.
        ngram_max: longest word n-gram counted (n-grams never span two pieces: each piece is
            counted on its own and prefixes add up pieces).
    """
    vec = tfidf_vectorizer(max_features, ngram_max)
    # Fitted piece by piece, as prefixes are counted: the same total term counts (hence the same
    # vocabulary) for words, and no n-gram spanning two pieces takes a slot. The pieces' counts
    # are rendered and tokenised once per run and job (training.baselines.piece_counts).
    PIECES.fit(vec, featuriser, runs, text)
    rows, labels, weights = [], [], []
    for r, ks, label, wk in zip(runs, steps, y, w, strict=True):
        if len(ks) == 0:
            continue
        rows.append(prefix_counts(PIECES.transform(vec, featuriser, r, text))[np.asarray(ks) - 1])
        labels.append(np.full(len(ks), label))
        weights.append(np.asarray(wk, dtype=np.float64))
    x = sp.vstack(rows).tocsr()
    tfidf = TfidfTransformer(sublinear_tf=True).fit(x)
    lr = LogisticRegression(C=C, max_iter=1000)
    ww = np.concatenate(weights)
    lr.fit(tfidf.transform(x), np.concatenate(labels), sample_weight=ww * len(ww) / ww.sum())
    pipe = Pipeline([("counts", vec), ("tfidf", tfidf), ("lr", lr)])
    pipe.piece_text = text  # read by tfidf_run_scores and training.export.candidates
    return pipe


def piece_text(tc: TrainConfig) -> PieceText | None:
    """The PieceText of `train.tfidf_text` (None when it is null)."""
    return PieceText(**tc.tfidf_text.model_dump()) if tc.tfidf_text is not None else None


def tfidf_run_scores(pipe: Pipeline, featuriser: Featuriser, traj: Trajectory) -> np.ndarray:
    """P(unresolved | prefix k) for k = 1..n, equal to pipe.predict_proba on each prefix text."""
    vec, tfidf, lr = (pipe.named_steps[n] for n in ("counts", "tfidf", "lr"))
    counts = PIECES.transform(vec, featuriser, traj, getattr(pipe, "piece_text", None))
    x = tfidf.transform(prefix_counts(counts))
    return lr.predict_proba(x)[:, 1]


def signals_run_scores(pipe: Pipeline, signals: np.ndarray) -> np.ndarray:
    """P(unresolved | prefix k) from a run's signal matrix (n, S)."""
    return pipe.predict_proba(signals)[:, 1] if len(signals) else np.zeros(0)


def fit_baselines(
    featuriser: Featuriser,
    runs: Sequence[Trajectory],
    examples: PrefixSet,
    tc: TrainConfig,
    *,
    schedule: Schedule,
) -> dict[str, Pipeline]:
    """Both baselines on the training runs: `signals_lr` on the probe's own examples (rows of
    the full signal matrix; their even spread when the probe's are savings-weighted,
    training.data.examples), `tfidf_lr` on at most `tc.tfidf_max_prefixes_per_run` checked
    prefixes per run (bounds its memory), with the probe's run weighting and savings weights."""
    signals = examples.rows([run_signals(r) for r in runs])
    w = examples.weight if tc.savings_power is None else even_weights(runs, examples, tc.balance)
    pipes = {"signals_lr": fit_signals_lr(signals, examples.label, w, C=tc.signals_C)}
    tf = tfidf_examples(runs, tc, schedule)
    pipes["tfidf_lr"] = fit_tfidf_lr(
        featuriser,
        runs,
        [tf.step[tf.run == i] for i in range(len(runs))],
        [label_of(r) for r in runs],
        [tf.weight[tf.run == i] for i in range(len(runs))],
        max_features=tc.tfidf_max_features,
        C=tc.tfidf_C,
        text=piece_text(tc),
        ngram_max=tc.tfidf_ngram_max,
    )
    return pipes


def baseline_run_scores(
    pipes: Mapping[str, Pipeline], featuriser: Featuriser, traj: Trajectory
) -> dict[str, np.ndarray]:
    """P(unresolved | prefix k) for k = 1..n of every baseline in `pipes` (by name)."""
    out = {}
    if "signals_lr" in pipes:
        out["signals_lr"] = signals_run_scores(pipes["signals_lr"], run_signals(traj))
    if "tfidf_lr" in pipes:
        out["tfidf_lr"] = tfidf_run_scores(pipes["tfidf_lr"], featuriser, traj)
    return out


def save_baselines(pipes: Mapping[str, Pipeline], folder: str | Path) -> None:
    """Each pipeline as folder/NAME.joblib (folder created)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, pipe in pipes.items():
        joblib.dump(pipe, Path(folder) / f"{name}.joblib")


def load_baselines(folder: str | Path) -> dict[str, Pipeline]:
    """The pipelines saved by `save_baselines` (none when the folder is absent); a file that
    cannot be loaded is skipped with a warning naming it (the other baselines still run)."""
    folder = Path(folder)
    out: dict[str, Pipeline] = {}
    for p in sorted(folder.glob("*.joblib")) if folder.is_dir() else []:
        try:
            out[p.stem] = joblib.load(p)
        except Exception as e:  # noqa: BLE001 - any unpickling failure means an unusable file
            log.warning("%s: cannot load this baseline (%s: %s); skipped", p, type(e).__name__, e)
    return out
