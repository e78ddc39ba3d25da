"""Experiments users ask about before adopting a monitor: cross-agent transfer and ablations.

Both reuse the pipeline's pieces: the same instance splits as `failfast train` (same data, same
seed), the same stratified training subsample, the feature cache (training.features), so a probe
fitted on cached features costs seconds, and the thresholds/ledger code of evaluation.

- `transfer`: leave one agent out. The head is fitted on the training split of the other agents
  (C and hidden scale picked on their validation split), thresholds are picked on their
  validation split, and the held-out agent is scored on its test split with the POOLED threshold
  of the training agents (a true transfer has no calibration data of the new agent). Reported
  beside it: the same transferred head with thresholds picked on the held-out agent's own
  validation split (recalibrate, do not retrain), and the in-domain head (all four agents).
- `ablate`: see training.ablations.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor.types import Trajectory
from training.config import PipelineConfig
from training.records import RunRecord, records_from_runs

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")
TARGETS = (0.05, 0.10)
AUROC_KEYS = ("0.25", "0.5", "0.75", "overall")


@dataclass
class Prepared:
    """The runs of each split, as `failfast train` would use them with this config.

    Attributes:
        split: train (the config's stratified subsample), val, test.
        train_all: every training-split run (before the subsample).
    """

    split: dict[str, list[Trajectory]]
    train_all: list[Trajectory]


def prepare(cfg: PipelineConfig, data: Sequence[str | Path]) -> Prepared:
    """Read the runs and rebuild the training pipeline's splits and training subsample."""
    from training.data import labelled_runs, load_runs, stratified_subsample
    from training.splits import make_splits

    lab = labelled_runs(load_runs(data))
    if not lab.runs:
        raise ValueError(f"no labelled runs with steps in {', '.join(map(str, data))}")
    splits = make_splits(lab.runs, fractions=cfg.data.split_fractions, seed=cfg.data.split_seed)
    split = {n: splits.select(lab.runs, n) for n in SPLITS}
    train_all = split["train"]
    split["train"] = stratified_subsample(
        train_all, cfg.data.train_max_runs or 0, seed=cfg.data.subsample_seed
    )
    return Prepared(split, train_all)


@dataclass
class Encoded:
    """Features of some runs under one backbone/featuriser: model, features, signals, tokens."""

    model: Any
    featuriser: Any
    hidden: list[np.ndarray]
    signals: list[np.ndarray]
    encoded: list[int]
    seconds: float = 0.0
    tokens_encoded: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def build_model(cfg: PipelineConfig) -> Any:
    """A fresh PrefixClassifier for the config (every loop signal as a head input)."""
    from monitor.signals import SIGNAL_NAMES
    from training.model import build_classifier

    mc = cfg.model
    pooling = getattr(mc, "pooling", "last")
    return build_classifier(
        mc.base, mc.n_layers, list(SIGNAL_NAMES), mc.dtype, mc.signal_transform, pooling
    ).eval()


def featuriser_and_cache(cfg: PipelineConfig) -> tuple[Any, Any]:
    """The config's featuriser and its feature cache (same keys as `failfast train`)."""
    from monitor.featurise import Featuriser
    from training.backbone import backbone_key, cache_dir, resolve_base
    from training.features import FeatureCache, feature_key

    mc, tc = cfg.model, cfg.train
    featuriser = Featuriser.from_tokenizer_file(resolve_base(mc.base), cfg.featurise)
    root = Path(tc.cache_dir) if tc.cache_dir else cache_dir()
    cache = FeatureCache(
        root / "features",
        backbone_key(mc.base, mc.n_layers),
        feature_key(cfg.featurise, getattr(mc, "pooling", "last")),
    )
    return featuriser, cache


def encode(
    cfg: PipelineConfig,
    runs: Sequence[Trajectory],
    *,
    model: Any = None,
    cached: bool = True,
) -> Encoded:
    """Boundary features (from the cache where present) and loop signals of `runs`."""
    from monitor.signals import signal_matrix
    from training.features import PassStats, extract_features

    featuriser, cache = featuriser_and_cache(cfg)
    model = model if model is not None else build_model(cfg)
    stats = PassStats()
    t = time.perf_counter()
    feats = extract_features(
        model,
        featuriser,
        runs,
        cache=cache if cached else None,
        batch_tokens=cfg.train.batch_tokens,
        chunk_runs=cfg.train.chunk_runs,
        pad_id=int(getattr(model.backbone.config, "pad_token_id", None) or 0),
        progress=cfg.train.progress,
        stats=stats,
    )
    return Encoded(
        model,
        featuriser,
        [f.hidden for f in feats],
        [signal_matrix(r) for r in runs],
        [f.encoded_tokens for f in feats],
        seconds=time.perf_counter() - t,
        tokens_encoded=stats.tokens,
    )


def subset(enc: Encoded, idx: Sequence[int]) -> Encoded:
    """The rows of `enc` for the run indices `idx` (same model)."""
    return Encoded(
        enc.model,
        enc.featuriser,
        [enc.hidden[i] for i in idx],
        [enc.signals[i] for i in idx],
        [enc.encoded[i] for i in idx],
    )


def _inputs(enc: Encoded, use_hidden: bool, use_signals: bool, i: int) -> tuple[Any, Any]:
    h, s = enc.hidden[i], enc.signals[i]
    # A dropped input is zeroed: zero columns standardise to zero and get no weight, which is
    # the same model as one without them.
    return (h if use_hidden else np.zeros_like(h)), (s if use_signals else np.zeros_like(s))


def score(
    model: Any, enc: Encoded, *, use_hidden: bool = True, use_signals: bool = True
) -> list[np.ndarray]:
    """Score after every step of every run of `enc` with the model's current head."""
    from training.heads import head_scores

    return [
        head_scores(model, *_inputs(enc, use_hidden, use_signals, i))
        for i in range(len(enc.hidden))
    ]


def records(runs: Sequence[Trajectory], scores: list[np.ndarray], enc: Encoded) -> list[RunRecord]:
    """RunRecords with a "monitor" score."""
    return records_from_runs(runs, {"monitor": scores}, enc.encoded)


def fit_head(
    cfg: PipelineConfig,
    model: Any,
    train_runs: Sequence[Trajectory],
    train: Encoded,
    *,
    use_hidden: bool = True,
    use_signals: bool = True,
    val_runs: Sequence[Trajectory] | None = None,
    val: Encoded | None = None,
    grid: Sequence[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Fit the probe head of `model` (in place) as `failfast train` does.

    Every (C, hidden_scale) of `grid` (default: the config's probe_C x probe_hidden_scale) is
    fitted; with validation runs the best by mean per-agent AUROC (25/50/75 %/overall) is kept,
    without them the grid must hold one pair.

    Returns:
        {"C", "hidden_scale", "criterion" (None without validation), "examples"}.
    """
    from training.data import probe_examples
    from training.heads import select_probe
    from training.prefix_metrics import auroc_report

    tc = cfg.train
    ex = probe_examples(cfg, train_runs)
    rows = [_inputs(train, use_hidden, use_signals, int(i)) for i in range(len(train_runs))]
    x_h = np.stack([rows[i][0][k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    x_s = np.stack([rows[i][1][k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    agents = [train_runs[i].agent for i in ex.run]
    pairs = list(grid or [(c, s) for s in tc.probe_hidden_scale for c in tc.probe_C])
    criterion = None
    if val_runs is not None and val is not None:
        v_runs, v_enc = val_runs, val

        def criterion() -> tuple[float, Any]:
            scores = score(model, v_enc, use_hidden=use_hidden, use_signals=use_signals)
            mean = auroc_report(records(v_runs, scores, v_enc), scorers=["monitor"])
            mean = mean["mean_per_agent"]["monitor"]
            vals = [v for v in mean.values() if v is not None]
            return (float(np.mean(vals)) if vals else 0.0), mean

    if len(pairs) > 1 and criterion is None:
        raise ValueError("fit_head: a grid of more than one (C, scale) needs validation runs")
    fit, _, crit = select_probe(
        model,
        x_h,
        x_s,
        ex.label,
        ex.weight,
        agents,
        pairs=pairs,
        agent_columns=cfg.model.agent_columns,
        val_criterion=criterion,
    )
    return {"C": fit.C, "hidden_scale": fit.hidden_scale, "criterion": crit, "examples": len(ex)}


def pick(cfg: PipelineConfig, val_records: Sequence[RunRecord]) -> dict[str, Any]:
    """thresholds.json content picked on validation records, as `failfast train` does."""
    from training.thresholds import ThresholdPicker

    picker = ThresholdPicker(
        cfg.thresholds,
        min_steps=cfg.policy.min_steps,
        every=cfg.policy.every,
        persist=getattr(cfg.policy, "persist", None),
    )
    return picker.fit(list(val_records)).thresholds_


def ledger(
    test_records: Sequence[RunRecord], thresholds: dict[str, Any], *, target: float
) -> dict[str, Any]:
    """Realized FPR, recall and token savings of the monitor at `target` on the test records,
    with where each group's threshold came from (agent / pooled / refused)."""
    from training.evaluation import ledger_metrics, score_stops

    sched = thresholds.get("schedule") or {}
    stops, used = score_stops(
        test_records,
        thresholds,
        target=target,
        min_steps=int(sched.get("min_steps", 1)),
        every=int(sched.get("every", 1)),
        persist=int(sched.get("persist", 1)),
    )
    m = ledger_metrics(test_records, stops, restart_pool=test_records)
    keys = ("runs", "resolved_runs", "realized_fpr", "fpr_ci", "recall", "token_savings")
    return {**{k: m[k] for k in keys}, "threshold": used}


def pct(x: Any) -> str:
    """A fraction as a percentage with one decimal ("-" for None)."""
    return "-" if x is None else f"{100 * x:.1f}"


def num(x: Any) -> str:
    """A number with three decimals ("-" for None)."""
    return "-" if x is None else f"{x:.3f}"


def write_result(out: Path, name: str, result: dict[str, Any], table: str) -> None:
    """OUT/experiments/NAME.json and NAME.md."""
    d = out / "experiments"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    (d / f"{name}.md").write_text(table)


def run_experiment(
    name: str,
    cfg: PipelineConfig,
    data: Sequence[str | Path],
    out: str | Path,
    *,
    variants: Sequence[str] | None = None,
    subset_train: int = 20,
    subset_test: int = 25,
    probe_grid: bool = False,
) -> dict[str, Any]:
    """Run `transfer` or `ablate`, write OUT/experiments/, print the table; returns the JSON."""
    from training.transfer import run_transfer, transfer_table

    out = Path(out)
    t = time.perf_counter()
    prep = prepare(cfg, data)
    log.info("runs: %s", {n: len(rs) for n, rs in prep.split.items()})
    if name == "transfer":
        result = run_transfer(cfg, prep)
        table = transfer_table(result)
        stem = "transfer"
    elif name == "ablate":
        from training.ablations import ablation_table, run_ablations

        def partial(res: dict[str, Any]) -> None:
            write_result(out, "ablations", res, ablation_table(res))

        result = run_ablations(
            cfg,
            prep,
            variants=variants,
            subset_train=subset_train,
            subset_test=subset_test,
            on_variant=partial,
            records_dir=out / "experiments" / "ablation_records",
            probe_grid=probe_grid,
        )
        table = ablation_table(result)
        stem = "ablations"
    else:
        raise ValueError(f"unknown experiment {name!r} (transfer, ablate)")
    result["seconds"] = round(time.perf_counter() - t, 1)
    result["config"] = cfg.model_dump(mode="json")
    write_result(out, stem, result, table)
    if name == "ablate":  # after the JSON and table are safe on disk
        from training.plots import plot_ablations

        plot_ablations(result, out / "experiments" / "ablations.png")
    print(table)  # noqa: T201 - the CLI's output
    print(f"wrote {out / 'experiments' / stem}.json and .md ({result['seconds']} s)")  # noqa: T201
    return result
