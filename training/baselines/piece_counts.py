"""Term counts of each run's TF-IDF pieces, rendered and tokenised once per job.

A job fits the TF-IDF baseline many times on overlapping runs (five out-of-fold fits and the final
one in `failfast train`, more in `failfast crossfit`) and scores every run after each fit. Each
fit and each scoring used to render the run's pieces (monitor.render: regex cleaning) and
tokenise them again: about a third of the main job's training time outside the feature pass.
Here a run's pieces are rendered and counted once, in one vocabulary of every term seen so far;
a fit then takes its vocabulary from those counts and scoring maps them onto it.

What a fit gets is exactly what `CountVectorizer.fit` on the same pieces gives (the same
`vocabulary_`, built the way scikit-learn builds it: terms sorted, the `max_features` most
frequent kept by the same argsort), so pipelines, their pickles and the served TF-IDF candidate
are unchanged (tests/training/test_piece_counts.py).

Entries are kept per run object (training.data.run_memo: a run that is freed leaves the cache) and
per what is counted (the piece text, the n-gram range, the token pattern).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

from monitor.types import Trajectory
from serving.candidate_run import run_pieces
from serving.candidates import PieceText
from training.data.run_memo import RunMemo


class _Vocab:
    """Every term seen under one counting key, with the counts of each run's pieces."""

    def __init__(self, analyzer: Callable[[str], list[str]]) -> None:
        self.analyzer = analyzer
        self.index: dict[str, int] = {}
        self.terms: list[str] = []
        self.runs: RunMemo[sp.csr_matrix] = RunMemo()

    def count(self, pieces: Sequence[str]) -> sp.csr_matrix:
        """(len(pieces), terms so far) counts of each piece (float64, like CountVectorizer).
        Terms added later lie beyond the matrix's columns; only its entries are read."""
        indices: list[int] = []
        indptr = [0]
        data: list[float] = []
        for piece in pieces:
            counter: dict[int, int] = {}
            for term in self.analyzer(piece):
                j = self.index.get(term)
                if j is None:
                    j = self.index[term] = len(self.terms)
                    self.terms.append(term)
                counter[j] = counter.get(j, 0) + 1
            cols = sorted(counter)
            indices.extend(cols)
            data.extend(float(counter[c]) for c in cols)
            indptr.append(len(indices))
        return sp.csr_matrix(
            (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), indptr),
            shape=(len(pieces), len(self.terms)),
        )


