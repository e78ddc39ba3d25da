"""`failfast known-tasks`: add labelled runs' verdicts to a bundle's table of known tasks
(training/export/known_tasks.py; docs/BUNDLE.md, "Known tasks")."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the known-tasks subcommand to the `failfast` parser."""
    p = sub.add_parser(
        "known-tasks",
        help="add labelled runs' verdicts to a bundle's table of known tasks (writes a new bundle)",
    )
    p.add_argument("bundle", help="bundle folder trained with train.task_prior_min_runs")
    p.add_argument(
        "--data", nargs="+", required=True, help="labelled runs: a corpus or transcripts"
    )
    p.add_argument(
        "--labels", action="append", default=[], help="label file for raw runs (repeatable)"
    )
    p.add_argument("--out", required=True, help="folder for the new bundle")
    p.set_defaults(func=_known_tasks)


def _known_tasks(args: argparse.Namespace) -> int:
    from monitor.errors import BundleError
    from training.data.runs import load_runs
    from training.export.known_tasks import add_verdicts

    runs = load_runs(args.data, labels=args.labels)
    if not runs:
        print(f"error: no run could be read from {' '.join(args.data)}", file=sys.stderr)
        return 2
    try:
        done = add_verdicts(args.bundle, args.out, runs)
    except (BundleError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in done.lines():
        print(line)
    print(f"wrote {args.out} (not signed: run `failfast sign {args.out} --key KEY` if you sign)")
    return 0
