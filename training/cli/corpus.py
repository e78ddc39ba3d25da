"""`failfast ingest | inspect`: readers, labels and the corpus (monitor/), no model.

Imports at the top stay light; handlers import what they need.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `ingest` and `inspect` to the `failfast` parser."""
    p = sub.add_parser("ingest", help="read runs + label files into a corpus and summary.json")
    p.add_argument("paths", nargs="+", help="files or folders holding runs and label files")
    p.add_argument(
        "--out",
        required=True,
        help="output folder: a `datasets` Dataset (datasets.load_from_disk(OUT)) + summary.json",
    )
    p.add_argument("--format", default=None, help="force one reader (default: detect per file)")
    p.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="FILE",
        help="a label file that labels every run it names, wherever it lies (repeatable)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when there is any problem")
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("inspect", help="show one parsed run: format, steps, tokens, label")
    p.add_argument("file", help="transcript file or run directory")
    p.add_argument("--format", default=None, help="force one reader (default: detect)")
    p.add_argument("--json", action="store_true", help="print the parsed run as JSON")
    p.add_argument("--steps", type=int, default=10, help="steps to list (0: none, -1: all)")
    p.set_defaults(func=_cmd_inspect)


def _cmd_ingest(args: argparse.Namespace) -> int:
    import sys
    import time
    from pathlib import Path

    from monitor.corpus import ingest
    from monitor.errors import CorpusError
    from training.cli.scorer_args import labels_problem

    why = labels_problem(args.labels)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    existed = Path(args.out).exists()
    try:
        summary = ingest(args.paths, args.out, format=args.format, labels=args.labels)
    except (ImportError, CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary.table())
    links = (
        f", {summary.links_followed} symbolic link(s) followed" if summary.links_followed else ""
    )
    dest = f" -> {args.out}" if summary.runs else ""
    print(f"{summary.runs} runs, {len(summary.problems)} problems{links}, "
          f"{time.perf_counter() - t0:.1f} s{dest}")  # fmt: skip
    if summary.runs == 0:
        kept = f"{args.out} was left as it was" if existed else "nothing was written"
        print(f"error: no run could be read; {kept}", file=sys.stderr)
        return 2
    return 1 if args.strict and summary.problems else 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from monitor.errors import FailfastError
    from monitor.escape import visible
    from monitor.label_join import LabelIndex, find_labels_near
    from monitor.labels import load_label
    from monitor.reading import detect, folder_source, read_trajectory

    try:
        traj = read_trajectory(Path(args.file), args.format)
    except (FailfastError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_path = Path(traj.path or args.file)
    if not traj.source:  # as ingest and score name it: the folder
        traj.source = folder_source(run_path)
    near = find_labels_near(run_path, instance_id=traj.instance_id)
    if run_path.is_dir():  # a run directory may hold its own verdict (Harbor's result.json)
        near += getattr(detect(run_path), "labels_in", lambda _p: [])(run_path)
    labels = []
    for p in near:
        try:
            labels.append(load_label(p))
        except FailfastError:
            continue
    index = LabelIndex(labels)
    verdict, label_file, _ = index.pick(run_path.absolute(), traj.instance_id)
    if label_file is None and run_path.resolve() != run_path.absolute():
        renamed = run_path.resolve().name != run_path.name  # as ingest joins it (label_join)
        verdict, label_file, _ = index.pick(
            run_path.resolve(), traj.instance_id, defaults=not renamed
        )
    traj.resolved = verdict
    if args.json:
        print(json.dumps(traj.to_dict(), indent=1, default=str))
        return 0
    estimated = sum(s.tokens_estimated for s in traj.steps)
    label = {True: "resolved", False: "unresolved", None: "unknown"}[verdict]

    def say(line: str) -> None:  # run ids, names and text from the file: never raw control codes
        print(visible(line))

    source_dir = next(
        (p for p in run_path.absolute().parents if traj.source and p.name == traj.source), None
    )
    found = traj.provenance
    say(f"format:   {traj.format}")
    say(f"agent:    {traj.agent}  model: {traj.model or '?'}")
    say(f"run:      {traj.id}  (run {traj.run or '-'}" + (
        f", from {found['run']})" if "run" in found else ")"))  # fmt: skip
    say(f"instance: {traj.instance_id}  (from "
          + found.get("instance", f"the {traj.format} transcript {run_path}") + ")")  # fmt: skip
    say(f"source:   {traj.source or '-'}  (from "
          + found.get("source", f"the folder {source_dir or run_path.parent}") + ")")  # fmt: skip
    say(f"exit:     {traj.exit_status or '-'}")
    where = (
        f"  (from {label_file.path}, {label_file.kind}"
        + (", names the instance)" if traj.instance_id in label_file.verdicts else ", default)")
        if label_file
        else f"  (no label file beside the run names {traj.instance_id})"
    )
    say(f"label:    {label}{where}")
    say(f"steps:    {len(traj.steps)}  errors: {sum(s.is_error for s in traj.steps)}")
    say(
        f"tokens:   {traj.total_tokens} (in {sum(s.tokens_in for s in traj.steps)}, "
        f"out {sum(s.tokens_out for s in traj.steps)}; "
        + (
            "estimated"
            if estimated == len(traj.steps) and estimated
            else f"{estimated} of {len(traj.steps)} steps estimated"
        )  # fmt: skip
        + ")"
    )
    if traj.totals.cost_usd is not None:
        say(f"cost:     ${traj.totals.cost_usd:.4f}")
    say(f"task:     {traj.task[:200].replace(chr(10), ' ')}")
    shown = traj.steps if args.steps < 0 else traj.steps[: args.steps]
    for s in shown:
        action = s.action.replace("\n", " ")[:70]
        role = f"[{s.role}] " if s.role else ""
        err = " ERR" if s.is_error else ""
        say(f"  {s.index:3d} {role}{s.kind:12s} {s.tool:18s} {s.tokens:7d} tok{err}  {action}")
    if len(shown) < len(traj.steps):
        print(f"  ... {len(traj.steps) - len(shown)} more steps (--steps -1 shows all)")
    return 0
