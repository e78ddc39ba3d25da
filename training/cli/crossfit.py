"""`failfast crossfit`: every labelled run scored by models that never saw its task (views,
rereports, stop-rule variants, balanced subsets).

Imports at the top stay light; the handler imports the pipeline when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training.cli.training import pipeline_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add `crossfit` to the `failfast` parser."""
    p = sub.add_parser(
        "crossfit",
        help="cross-fitted evaluation: every run scored by a head that never saw its task",
        description=(
            "Encode every labelled run once (cached), then for each (train, test) pair of a view "
            "fit the probe and baselines on the training runs, calibrate thresholds on their "
            "out-of-fold scores, and stop the test runs. Writes OUT/<view>/report.md and .json "
            "(per agent and per source, with bootstrap intervals), records and stops."
        ),
    )
    pipeline_args(p, data_help="transcript paths or an ingest dir")
    p.add_argument(
        "--views",
        nargs="+",
        default=["instance"],
        choices=["instance", "repo", "time", "benchmark"],
        help="instance folds (in distribution) and shift views (repository, time, benchmark)",
    )
    p.add_argument("--folds", type=int, default=5, help="folds of the instance and repo views")
    p.add_argument(
        "--per-label",
        type=int,
        default=0,
        metavar="N",
        help="cross-fit at most N resolved and N unresolved runs per agent (seeded by "
        "data.split_seed): a quicker paired comparison of settings; 0 = every run",
    )
    p.add_argument(
        "--rereport",
        action="store_true",
        help="only write OUT/<view>/report.* again from the records and stops saved there",
    )
    p.add_argument(
        "--stop-rules",
        nargs="+",
        metavar="VARIANT",
        help="with --rereport: compare stop-rule variants (margin, persistence, min_steps, "
        "smoothed scores; training.experiments.stop_rules.VARIANTS) on the saved records of "
        "a view (the K folds of instance and repo; the calibration records time and benchmark "
        "keep), as shipped; writes OUT/<view>/stop_rules.json and .md",
    )

    def handler(args: argparse.Namespace) -> int:
        from training.config import load_pipeline_config
        from training.pipeline.crossfit import main
        from training.pipeline.view_report import rereport

        cfg = load_pipeline_config(args.config, args.override)
        if args.stop_rules:
            from training.experiments.stop_rules import VARIANTS, compare

            bad = [v for v in args.stop_rules if v not in VARIANTS]
            if bad or not args.rereport:
                print(
                    f"failfast crossfit: --stop-rules needs --rereport and variants among "
                    f"{', '.join(VARIANTS)} (unknown: {', '.join(bad) or 'none'})",
                    file=sys.stderr,
                )
                return 2
            for view in args.views:
                try:
                    print(compare(cfg, Path(args.out) / view, args.stop_rules, folds=args.folds))
                except ValueError as e:
                    print(f"failfast crossfit: {e}", file=sys.stderr)
                    return 2
            return 0
        if args.rereport:
            rereport(cfg, args.out, views=args.views, folds=args.folds)
        else:
            main(
                cfg, args.data, args.out, views=args.views, folds=args.folds,
                per_label=args.per_label,
            )  # fmt: skip
        for view in args.views:
            print((Path(args.out) / view / "report.md").read_text())
        return 0

    p.set_defaults(func=handler)
