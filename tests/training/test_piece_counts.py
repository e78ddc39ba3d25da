"""The per-job piece-count cache (training.baselines.piece_counts) fits and counts exactly as
scikit-learn's CountVectorizer on the same pieces: same vocabulary (ties in `max_features`
included), same counts, same fitted attributes, for folds of a vocabulary grown on other runs."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer

from monitor.types import Step, Trajectory
from serving.candidate_run import run_pieces
from serving.candidates import PieceText
from training.baselines.piece_counts import PieceCounts

WORDS = [f"w{i}" for i in range(60)] + ["Django", "pytest", "Traceback", "error", "passed"]
TEXT = PieceText(task_chars=200, action_chars=60, obs_head_chars=40, obs_tail_chars=40,
                 thought_chars=50)  # fmt: skip


def _runs(n: int, seed: int) -> list[Trajectory]:
    rng = random.Random(seed)

    def words(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k))

    return [
        Trajectory(
            id=f"r{seed}-{i}",
            instance_id=f"i{i}",
            agent="a",
            source="s",
            task=words(12),
            steps=[
                Step(index=k, tool="bash", action=words(5), observation=words(9), thought=words(4))
                for k in range(rng.randint(1, 6))
            ],
            resolved=rng.random() < 0.5,
        )
        for i in range(n)
    ]


def _vec(max_features, ngram_max=1) -> CountVectorizer:
    return CountVectorizer(
        max_features=max_features,
        token_pattern=r"(?u)\b\w\w+\b",
        ngram_range=(1, ngram_max),
        dtype=np.float64,
    )


@pytest.mark.parametrize("ngram_max", [1, 2])
@pytest.mark.parametrize("max_features", [None, 7, 25, 10_000])
def test_fit_and_counts_equal_sklearn(featuriser, max_features, ngram_max):
    cache = PieceCounts()
    runs = _runs(30, seed=1)
    # the cache has already counted other runs (a bigger vocabulary) before this fold's fit
    for r in _runs(10, seed=2):
        cache.run_counts(featuriser, r, TEXT, _vec(max_features, ngram_max))
    fold = runs[:20]
    want = _vec(max_features, ngram_max).fit(
        [p for r in fold for p in run_pieces(featuriser, r, TEXT)]
    )
    got = cache.fit(_vec(max_features, ngram_max), featuriser, fold, TEXT)
    assert got.vocabulary_ == want.vocabulary_
    assert {type(v) for v in got.vocabulary_.values()} == {
        type(v) for v in want.vocabulary_.values()
    }
    assert set(vars(got)) == set(vars(want))
    for r in runs + _runs(5, seed=3):  # runs in and out of the fold, and runs never counted
        a = cache.transform(got, featuriser, r, TEXT)
        b = want.transform(run_pieces(featuriser, r, TEXT))
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.toarray(), b.toarray())


def test_runs_are_rendered_once_and_dropped_when_freed(featuriser, monkeypatch):
    from training.baselines import piece_counts

    calls = []
    real = piece_counts.run_pieces
    monkeypatch.setattr(piece_counts, "run_pieces", lambda *a: calls.append(1) or real(*a))
    cache = PieceCounts()
    runs = _runs(6, seed=4)
    v1 = cache.fit(_vec(None), featuriser, runs, TEXT)
    v2 = cache.fit(_vec(None), featuriser, runs[:3], TEXT)
    for r in runs:
        cache.transform(v1, featuriser, r, TEXT)
        cache.transform(v2, featuriser, r, TEXT)
    assert len(calls) == 6
    (vocab,) = cache._vocabs.values()
    assert len(vocab.runs) == 6
    assert all(r in vocab.runs for r in runs)
    del runs, r
    gc.collect()
    assert len(vocab.runs) == 0
    # a vectorizer the cache did not fit is applied as it is
    other = _vec(None).fit(["w1 w2 zz"])
    r = _runs(1, seed=5)[0]
    np.testing.assert_array_equal(
        cache.transform(other, featuriser, r, TEXT).toarray(),
        other.transform(run_pieces(featuriser, r, TEXT)).toarray(),
    )
