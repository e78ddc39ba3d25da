"""`failfast evaluate`: the offline report of a bundle's thresholds on recorded runs (tokens saved
against resolution, restarts, the oracle, every baseline calibrated the same way, plots).

The handler checks the paths before any work and leaves the report to
training.evaluate.inputs (find_inputs, write_report) and training.evaluate.summary.
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add `failfast evaluate` to the `failfast` parser."""
    from monitor.thresholds import DEFAULT_TARGET

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
    p.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="FILE",
        help="a label file for --data that labels every run it names, wherever it lies",
    )
    p.add_argument("--score-data", action="store_true", help="score --data with --bundle")
    p.add_argument(
        "--group",
        "--source",
        dest="group",
        default=None,
        metavar="NAME",
        help="threshold group of every evaluated run (the name given to `failfast calibrate "
        "--agent`), whatever folder the runs sit in (default: each run's own source or agent)",
    )
    p.add_argument(
        "--target-fpr",
        type=float,
        default=DEFAULT_TARGET,
        help=f"run-level FPR target (default {DEFAULT_TARGET:g})",
    )
    p.add_argument("--json", dest="json_out", help="write the report JSON here (+ .md beside it)")
    p.add_argument("--plots", help="folder for the PNG plots")
    p.add_argument("-o", "--override", action="append", default=[], help="EvalConfig key=value")

    def handler(args: argparse.Namespace) -> int:
        from monitor.config import load_config
        from monitor.errors import FailfastError
        from training.config import EvalConfig
        from training.evaluate.inputs import find_inputs, write_report

        try:
            why = _args_problem(args)
            if why:
                raise ValueError(why)
            cfg = load_config(EvalConfig, None, [f"target_fpr={args.target_fpr}", *args.override])
            inputs = find_inputs(
                bundle=args.bundle,
                train_dir=args.train_dir,
                records=args.records,
                data=args.data,
                labels=args.labels,
                score_data=args.score_data,
            )
        except (FailfastError, ValueError, OSError) as e:  # incl. unreadable --records (Arrow)
            print(f"error: evaluate: {e}", file=sys.stderr)
            return 2
        if args.group and args.group not in inputs.thresholds.groups:  # served as unknown
            known = ", ".join(sorted(inputs.thresholds.groups)) or "none"
            print(f"note: --group {args.group!r} is not one of the thresholds' groups ({known}): "
                  f"evaluated as an unknown group (fallback {inputs.thresholds.fallback})",
                  file=sys.stderr)  # fmt: skip
        if args.data and not args.score_data and not args.records:
            print(
                f"note: the report covers the {len(inputs.records)} saved test records beside the "
                "bundle; --data only feeds the rule baselines (add --score-data to score those "
                "runs with the bundle)",
                file=sys.stderr,
            )
        if args.group:  # the thresholds' own key; the p95 Budget keeps the runs' own groups
            for r in inputs.records:
                setattr(r, inputs.thresholds.group_by, args.group)
        result = inputs.evaluate(cfg)
        table = write_report(
            result,
            inputs.records,
            cfg,
            json_path=args.json_out,
            plots_dir=args.plots,
            thresholds=inputs.thresholds,
        )
        from training.evaluate.summary import plain_summary

        print(table)
        print(plain_summary(result, inputs.records, inputs.thresholds, scorer=cfg.scorer), end="")
        return 0

    p.set_defaults(func=handler)


def _args_problem(args: argparse.Namespace) -> str:
    """What is wrong with `failfast evaluate`'s paths before any work ("" when nothing)."""
    from pathlib import Path

    from training.cli.scorer_args import labels_problem

    if args.bundle and not Path(args.bundle).is_dir():
        return f"--bundle {args.bundle}: no such folder"
    if args.score_data and not (args.bundle and args.data):
        return "--score-data needs --bundle and --data"
    for flag, paths in (("--data", args.data or []), ("--records", args.records or [])):
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            return f"{flag} {missing[0]}: no such file or folder"
    if why := labels_problem(args.labels or []):
        return why
    if args.json_out and Path(args.json_out).is_dir():
        return f"--json {args.json_out} is a folder; give the report's file name (e.g. .../report.json)"
    return ""
