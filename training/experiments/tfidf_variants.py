"""What the TF-IDF candidate reads, screened out of fold on a cross-fit's own folds (issue 26).

    python -m training.experiments.tfidf_variants A --corpus runs/quick/corpus \\
        --config configs/quick.yaml --out C --views instance --recent 3 --recent-scale 0.5
    python -m training.experiments.paired A C --config configs/quick.yaml --views instance

A is a `failfast crossfit` folder. For each K-fold view (instance, repo) this refits the TF-IDF LR
of the config (`-o train.tfidf_C=...` and the other `train.tfidf_*` settings apply) on every
fold's training runs, as the cross-fit does (the `tfidf_text` pieces, `tfidf_max_prefixes_per_run`
checked prefixes per run, the run weighting and savings weights), with the variant's extra
columns, and scores the fold's held-out runs. C/<view>/records.parquet is A's records with
`tfidf_lr` replaced by the variant's scores, so the paired comparison recalibrates it, refits the
stack over it and remakes the per-group choice exactly as shipped. Without a variant and
overrides the scores equal A's (printed: the largest difference), which checks the folds.

Variants (docs/RESULTS.md, "Issue 26, twenty-third round", where both lost):
- `--recent R --recent-scale S`: the sublinear TF-IDF of the last R steps' pieces (no header) as
  a block of columns of its own, times S, beside the whole prefix's.
- `--agent-copies S`: each prefix's columns once shared and once more in its agent's block, times
  S ("frustratingly easy" domain adaptation: per-agent term weights that borrow strength).
- `--binary`: term presence instead of counts, before the TF-IDF weighting.
- `--nb A`: every column times its naive-Bayes log-count ratio (NB-LR, Wang & Manning 2012),
  log((p + A) / |p + A|) - log((q + A) / |q + A|), p and q the weighted column sums over the
  unresolved and the resolved training prefixes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.linear_model import LogisticRegression

from monitor.corpus import load_corpus
from monitor.types import Trajectory
from training.baselines.learned import piece_text, tfidf_examples, tfidf_vectorizer
from training.baselines.piece_counts import PIECES, prefix_counts
from training.config import PipelineConfig, load_pipeline_config
from training.data.folds import view_pairs
from training.data.records import RunRecord, load_records, save_records
from training.data.runs import label_of

VIEWS = ("instance", "repo")


@dataclass(frozen=True)
class Variant:
    """What the TF-IDF LR reads beyond the whole prefix's counts (module docstring)."""

    recent: int = 0
    recent_scale: float = 0.5
    agent_copies: float = 0.0
    binary: bool = False
    nb: float = 0.0


