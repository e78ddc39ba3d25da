"""Probe objectives compared as shipped on a cross-fitted view (issue 26, item 5).

    FAILFAST_CACHE=... python -m training.experiments.probe_loss XFIT/instance \\
        --config configs/quick.yaml --data CORPUS --focus 0 2 5 [--pair 0.1 0.02]

For each outer fold of the view `failfast crossfit` wrote (same folds and seed), the probe is
refitted on the fold's training runs from the cached features with one fixed (C, hidden scale)
and each `train.probe_max_focus` (0: per-prefix log loss; > 0: a resolved run's loss on the soft
maximum of its checked logits, training.model.stop_loss.stop_loss_fit) and scores the held-out runs.
The view's saved records keep their other scores (baselines, length); only "monitor" is
replaced, and every candidate and the per-group choice are calibrated and judged as
`failfast crossfit`'s `calibrated` section does. Focus 0 with the same fixed pair is the
reference, so each variant differs from it in the loss alone. Writes VIEW/probe_loss.json.

`--soft L` (with focus 0, rank 0) fits on soft labels instead: each training run's label
becomes (1 - L) * its verdict + L * the failure rate of the *other* training runs of its task
(any agent; its own verdict when none), written as two weighted rows per prefix. One run's
verdict is a noisy draw of how hard its task is for such agents; the soft label asks the probe
for the task's rate, which the held-out task's text and early steps may predict better.
`--soft-scope agent`: the other runs of the task by the same agent only (its other attempts).

`--early K` (with focus 0, rank 0, soft 0) adds a second probe fitted on the prefixes of at
most K steps only; a run is scored by it up to step K and by the ordinary probe after: does a
probe that sees only what a stop early can see rank the runs alive early better?
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def monitor_scores(
    cfg: Any,
    encoder: Any,
    data: Any,
    view: str,
    *,
    focus: float,
    pair: tuple[float, float],
    k: int,
    rank: float = 0.0,
    soft: float = 0.0,
    scope: str = "task",
    early: int = 0,
    center: str = "none",
) -> dict[str, np.ndarray]:
    """run id -> outer-fold monitor scores of every run of the view under `focus` / `rank` /
    `soft` (soft labels, module docstring)."""
    from training.data.folds import view_pairs
    from training.pipeline import stages

    knobs = {"probe_max_focus": focus, "probe_rank_weight": rank}
    vcfg = cfg.model_copy(update={"train": cfg.train.model_copy(update=knobs)})
    out: dict[str, np.ndarray] = {}
    for i, (tr, te) in enumerate(view_pairs(view, data.runs, k=k, seed=cfg.data.split_seed)):
        t = time.perf_counter()
        d = centred(data, list(tr), center) if center != "none" else data
        if soft > 0:
            fit_soft(vcfg, encoder.model, d.subset(list(tr)), pair, soft, scope)
        else:
            stages.fit_head(vcfg, encoder.model, d.subset(list(tr)), grid=[pair])
        test = d.subset(list(te))
        for run, s in zip(test.runs, stages.score(encoder.model, test), strict=True):
            out[run.id] = s
        if early:
            fit_early(vcfg, encoder.model, d.subset(list(tr)), pair, early)
            for run, s in zip(test.runs, stages.score(encoder.model, test), strict=True):
                out[run.id] = np.concatenate([s[:early], out[run.id][early:]])
        log.info("focus %g rank %g, pair %d: %.0f s", focus, rank, i, time.perf_counter() - t)
    return out


def step_bucket(steps: np.ndarray) -> np.ndarray:
    """Log2 buckets of the 1-based step: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65+."""
    return np.minimum(np.ceil(np.log2(np.maximum(steps, 1))).astype(np.int64), 7)


def centred(data: Any, train_idx: Sequence[int], scope: str) -> Any:
    """`data` with every run's hidden rows minus the mean hidden row of the training runs'
    prefixes in the same step bucket (`step_bucket`; scope "agent": of the same agent too),
    means from `train_idx` only. Row k-1 is the state after step k."""
    from training.pipeline.encode import Encoded

    def key(r: Any) -> str:
        return r.agent if scope == "agent" else ""

    sums: dict[tuple[str, int], np.ndarray] = {}
    counts: dict[tuple[str, int], int] = {}
    for i in train_idx:
        h, b = data.hidden[i], step_bucket(np.arange(1, len(data.hidden[i]) + 1))
        for j in np.unique(b):
            k = (key(data.runs[i]), int(j))
            sums[k] = sums.get(k, 0) + h[b == j].sum(axis=0)
            counts[k] = counts.get(k, 0) + int((b == j).sum())
    out = []
    for r, h in zip(data.runs, data.hidden, strict=True):
        b = step_bucket(np.arange(1, len(h) + 1))
        mu = np.zeros_like(h)
        for j in np.unique(b):
            k = (key(r), int(j))
            if k in counts:
                mu[b == j] = sums[k] / counts[k]
        out.append(h - mu)
    return Encoded(data.runs, out, data.signals, data.encoded_tokens)


def soft_targets(runs: Sequence[Any], soft: float, scope: str = "task") -> np.ndarray:
    """Per run: (1 - soft) * unresolved + soft * the unresolved share of the other runs of its
    task among `runs` (scope "agent": by its own agent only; its own label when it has none)."""
    by_task: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(runs):
        by_task.setdefault((r.instance_id, r.agent if scope == "agent" else ""), []).append(i)
    y = np.array([float(not r.resolved) for r in runs])
    out = y.copy()
    for idx in by_task.values():
        if len(idx) < 2:
            continue
        total = y[idx].sum()
        for i in idx:
            out[i] = (1 - soft) * y[i] + soft * (total - y[i]) / (len(idx) - 1)
    return out


def fit_soft(
    cfg: Any, model: Any, train: Any, pair: tuple[float, float], soft: float, scope: str = "task"
) -> None:
    """The probe of `model` fitted (in place) on soft labels (`soft_targets`): every example
    prefix twice, as unresolved with weight w * q and as resolved with weight w * (1 - q)."""
    from training.data.examples import probe_examples
    from training.model.probe import ProbeRows, select_probe
    from training.pipeline.text_probe import probe_rows

    ex = probe_examples(cfg, train.runs)
    rows = probe_rows(train, ex)
    q = soft_targets(train.runs, soft, scope)[ex.run]
    w = np.asarray(rows.weights, dtype=np.float64)
    both = ProbeRows(
        np.concatenate([rows.hidden, rows.hidden]),
        np.concatenate([rows.signals, rows.signals]),
        np.concatenate([np.ones(len(q), np.int64), np.zeros(len(q), np.int64)]),
        np.concatenate([w * q, w * (1 - q)]),
        [*rows.agents, *rows.agents],
    )
    select_probe(model, both, pairs=[pair], agent_columns=cfg.model.agent_columns)


def fit_early(cfg: Any, model: Any, train: Any, pair: tuple[float, float], early: int) -> None:
    """The probe of `model` fitted (in place) on the example prefixes of at most `early` steps."""
    from training.data.examples import probe_examples
    from training.model.probe import select_probe
    from training.pipeline.text_probe import probe_rows

    ex = probe_examples(cfg, train.runs)
    rows = probe_rows(train, ex)
    keep = ex.step <= early
    rows = dataclasses.replace(rows, weights=kept_weights(rows.weights, ex.run, keep)).take(keep)
    select_probe(model, rows, pairs=[pair], agent_columns=cfg.model.agent_columns)


def kept_weights(weights: np.ndarray, run: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """`weights` with each run's kept rows scaled so they carry the run's whole weight (a long
    run keeps only its early prefixes, and would otherwise count for less than a short one);
    rows not kept get 0."""
    w = np.asarray(weights, dtype=np.float64)
    total = np.bincount(run, weights=w)
    kept = np.bincount(run, weights=np.where(keep, w, 0.0), minlength=len(total))
    scale = np.divide(total, kept, out=np.zeros_like(total), where=kept > 0)
    return np.where(keep, w * scale[run], 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    from training.config import load_pipeline_config
    from training.data.records import load_records
    from training.data.runs import labelled_runs, load_runs
    from training.evaluate.candidates import crossfit_candidates
    from training.evaluate.views import view_folds
    from training.experiments.stop_rules import summary
    from training.pipeline.encode import encode, load_encoder

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("view_dir", type=Path)
    p.add_argument("--config", default="configs/quick.yaml")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--focus", nargs="+", type=float, default=[0.0, 2.0])
    p.add_argument("--rank", nargs="+", type=float, default=[0.0], help="ranking-loss weights")
    p.add_argument(
        "--soft", nargs="+", type=float, default=[0.0], help="soft-label weights (task rate)"
    )
    p.add_argument("--pair", nargs=2, type=float, default=[0.1, 0.02], metavar=("C", "SCALE"))
    p.add_argument("--soft-scope", choices=["task", "agent"], default="task")
    p.add_argument(
        "--early", nargs="+", type=int, default=[0], help="early probes up to these steps"
    )
    p.add_argument(
        "--center", nargs="+", choices=["none", "all", "agent"], default=["none"],
        help="hidden rows minus the training mean of their step bucket (per agent)",
    )  # fmt: skip
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--n-boot", type=int, default=200)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_pipeline_config(args.config)
    records = load_records(args.view_dir / "records.parquet")
    view = args.view_dir.name
    fold = view_folds(view, records, args.folds, cfg.data.split_seed)
    if fold is None:
        raise SystemExit(f"{args.view_dir}: {view} is not a K-fold view")
    runs = labelled_runs(load_runs(args.data)).runs
    encoder = load_encoder(cfg)
    data = encode(encoder, runs)
    path = args.view_dir / "probe_loss.json"
    done: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    pair = (float(args.pair[0]), float(args.pair[1]))
    variants = [
        (f, r, s, e, c)
        for f in args.focus
        for r in args.rank
        for s in args.soft
        for e in args.early
        for c in args.center
    ]
    for focus, rank, soft, early, _ in variants:
        if (soft or early) and (focus or rank) or (soft and early):
            raise SystemExit("--soft and --early need focus 0 and rank 0, and not each other")
    for focus, rank, soft, early, center in variants:
        scores = monitor_scores(
            cfg, encoder, data, view, focus=focus, pair=pair, k=args.folds, rank=rank, soft=soft,
            scope=args.soft_scope, early=early, center=center,
        )  # fmt: skip
        recs = [
            dataclasses.replace(r, scores={**r.scores, "monitor": scores[r.run_id]})
            for r in records
        ]
        rep = crossfit_candidates(
            recs, cfg.thresholds, cfg.policy.schedule(), fold=fold, seed=cfg.data.split_seed,
            n_boot=args.n_boot,
        )  # fmt: skip
        key = f"focus={focus:g},rank={rank:g},C={pair[0]:g},scale={pair[1]:g}"
        key += f",soft={soft:g}" + ("" if args.soft_scope == "task" else ",agent") if soft else ""
        key += f",early={early}" if early else ""
        key += f",center={center}" if center != "none" else ""
        done[key] = summary(rep)
        done[key]["per_agent"] = {
            a: {t: {n: row[n] for n in ("monitor", "selected_per_target")}
                for t, row in e["targets"].items() if t in ("0.05", "0.1")}
            for a, e in rep["per_agent"].items()
        }  # fmt: skip
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=1))
        tmp.replace(path)
        m5, m10 = done[key]["0.05"]["monitor"], done[key]["0.1"]["monitor"]
        log.info(
            "%s: monitor saved 5%% %.1f [%.1f, %.1f] 10%% %.1f; live AUROC %s",
            key, 100 * m5["saved"], 100 * m5["ci"][0], 100 * m5["ci"][1], 100 * m10["saved"],
            done[key]["live_auroc"]["monitor"],
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
