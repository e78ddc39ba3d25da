"""How a paired comparison (training.experiments.paired, known_gate) gets its runs served as
shipped on a view's pairs, its arguments, and where it writes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_write_text


def add_comparison_args(p: argparse.ArgumentParser, a_help: str, b_help: str) -> None:
    """The arguments every paired comparison takes: A, B, the config and the views' draws."""
    p.add_argument("a", type=Path, help=a_help)
    p.add_argument("b", type=Path, help=b_help)
    p.add_argument("--config", required=True)
    p.add_argument("-o", "--override", action="append", default=[])
    p.add_argument("--views", nargs="+", default=["instance"])
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--draws", type=int, default=500)


def view_pairs(folder: Path, view: str, records: list[Any], folds: int, seed: int) -> list[Any]:
    """(calibration, test) records of each fold or pair of a view, with the length scores."""
    from training.evaluate.calibrated import add_length_scores
    from training.evaluate.views import view_calibration, view_folds

    fold = view_folds(view, records, folds, seed)
    if fold is not None:
        add_length_scores(records)
        return [
            ([r for r, g in zip(records, fold, strict=True) if g != f],
             [r for r, g in zip(records, fold, strict=True) if g == f])
            for f in range(int(fold.max()) + 1)
        ]  # fmt: skip
    pairs = view_calibration(folder, records)
    if pairs is None:
        raise ValueError(f"{folder}: no calibration records (pairs.json) for view {view!r}")
    for cal, test in pairs:
        add_length_scores(cal)
        add_length_scores(test)
    return pairs


def served_pairs(
    cfg: Any, folder: Path, view: str, folds: int, keep: set[str] | None, extra: Sequence[str] = ()
) -> tuple[Any, dict[str, int]]:
    """A view's candidates calibrated and served as shipped (training.evaluate.candidates.Served)
    on its pairs, test runs matched to `keep`, and run id -> the pair that tested it."""
    from training.data.records import load_records
    from training.evaluate.candidates import candidate_stops

    records = load_records(folder / "records.parquet")
    pairs = view_pairs(folder, view, records, folds, cfg.data.split_seed)
    if keep is not None:  # calibration records stay whole; only the test runs are matched
        pairs = [(cal, [r for r in test if r.run_id in keep]) for cal, test in pairs]
    served = candidate_stops(
        pairs, cfg.thresholds, cfg.policy.schedule(), seed=cfg.data.split_seed, extra=extra
    )
    return served, {r.run_id: f for f, (_, test) in enumerate(pairs) for r in test}


def write_comparison(a: Path, name: str, results: list[dict], md: str) -> None:
    """A/NAME.json and A/NAME.md, each whole or not at all, and the table on stdout."""
    atomic_write_text(a / f"{name}.json", json.dumps(results, indent=1))
    atomic_write_text(a / f"{name}.md", md)
    sys.stdout.write(md + "\n")