def nb_ratio(x: sp.csr_matrix, y: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """Each column's naive-Bayes log-count ratio, unresolved (y 1) against resolved (y 0)."""
    p = np.asarray(x.T @ (w * (y == 1))).ravel() + alpha
    q = np.asarray(x.T @ (w * (y == 0))).ravel() + alpha
    return np.log(p / p.sum()) - np.log(q / q.sum())


class _Columns:
    """A fold's fitted columns: the vocabulary, the TF-IDF weights of each block, the agents."""

    def __init__(self, cfg: PipelineConfig, variant: Variant, train: Sequence[Trajectory]) -> None:
        tc = cfg.train
        self.text = piece_text(tc)
        self.variant = variant
        self.vec = tfidf_vectorizer(tc.tfidf_max_features, tc.tfidf_ngram_max)
        PIECES.fit(self.vec, None, train, self.text)
        self.agents = sorted({r.agent for r in train})
        self.tfidf: list[TfidfTransformer] = []

    def blocks(self, run: Trajectory, steps: np.ndarray | None = None) -> list[sp.csr_matrix]:
        """Raw counts of each block at prefixes `steps` (1-based; None: every prefix)."""
        counts = PIECES.transform(self.vec, None, run, self.text)
        out = [prefix_counts(counts)]
        if self.variant.recent:
            out.append(prefix_counts(counts, last=self.variant.recent))
        if steps is not None:
            out = [b[np.asarray(steps) - 1] for b in out]
        if self.variant.binary:
            for b in out:
                b.data[:] = 1.0
        return out

    def fit(self, per_block: list[sp.csr_matrix]) -> None:
        self.tfidf = [TfidfTransformer(sublinear_tf=True).fit(b) for b in per_block]

    def matrix(self, per_block: list[sp.csr_matrix], agent: str) -> sp.csr_matrix:
        """The LR's columns of one run's rows."""
        weighted = [t.transform(b) for t, b in zip(self.tfidf, per_block, strict=True)]
        if len(weighted) > 1:
            weighted[1] = weighted[1] * self.variant.recent_scale
        x = sp.hstack(weighted).tocsr()
        s = self.variant.agent_copies
        if s:
            copies = [x * s if a == agent else sp.csr_matrix(x.shape) for a in self.agents]
            x = sp.hstack([x, *copies]).tocsr()
        return x


def fold_scores(
    cfg: PipelineConfig, variant: Variant, train: Sequence[Trajectory], test: Sequence[Trajectory]
) -> dict[str, np.ndarray]:
    """Fit the variant on `train`; P(unresolved | prefix k), k = 1..n, of each `test` run by id."""
    tc = cfg.train
    cols = _Columns(cfg, variant, train)
    ex = tfidf_examples(train, tc, cfg.policy)
    rows: list[list[sp.csr_matrix]] = []
    agents, labels, weights = [], [], []
    for i, r in enumerate(train):
        mine = ex.run == i
        if not mine.any():
            continue
        rows.append(cols.blocks(r, ex.step[mine]))
        agents.append(r.agent)
        labels.append(np.full(int(mine.sum()), label_of(r)))
        weights.append(ex.weight[mine])
    cols.fit([sp.vstack([b[j] for b in rows]).tocsr() for j in range(len(rows[0]))])
    x = sp.vstack([cols.matrix(b, a) for b, a in zip(rows, agents, strict=True)]).tocsr()
    w = np.concatenate(weights)
    y = np.concatenate(labels)
    scale = sp.diags(nb_ratio(x, y, w, variant.nb)) if variant.nb else None
    if scale is not None:
        x = (x @ scale).tocsr()
    lr = LogisticRegression(C=tc.tfidf_C, max_iter=1000)
    lr.fit(x, y, sample_weight=w * len(w) / w.sum())
    out = {}
    for r in test:
        xt = cols.matrix(cols.blocks(r), r.agent)
        out[r.id] = lr.predict_proba(xt if scale is None else (xt @ scale).tocsr())[:, 1]
    return out


def view_records(
    cfg: PipelineConfig,
    variant: Variant,
    runs: Sequence[Trajectory],
    records: Sequence[RunRecord],
    view: str,
    *,
    folds: int = 5,
) -> tuple[list[RunRecord], float]:
    """`records` with `tfidf_lr` replaced by the variant's out-of-fold scores on `view`'s folds,
    and the largest difference from the scores replaced. `folds`: as A was cross-fitted with."""
    if view not in VIEWS:
        raise ValueError(f"view {view!r}: only the K-fold views {VIEWS} are screened")
    scores: dict[str, np.ndarray] = {}
    for tr, te in view_pairs(view, runs, k=folds, seed=cfg.data.split_seed):
        scores.update(fold_scores(cfg, variant, [runs[i] for i in tr], [runs[i] for i in te]))
    out, diff = [], 0.0
    for rec in records:
        if rec.run_id not in scores:
            raise ValueError(f"run {rec.run_id} of the cross-fit is not in the corpus")
        if "tfidf_lr" not in rec.scores:
            raise ValueError(
                f"run {rec.run_id} has no tfidf_lr scores: the cross-fit ran without baselines"
            )
        s = scores[rec.run_id]
        diff = max(diff, float(np.max(np.abs(s - rec.scores["tfidf_lr"]), initial=0.0)))
        out.append(dataclasses.replace(rec, scores={**rec.scores, "tfidf_lr": s}))
    return out, diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="the reference crossfit folder")
    p.add_argument("--corpus", type=Path, required=True, help="the corpus A was cross-fitted on")
    p.add_argument("--config", required=True)
    p.add_argument("-o", "--override", action="append", default=[])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--views", nargs="+", default=["instance"], choices=VIEWS)
    p.add_argument("--folds", type=int, default=5, help="as A was cross-fitted with (--folds)")
    p.add_argument("--recent", type=int, default=0, help="steps in the recency block (0: none)")
    p.add_argument("--recent-scale", type=float, default=0.5)
    p.add_argument("--agent-copies", type=float, default=0.0, help="scale (0: none)")
    p.add_argument("--binary", action="store_true")
    p.add_argument("--nb", type=float, default=0.0, help="NB-LR smoothing alpha (0: none)")
    args = p.parse_args(argv)
    cfg = load_pipeline_config(args.config, args.override)
    if cfg.train.tfidf_text is None:
        sys.exit(f"{args.config}: the screen needs train.tfidf_text (quick.yaml sets it)")
    variant = Variant(args.recent, args.recent_scale, args.agent_copies, args.binary, args.nb)
    runs = load_corpus(args.corpus)
    from training.evaluate.calibrated import live_auroc, mean_live_auroc

    for view in args.views:
        records = load_records(args.a / view / "records.parquet")
        new, diff = view_records(cfg, variant, runs, records, view, folds=args.folds)
        save_records(args.out / view / "records.parquet", new)
        out = [f"{view}: {len(new)} runs, largest change of a tfidf_lr score {diff:.3g}"]
        for name, recs in (("A", records), ("variant", new)):
            by: dict[str, list[RunRecord]] = {}
            for r in recs:
                by.setdefault(r.agent, []).append(r)
            m = mean_live_auroc({a: live_auroc(v, "tfidf_lr") for a, v in by.items()})
            pts = ", ".join(f"{k} {v:.3f}" for k, v in m.items() if v is not None)
            out.append(f"  {name} tfidf_lr live AUROC (mean per agent): {pts}")
        sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
