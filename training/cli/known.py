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
    p.add_argument("--data", nargs="+", default=[], help="labelled runs: a corpus or transcripts")
    p.add_argument(
        "--verdicts",
        nargs="+",
        default=[],
        metavar="FILE",
        help="label files of other agents' whole runs, without transcripts (a SWE-bench run "
        "report, results/results.json of a submission, a mini-swe-agent results_summary.json): "
        "one verdict per task, the agent named by the submission folder",
    )
    p.add_argument(
        "--verdicts-agent", default=None, help="the agent of every --verdicts file (one agent)"
    )
    p.add_argument(
        "--instances",
        default=None,
        metavar="FILE",
        help="the benchmark's instance ids (one per line, or a JSON list): a --verdicts file of "
        "plain lists counts every id it does not name as failed, so it needs them",
    )
    p.add_argument(
        "--labels", action="append", default=[], help="label file for raw runs (repeatable)"
    )
    p.add_argument("--out", required=True, help="folder for the new bundle")
    p.set_defaults(func=_known_tasks)


def _known_tasks(args: argparse.Namespace) -> int:
    from monitor.errors import BundleError, FailfastError, LabelError
    from training.data.runs import load_runs
    from training.export.known_tasks import add_verdicts, table_agents
    from training.export.verdict_files import read_instances, verdict_runs

    if not args.data and not args.verdicts:
        print("error: give labelled runs (--data) or label files (--verdicts)", file=sys.stderr)
        return 2
    if not args.verdicts and (args.verdicts_agent or args.instances):
        print("error: --verdicts-agent and --instances go with --verdicts FILE", file=sys.stderr)
        return 2
    try:
        runs = load_runs(args.data, labels=args.labels) if args.data else []
    except FailfastError as e:  # a damaged corpus
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.data and not runs:
        print(f"error: no run could be read from {' '.join(args.data)}", file=sys.stderr)
        return 2
    try:
        families = table_agents(args.bundle) if args.verdicts else set()
        ids = read_instances(args.instances) if args.instances else None
        from_files = 0
        for f in args.verdicts:
            vf = verdict_runs(f, agent=args.verdicts_agent, instances=ids, families=families)
            for w in vf.warnings:
                print(f"warning: {w}", file=sys.stderr)
            if not vf.runs:
                print(f"warning: {f}: no verdict in it (nothing added)", file=sys.stderr)
                continue
            counted = f" (counted as agent family {vf.family})" if vf.family else ""
            if vf.family and vf.family != vf.agent:
                counted += ": its verdicts stay out of that family's own priors"
            print(f"{f}: {len(vf.runs)} verdicts of {vf.agent}{counted}")
            runs += vf.runs
            from_files += len(vf.runs)
    except (BundleError, LabelError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.verdicts and not from_files and not args.data:
        print("error: no --verdicts file gave a verdict; the bundle is unchanged", file=sys.stderr)
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
