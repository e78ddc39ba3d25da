"""Subcommands of `failfast` that belong to this package (registered by training/cli.py).

Keep imports at the top light; import heavy modules inside the handlers.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this package's subcommands to the `failfast` parser."""
    _register_evaluate(sub)


def _register_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="offline ledger: tokens saved vs resolution, restarts, oracle, baselines, plots",
        description=(
            "Evaluate the monitor's thresholds (picked on the validation split) on the saved test "
            "split of a training output, or on --records, or on --data scored with --bundle."
        ),
    )
    p.add_argument("--bundle", help="bundle folder (thresholds from its monitor.json)")
    p.add_argument("--train-dir", help="training output folder (records/, thresholds.json)")
    p.add_argument("--records", nargs="+", help="saved RunRecord parquet file(s) to evaluate")
    p.add_argument("--data", nargs="+", help="transcripts: for the rule baselines, or to score")
    p.add_argument("--score-data", action="store_true", help="score --data with --bundle")
    p.add_argument("--target-fpr", type=float, default=0.05, help="run-level FPR target")
    p.add_argument("--json", dest="json_out", help="write the report JSON here (+ .md beside it)")
    p.add_argument("--plots", help="folder for the PNG plots")
    p.add_argument("-o", "--override", action="append", default=[], help="EvalConfig key=value")

    def handler(args: argparse.Namespace) -> int:
        from training.evaluate_cmd import run_evaluate

        return run_evaluate(args)

    p.set_defaults(func=handler)
