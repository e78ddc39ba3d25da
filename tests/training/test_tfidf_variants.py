"""The TF-IDF screen (training.experiments.tfidf_variants) refits what the cross-fit fits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from training.baselines.learned import fit_baselines, tfidf_run_scores
from training.baselines.piece_counts import prefix_counts
from training.config import PipelineConfig
from training.data.examples import probe_examples
from training.data.folds import view_pairs
from training.data.records import RunRecord
from training.experiments.tfidf_variants import Variant, nb_ratio, view_records


@pytest.fixture(scope="module")
def cfg() -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "policy": {"min_steps": 3, "every": 1},
            "train": {"tfidf_text": {}, "savings_power": 1, "tfidf_max_features": 200},
        }
    )


@pytest.fixture(scope="module")
def records(cfg, runs, featuriser) -> list[RunRecord]:
    """Each run's out-of-fold TF-IDF scores as the cross-fit computes them (fit_baselines on
    the instance folds' training runs)."""
    scores: dict[str, np.ndarray] = {}
    for tr, te in view_pairs("instance", runs, k=5, seed=cfg.data.split_seed):
        train = [runs[i] for i in tr]
        pipes = fit_baselines(
            featuriser, train, probe_examples(cfg, train), cfg.train, schedule=cfg.policy
        )
        for i in te:
            scores[runs[i].id] = tfidf_run_scores(pipes["tfidf_lr"], featuriser, runs[i])
    return [
        RunRecord(
            r.id,
            r.instance_id,
            r.agent,
            r.source,
            bool(r.resolved),
            np.full(len(r.steps), 100, dtype=np.int64),
            {"tfidf_lr": scores[r.id], "monitor": np.full(len(r.steps), 0.5)},
        )  # fmt: skip
        for r in runs
    ]


def test_without_a_variant_the_screen_reproduces_the_crossfit_scores(cfg, runs, records):
    new, diff = view_records(cfg, Variant(), runs, records, "instance")
    assert diff < 1e-9
    assert [r.run_id for r in new] == [r.run_id for r in records]
    for a, b in zip(records, new, strict=True):
        np.testing.assert_allclose(b.scores["tfidf_lr"], a.scores["tfidf_lr"], atol=1e-9)


@pytest.mark.parametrize("variant", [Variant(recent=2), Variant(agent_copies=1.0), Variant(nb=1.0)])
def test_a_variant_replaces_only_the_tfidf_scores(cfg, runs, records, variant):
    new, diff = view_records(cfg, variant, runs, records, "instance")
    assert diff > 1e-6
    for a, b in zip(records, new, strict=True):
        assert len(b.scores["tfidf_lr"]) == a.n_steps
        assert np.all((b.scores["tfidf_lr"] > 0) & (b.scores["tfidf_lr"] < 1))
        np.testing.assert_array_equal(b.scores["monitor"], a.scores["monitor"])


def test_the_recency_block_counts_the_last_steps_without_the_header():
    # header row, then three steps; terms 0..2
    counts = sp.csr_matrix(np.array([[5, 0, 0], [1, 1, 0], [0, 2, 0], [0, 0, 3]], dtype=float))
    got = prefix_counts(counts, last=2).toarray()
    np.testing.assert_array_equal(got, [[1, 1, 0], [1, 3, 0], [0, 2, 3]])


def test_views_without_k_folds_are_refused(cfg, runs, records):
    with pytest.raises(ValueError, match="time"):
        view_records(cfg, Variant(), runs, records, "time")


def test_a_crossfit_without_tfidf_scores_is_refused_by_name(cfg, runs, records):
    bare = [dataclasses.replace(r, scores={"monitor": r.scores["monitor"]}) for r in records]
    with pytest.raises(ValueError, match="without baselines"):
        view_records(cfg, Variant(), runs, bare, "instance")


def test_the_nb_ratio_favours_terms_of_unresolved_prefixes_and_counts_weights():
    # term 0 only in unresolved rows, term 1 only in resolved ones, term 2 in both alike
    x = sp.csr_matrix(np.array([[2, 0, 1], [2, 0, 1], [0, 2, 1], [0, 2, 1]], dtype=float))
    y = np.array([1, 1, 0, 0])
    r = nb_ratio(x, y, np.ones(4), 1.0)
    assert r[0] > 0 > r[1]
    assert r[2] == pytest.approx(0.0)
    # weighting a resolved row up gives its terms' shares of the resolved counts more weight
    x[3, 1] = 0
    r = nb_ratio(x, y, np.ones(4), 1.0)
    assert nb_ratio(x, y, np.array([1.0, 1, 3, 1]), 1.0)[1] < r[1]
