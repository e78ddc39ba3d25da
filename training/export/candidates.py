"""The fitted baselines as plain numpy parameters (serving.candidates), for a torch-free and
scikit-learn-free bundle."""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.candidates import SignalsLR, TfidfLR


def signals_params(pipe: Any) -> SignalsLR:
    """The signals LR pipeline (arcsinh -> StandardScaler -> LogisticRegression) as numpy."""
    scale, lr = pipe.named_steps["scale"], pipe.named_steps["lr"]
    return SignalsLR(
        np.asarray(scale.mean_, dtype=np.float64),
        np.asarray(scale.scale_, dtype=np.float64),
        np.asarray(lr.coef_[0], dtype=np.float64),
        float(lr.intercept_[0]),
    )


def tfidf_params(pipe: Any) -> TfidfLR:
    """The TF-IDF pipeline (CountVectorizer -> sublinear TfidfTransformer -> LR) as numpy."""
    vec, tfidf, lr = (pipe.named_steps[n] for n in ("counts", "tfidf", "lr"))
    if not (vec.lowercase and tfidf.sublinear_tf and tfidf.norm == "l2" and tfidf.use_idf):
        raise ValueError("tfidf_params: only the lowercase, sublinear, l2, idf pipeline is served")
    if vec.analyzer != "word" or vec.ngram_range[0] != 1 or vec.stop_words is not None:
        raise ValueError("tfidf_params: only word n-grams from 1, without stop words, are served")
    return TfidfLR(
        {str(t): int(j) for t, j in vec.vocabulary_.items()},
        np.asarray(tfidf.idf_, dtype=np.float64),
        np.asarray(lr.coef_[0], dtype=np.float64),
        float(lr.intercept_[0]),
        vec.token_pattern,
        getattr(pipe, "piece_text", None),  # set by fit_tfidf_lr; None on older pipelines
        int(vec.ngram_range[1]),
    )


def baseline_params(pipes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> the JSON of its numpy form, for every baseline that has one."""
    out: dict[str, dict[str, Any]] = {}
    if "signals_lr" in pipes:
        out["signals_lr"] = signals_params(pipes["signals_lr"]).to_json()
    if "tfidf_lr" in pipes:
        out["tfidf_lr"] = tfidf_params(pipes["tfidf_lr"]).to_json()
    return out