class PieceCounts:
    """Per run, the term counts of its header and step pieces, computed once.

    Args are those of `training.baselines.learned.fit_tfidf_lr`'s CountVectorizer.
    """

    def __init__(self) -> None:
        self._vocabs: dict[tuple, _Vocab] = {}
        # per vectorizer this cache fitted: global term id -> its column (-1: not in it)
        self._maps: weakref.WeakKeyDictionary[CountVectorizer, np.ndarray] = (
            weakref.WeakKeyDictionary()
        )

    def _vocab(self, featuriser: Any, text: PieceText | None, vec: CountVectorizer) -> _Vocab:
        what = repr(text) if text is not None else repr(getattr(featuriser, "config", featuriser))
        key = (what, vec.ngram_range, vec.token_pattern, vec.lowercase)
        if key not in self._vocabs:
            self._vocabs[key] = _Vocab(vec.build_analyzer())
        return self._vocabs[key]

    def run_counts(
        self, featuriser: Any, traj: Trajectory, text: PieceText | None, vec: CountVectorizer
    ) -> tuple[_Vocab, sp.csr_matrix]:
        """The run's (n_steps + 1, terms then) piece counts under `vec`'s analyzer."""
        vocab = self._vocab(featuriser, text, vec)
        return vocab, vocab.runs.get(traj, lambda r: vocab.count(run_pieces(featuriser, r, text)))

    def fit(
        self,
        vec: CountVectorizer,
        featuriser: Any,
        runs: Sequence[Trajectory],
        text: PieceText | None,
    ) -> CountVectorizer:
        """Fit `vec` (max_features or none; default min_df / max_df) as `vec.fit` on every piece
        of `runs` would, from the cached counts."""
        if vec.min_df != 1 or vec.max_df != 1.0 or vec.vocabulary is not None or vec.binary:
            raise ValueError("PieceCounts.fit supports only the default min_df, max_df, binary")
        counts = [self.run_counts(featuriser, r, text, vec)[1] for r in runs]
        vocab = self._vocab(featuriser, text, vec)
        tf = np.zeros(len(vocab.terms), dtype=np.float64)
        for m in counts:
            np.add.at(tf, m.indices, m.data)
        present = np.flatnonzero(tf)
        if len(present) == 0:
            raise ValueError("empty vocabulary; perhaps the documents only contain stop words")
        order = present[np.argsort(np.asarray(vocab.terms, dtype=object)[present], kind="stable")]
        vec._validate_ngram_range()  # what CountVectorizer.fit checks and sets besides
        vec._warn_for_unused_params()
        vec._validate_vocabulary()  # fixed_vocabulary_ = False
        vec.build_analyzer()  # _stop_words_id
        if vec.max_features is None:  # sorted after limiting: plain ints, as scikit-learn has
            kept = order
            vec.vocabulary_ = {vocab.terms[g]: i for i, g in enumerate(order)}
        else:
            keep = np.ones(len(order), dtype=bool)
            if len(order) > vec.max_features:
                # scikit-learn's _limit_features on the sorted vocabulary, the same argsort
                keep[:] = False
                keep[(-tf[order]).argsort()[: vec.max_features]] = True
            kept = order[keep]
            new_indices = np.cumsum(keep) - 1
            vec.vocabulary_ = {
                vocab.terms[g]: new_indices[i] for i, g in enumerate(order) if keep[i]
            }
        gmap = np.full(len(vocab.terms), -1, dtype=np.int64)
        gmap[kept] = np.arange(len(kept))
        self._maps[vec] = gmap
        return vec

    def transform(
        self, vec: CountVectorizer, featuriser: Any, traj: Trajectory, text: PieceText | None
    ) -> sp.csr_matrix:
        """`vec.transform(run_pieces(featuriser, traj, text))`, from the cached counts."""
        gmap = self._maps.get(vec)
        if gmap is None:  # a vectorizer this cache did not fit (read from disk): count afresh
            return vec.transform(run_pieces(featuriser, traj, text))
        _, m = self.run_counts(featuriser, traj, text, vec)
        # terms first seen after the fit (ids past the map) are not in its vocabulary
        inside = m.indices < len(gmap)
        cols = np.full(len(m.indices), -1, dtype=np.int64)
        cols[inside] = gmap[m.indices[inside]]
        ok = cols >= 0
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))[ok]
        out = sp.csr_matrix(
            (m.data[ok], (rows, cols[ok])), shape=(m.shape[0], len(vec.vocabulary_))
        )
        out.sort_indices()
        return out


def prefix_counts(counts: sp.csr_matrix, last: int | None = None) -> sp.csr_matrix:
    """(n_steps, V) term counts of prefixes 1..n (header included in every row) from the
    (n + 1, V) counts of the header and each step piece; with `last`, of only the last `last`
    step pieces of each prefix (no header: the recency block of
    training.experiments.tfidf_variants)."""
    cols = np.unique(counts.indices)
    raw = counts[:, cols].toarray()
    if last is None:
        dense = np.cumsum(raw, axis=0)[1:]  # (n, |cols|)
    else:
        if last < 1:
            raise ValueError(f"prefix_counts: last must be >= 1 (got {last})")
        steps = np.cumsum(raw[1:], axis=0)
        dense = steps.copy()
        dense[last:] -= steps[:-last]
    r, c = np.nonzero(dense)
    return sp.csr_matrix((dense[r, c], (r, cols[c])), shape=(dense.shape[0], counts.shape[1]))


PIECES = PieceCounts()
"""The process's cache (training.baselines.learned reads and fills it)."""
