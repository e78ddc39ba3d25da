"""Learned baselines: the TF-IDF per-prefix shortcut equals the pipeline; the signals baseline."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from monitor.schedule import Schedule  # noqa: E402
from monitor.signals import signal_matrix  # noqa: E402
from serving.candidate_run import run_pieces  # noqa: E402
from training.baselines import learned as bl  # noqa: E402
from training.data.examples import (  # noqa: E402
    prefix_examples,
)

EVERY_STEP = Schedule(min_steps=1, every=1, persist=1)


def test_tfidf_run_scores_match_pipeline(featuriser, runs):
    ex = prefix_examples(runs, schedule=EVERY_STEP)
    steps = [ex.step[ex.run == i] for i in range(len(runs))]
    w = [ex.weight[ex.run == i] for i in range(len(runs))]
    pipe = bl.fit_tfidf_lr(featuriser, runs, steps, [0 if r.resolved else 1 for r in runs], w)
    r = runs[1]
    pieces = run_pieces(featuriser, r)
    texts = ["".join(pieces[: k + 1]) for k in range(1, len(r.steps) + 1)]
    np.testing.assert_allclose(
        bl.tfidf_run_scores(pipe, featuriser, r), pipe.predict_proba(texts)[:, 1]
    )
    sig_pipe = bl.fit_signals_lr(
        np.stack([signal_matrix(x)[-1] for x in runs]),
        np.array([0 if x.resolved else 1 for x in runs]),
        np.ones(len(runs)),
    )
    s = bl.signals_run_scores(sig_pipe, signal_matrix(r))
    assert s.shape == (len(r.steps),)
    assert ((s > 0) & (s < 1)).all()


def test_numpy_baselines_score_as_the_fitted_pipelines(featuriser, runs):
    """serving.candidates (no torch, no scikit-learn) gives the pipelines' scores, also after a
    round trip through JSON."""
    import json

    from serving.candidates import SignalsLR, TfidfLR
    from training.export.candidates import baseline_params

    ex = prefix_examples(runs, schedule=EVERY_STEP)
    steps = [ex.step[ex.run == i] for i in range(len(runs))]
    w = [ex.weight[ex.run == i] for i in range(len(runs))]
    y = [0 if r.resolved else 1 for r in runs]
    tf = bl.fit_tfidf_lr(featuriser, runs, steps, y, w)
    x = np.concatenate([signal_matrix(r) for r in runs])
    yy = np.concatenate([np.full(len(r.steps), 0 if r.resolved else 1) for r in runs])
    sig = bl.fit_signals_lr(x, yy, np.ones(len(yy)))
    params = json.loads(json.dumps(baseline_params({"signals_lr": sig, "tfidf_lr": tf})))
    t, s = TfidfLR.from_json(params["tfidf_lr"]), SignalsLR.from_json(params["signals_lr"])
    for r in runs[:4]:
        np.testing.assert_allclose(
            t.scores(run_pieces(featuriser, r)), bl.tfidf_run_scores(tf, featuriser, r),
            rtol=1e-9, atol=1e-12,
        )  # fmt: skip
        np.testing.assert_allclose(
            s.scores(signal_matrix(r)), bl.signals_run_scores(sig, signal_matrix(r)), atol=1e-12
        )


def test_the_tfidf_text_travels_with_the_pipeline_into_the_bundle(featuriser, runs):
    """Fitted on its own PieceText, the pipeline scores (and exports) the same pieces;
    `train.tfidf_text` set fits on PieceText, null (the default) on the featuriser's pieces."""
    import json

    from serving.candidates import PieceText, TfidfLR
    from training.config import TfidfTextConfig, TrainConfig
    from training.export.candidates import baseline_params

    text = PieceText(
        task_chars=12, action_chars=8, obs_head_chars=4, obs_tail_chars=3, thought_chars=1000
    )
    ex = prefix_examples(runs, schedule=EVERY_STEP)
    steps = [ex.step[ex.run == i] for i in range(len(runs))]
    w = [ex.weight[ex.run == i] for i in range(len(runs))]
    y = [0 if r.resolved else 1 for r in runs]
    tf = bl.fit_tfidf_lr(featuriser, runs, steps, y, w, text=text)
    r = runs[1]
    pieces = run_pieces(featuriser, r, text)
    assert pieces != run_pieces(featuriser, r)
    texts = ["".join(pieces[: k + 1]) for k in range(1, len(r.steps) + 1)]
    np.testing.assert_allclose(
        bl.tfidf_run_scores(tf, featuriser, r), tf.predict_proba(texts)[:, 1], atol=1e-12
    )
    params = json.loads(json.dumps(baseline_params({"tfidf_lr": tf})))
    served = TfidfLR.from_json(params["tfidf_lr"])
    assert served.text == text
    np.testing.assert_allclose(
        served.scores(pieces), bl.tfidf_run_scores(tf, featuriser, r), rtol=1e-9, atol=1e-12
    )
    assert bl.piece_text(TrainConfig(tfidf_text=TfidfTextConfig())) == PieceText(
        2000, 300, 300, 300, 1000
    )
    assert bl.piece_text(TrainConfig()) is None
    old = dict(params["tfidf_lr"])
    del old["text"]
    assert TfidfLR.from_json(old).text is None  # a bundle written before PieceText
    with pytest.raises(ValueError, match="unknown fields"):
        PieceText.from_json({"task_chars": 1, "obs_chars": 2})


def test_word_pairs_are_counted_within_pieces_alike_in_training_and_serving(featuriser, runs):
    """`train.tfidf_ngram_max: 2`: the served TfidfLR forms the fitted pipeline's word pairs
    (within each piece) and gives its scores, also after a JSON round trip; a bundle's JSON
    without `ngram_max` reads as words only."""
    import json

    from serving.candidates import TfidfLR
    from training.export.candidates import baseline_params

    ex = prefix_examples(runs, schedule=EVERY_STEP)
    steps = [ex.step[ex.run == i] for i in range(len(runs))]
    w = [ex.weight[ex.run == i] for i in range(len(runs))]
    y = [0 if r.resolved else 1 for r in runs]
    tf = bl.fit_tfidf_lr(featuriser, runs, steps, y, w, ngram_max=2)
    vocab = tf.named_steps["counts"].vocabulary_
    assert any(" " in t for t in vocab)
    params = json.loads(json.dumps(baseline_params({"tfidf_lr": tf})))
    assert params["tfidf_lr"]["ngram_max"] == 2
    served = TfidfLR.from_json(params["tfidf_lr"])
    for r in runs[:4]:
        np.testing.assert_allclose(
            served.scores(run_pieces(featuriser, r)), bl.tfidf_run_scores(tf, featuriser, r),
            rtol=1e-9, atol=1e-12,
        )  # fmt: skip
    words = dict(params["tfidf_lr"])
    del words["ngram_max"]
    assert TfidfLR.from_json(words).ngram_max == 1
    pair = next(t for t in vocab if " " in t)
    assert served.piece_counts("\n" + pair.upper() + "\n").get(vocab[pair]) == 1.0
    assert vocab[pair] not in TfidfLR.from_json(words).piece_counts("\n" + pair + "\n")
