"""`failfast evaluate`: find the records, thresholds and transcripts, run the report, write files.

Where things come from, in order:
- records: `--records FILE...`; else `--data` scored with `--bundle` when `--score-data`; else the
  saved test split `TRAIN_DIR/records/test.parquet` (TRAIN_DIR = `--train-dir`, else the bundle's
  monitor.json `training_dir`, else the bundle's parent folder when it holds records/).
- thresholds: the bundle's monitor.json `thresholds`; else `TRAIN_DIR/thresholds.json`; else picked
  now (bound mode) on `TRAIN_DIR/records/val.parquet`. Never on the evaluated runs.
- rule baselines (transcript-analyser rule, stuck patterns, p95 Budget) need the transcripts:
  `--data` read with monitor.read_runs, matched by run id. The Budget is fitted per agent on the
  labelled runs of instances not evaluated (train + validation when --data is the whole corpus).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from monitor.config import load_config
from training.evaluation import EvalConfig
from training.records import RunRecord, load_records

log = logging.getLogger(__name__)


def _train_dir(args: argparse.Namespace) -> Path | None:
    if args.train_dir:
        return Path(args.train_dir)
    if args.bundle:
        b = Path(args.bundle)
        man = b / "monitor.json"
        if man.is_file():
            td = json.loads(man.read_text()).get("training_dir")
            if td and Path(td).is_dir():
                return Path(td)
        for cand in (b, b.parent):
            if (cand / "records").is_dir():
                return cand
    return None


def _thresholds(args: argparse.Namespace, train_dir: Path | None) -> dict[str, Any]:
    if args.bundle and (Path(args.bundle) / "monitor.json").is_file():
        th = json.loads((Path(args.bundle) / "monitor.json").read_text()).get("thresholds")
        if th:
            return th
    if train_dir and (train_dir / "thresholds.json").is_file():
        return json.loads((train_dir / "thresholds.json").read_text())
    val = train_dir / "records" / "val.parquet" if train_dir else None
    if val and val.is_file():
        from training.thresholds import pick_thresholds

        log.warning(
            "no thresholds.json: picking thresholds now on %s (bound mode, every step)", val
        )
        return pick_thresholds(load_records(val))
    raise SystemExit(
        "evaluate: no thresholds found (give --bundle or --train-dir with thresholds.json)"
    )


def _read_runs(paths: list[str]) -> list[Any]:
    from monitor import read_runs  # type: ignore[attr-defined]

    return [t for t in read_runs(paths) if t.resolved is not None]


def _score_runs(bundle: str, runs: list[Any]) -> list[RunRecord]:
    """RunRecords of runs scored with an exported bundle (and its saved baselines)."""
    import numpy as np

    from serving.scorer import Scorer

    scorer = Scorer.load(bundle)
    base = Path(bundle) / "baselines"
    pipes: dict[str, Any] = {}
    if base.is_dir():
        import joblib

        pipes = {p.stem: joblib.load(p) for p in sorted(base.glob("*.joblib"))}
    out = []
    for t in runs:
        scores = {"monitor": np.asarray(scorer.score_run(t))}
        if not len(scores["monitor"]):
            continue
        try:
            from monitor.signals import signal_matrix
            from training import baselines as bl

            if "signals_lr" in pipes:
                scores["signals_lr"] = bl.signals_run_scores(pipes["signals_lr"], signal_matrix(t))
            if "tfidf_lr" in pipes:
                scores["tfidf_lr"] = bl.tfidf_run_scores(pipes["tfidf_lr"], scorer.featuriser, t)
        except Exception as e:  # a baseline failing must not lose the monitor's scores
            log.warning("%s: baseline scores skipped: %s", t.id, e)
        enc = sum(len(w.ids) for w in scorer.featuriser.windows(t))
        out.append(
            RunRecord(
                t.id,
                t.instance_id,
                t.agent,
                t.source,
                bool(t.resolved),
                np.asarray([s.tokens for s in t.steps]),
                scores,
                enc,
            )
        )
    return out


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of `failfast evaluate`."""
    from training.eval_report import evaluate, markdown_table, rule_inputs

    cfg = load_config(EvalConfig, None, [f"target_fpr={args.target_fpr}", *args.override])
    train_dir = _train_dir(args)
    thresholds = _thresholds(args, train_dir)
    runs = _read_runs(args.data) if args.data else None
    if args.records:
        records = [r for f in args.records for r in load_records(f)]
    elif args.score_data:
        if not (args.bundle and runs):
            raise SystemExit("evaluate: --score-data needs --bundle and --data")
        records = _score_runs(args.bundle, runs)
    elif train_dir and (train_dir / "records" / "test.parquet").is_file():
        records = load_records(train_dir / "records" / "test.parquet")
    else:
        raise SystemExit(
            "evaluate: no records (give --records, --train-dir, or --bundle --data --score-data)"
        )
    val_path = train_dir / "records" / "val.parquet" if train_dir else None
    calibration = load_records(val_path) if val_path and val_path.is_file() else None
    signals, budgets = rule_inputs(runs, records) if runs else (None, None)
    result = evaluate(
        records, thresholds, config=cfg, calibration=calibration, signals=signals, budgets=budgets
    )
    table = markdown_table(result)
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=float))
        out.with_suffix(".md").write_text(table)
    if args.plots:
        from training.plots import write_plots

        scorers = [cfg.scorer, *(n for n in cfg.score_baselines if n in result["baselines"])]
        write_plots(records, result, args.plots, scorers=scorers, n_runs=cfg.n_plot_runs)
    sys.stdout.write(table)
    return 0
