"""The probe's text columns (`train.probe_text`): each prefix's TF-IDF beside the hidden state and
the signals, one logistic regression over all of them (training.model.probe.fit_probe).

Cross-fitted on ../shared/data, reading the TF-IDF text's terms in the same regression as the
frozen LM's features ranks live runs better than the LM probe or TF-IDF alone, and better than
the stack over their separately fitted scores (docs/RESULTS.md, "Issue 26, eighteenth round").

- `TextColumns.fit`: the vocabulary (the `tfidf_max_features` most frequent terms of the
  training runs' pieces) and the sublinear TF-IDF weights of the training prefixes (no labels),
  with those prefixes' rows (times `scale`: what the probe's regression reads); `run_matrix`
  gives a run's (n_steps, V) rows.
- `TextHead`: the part of the probe's logit the text contributes (a weight per term, no
  intercept: the head's bias holds it), scored from the job's cached piece counts
  (training.baselines.piece_counts); `to_json` is the torch-free form the bundle serves
  (serving.candidates.TfidfLR with intercept 0: monitor_text.json, added to the ONNX head's logit
  by serving.scorer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer

from monitor.types import Trajectory
from serving.candidates import TOKEN_PATTERN, PieceText, TfidfLR
from training.baselines.piece_counts import PIECES, prefix_counts
from training.data.examples import PrefixSet


@dataclass
class TextColumns:
    """The probe's text columns for one fit (see the module docstring).

    Attributes:
        vec: the vocabulary (fitted through PIECES, as the TF-IDF baseline's).
        tfidf: sublinear TF-IDF weights fitted on the training prefixes' counts.
        text: the pieces counted.
        scale: the columns' multiplier in the probe's regression.
    """

    vec: CountVectorizer
    tfidf: TfidfTransformer
    text: PieceText
    scale: float

    @classmethod
    def fit(
        cls,
        runs: Sequence[Trajectory],
        examples: PrefixSet,
        *,
        text: PieceText,
        scale: float,
        max_features: int,
    ) -> tuple[TextColumns, sp.csr_matrix]:
        """Vocabulary and TF-IDF weights from the training runs and their example prefixes, and
        those examples' rows times `scale` (their prefixes counted once for both)."""
        vec = CountVectorizer(
            max_features=max_features, token_pattern=TOKEN_PATTERN, dtype=np.float64
        )
        PIECES.fit(vec, None, runs, text)
        cols = cls(vec, TfidfTransformer(sublinear_tf=True), text, scale)
        counts = cols._counts(runs, examples)
        return cols, (cols.tfidf.fit_transform(counts) * scale).tocsr()

    def _run_counts(self, run: Trajectory) -> sp.csr_matrix:
        return prefix_counts(PIECES.transform(self.vec, None, run, self.text))

    def _counts(self, runs: Sequence[Trajectory], examples: PrefixSet) -> sp.csr_matrix:
        """Term counts of each example prefix, in the examples' order."""
        if not len(examples):
            return sp.csr_matrix((0, len(self.vec.vocabulary_)))
        blocks, where = [], []
        for i in np.unique(examples.run).tolist():
            at = np.flatnonzero(examples.run == i)
            blocks.append(self._run_counts(runs[i])[examples.step[at] - 1])
            where.append(at)
        return sp.vstack(blocks).tocsr()[np.argsort(np.concatenate(where), kind="stable")]

    def run_matrix(self, run: Trajectory) -> sp.csr_matrix:
        """(n_steps, V) TF-IDF rows of the run's prefixes 1..n (unscaled)."""
        return self.tfidf.transform(self._run_counts(run)).tocsr()

    def head(self, coef: np.ndarray | None = None) -> TextHead:
        """A TextHead over these columns (`coef`: weights of the scaled columns; none: zeros)."""
        c = np.zeros(len(self.vec.vocabulary_)) if coef is None else np.asarray(coef)
        return TextHead(self, c * self.scale)


@dataclass
class TextHead:
    """The text's part of the probe's logit: `run_matrix(run) @ coef` (coef per unscaled
    TF-IDF column)."""

    columns: TextColumns
    coef: np.ndarray

    def run_logits(self, run: Trajectory) -> np.ndarray:
        """The text's logit after each step of `run`."""
        if not run.steps:
            return np.zeros(0)
        return np.asarray(self.columns.run_matrix(run) @ self.coef, dtype=np.float64)

    def with_coef(self, coef: np.ndarray) -> TextHead:
        """The same columns with the weights `coef` of their scaled form (what fit_probe fits)."""
        return self.columns.head(coef)

    def to_json(self) -> dict[str, Any]:
        """serving.candidates.TfidfLR's JSON with intercept 0 (monitor_text.json)."""
        vocab = {str(t): int(j) for t, j in self.columns.vec.vocabulary_.items()}
        return TfidfLR(
            vocab,
            np.asarray(self.columns.tfidf.idf_, dtype=np.float64),
            np.asarray(self.coef, dtype=np.float64),
            0.0,
            TOKEN_PATTERN,
            self.columns.text,
        ).to_json()
