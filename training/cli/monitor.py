"""`failfast ingest | inspect | check | fit-budget | reasons`: the light core (monitor/), no model.

Imports at the top stay light; handlers import what they need.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the monitor subcommands to the `failfast` parser."""
    _register_halts(sub)
    _register_corpus(sub)


# --- check, fit-budget, reasons (heuristic halts and the halt-reason report) ---------------


def _register_halts(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="apply the transcript-analyser rule to one transcript")
    p.add_argument("transcript", help="transcript file or run directory (any supported format)")
    p.add_argument("--format", default=None, help="reader name (default: detect)")
    from monitor.halts import TranscriptRule

    rule = TranscriptRule()  # the flags' defaults are the rule's own
    p.add_argument("--max-turns", type=int, default=rule.max_turns, help="stop at this many turns")
    p.add_argument(
        "--max-repeats",
        type=int,
        default=rule.max_repeats,
        help="stop at this many identical calls",
    )
    p.add_argument(
        "--max-error-streak",
        type=int,
        default=rule.max_error_streak,
        help="stop at this many errors in a row",
    )
    p.add_argument(
        "--max-cost", type=float, default=rule.max_cost_usd, help="stop at this many dollars"
    )
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("fit-budget", help="fit Budget caps as the p95 of resolved runs")
    p.add_argument("paths", nargs="+", help="an ingested corpus directory, or transcripts")
    p.add_argument("--out", default=None, help="write a policy YAML with the budget section")
    p.add_argument("--quantile", type=float, default=0.95, help="quantile of resolved runs")
    p.add_argument("--agent", default=None, help="fit on this agent's runs only")
    p.set_defaults(func=_cmd_fit_budget)

    p = sub.add_parser("reasons", help="halt reasons and review flags per agent, by label")
    p.add_argument("paths", nargs="+", help="decision logs (.jsonl), a corpus dir, or transcripts")
    p.add_argument("--config", default=None, help="policy YAML for replays")
    p.add_argument("-o", "--override", action="append", default=[], help="policy.key=value")
    p.add_argument("--audit", action="store_true", help="also count every heuristic rule alone")
    p.add_argument(
        "--fit-scope", action="store_true", help="per-agent p95 scope caps from the runs"
    )
    p.add_argument("--json", default=None, help="write the rows as JSON here")
    p.add_argument(
        "--min-runs", type=int, default=5, help="labelled runs before a tuning note is given"
    )
    p.set_defaults(func=_cmd_reasons)


def _load_runs(paths: list[str]) -> list:
    """Trajectories from an ingested corpus directory or from transcript paths."""
    from pathlib import Path

    from monitor.reading import read_runs

    if len(paths) == 1 and Path(paths[0]).is_dir():
        try:
            from monitor.corpus import is_corpus, load_corpus
        except ImportError:
            pass
        else:
            if is_corpus(paths[0]):
                from monitor.errors import TranscriptError

                try:
                    return list(load_corpus(paths[0]))
                except TranscriptError as e:  # a damaged corpus is a problem (2), not a traceback
                    import sys

                    print(f"error: {e}", file=sys.stderr)
                    raise SystemExit(2) from e
    import sys

    problems: list = []
    runs = list(read_runs([Path(p) for p in paths], problems=problems))
    for prob in problems[:10]:
        print(f"warning: {prob}", file=sys.stderr)
    if len(problems) > 10:
        print(f"warning: ... {len(problems) - 10} more problems", file=sys.stderr)
    return runs


_CHECK_LABELS = {"steps": "turns", "max_error_streak": "error_streak"}


def _cmd_check(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from monitor.errors import FailfastError
    from monitor.halts import TranscriptRule, final_values
    from monitor.normalise import short_call
    from monitor.reading import read_trajectory
    from monitor.signals import SignalTracker

    try:
        traj = read_trajectory(Path(args.transcript), args.format)
    except (FailfastError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    values = final_values(traj)
    tracker = SignalTracker()
    for step in traj.steps:
        tracker.update(step)
    rule = TranscriptRule(
        max_turns=args.max_turns,
        max_repeats=args.max_repeats,
        max_error_streak=args.max_error_streak,
        max_cost_usd=args.max_cost,
    )
    v = values
    print(
        f"turns={int(v['steps'])} tool_calls={int(v['tool_calls'])} "
        f"tool_results={int(v['tool_results'])} max_repeat={int(v['max_repeat'])} "
        f"error_streak={int(v['max_error_streak'])} cost_usd={v['cost_usd']:.2f}"
    )
    if tracker.top_call:
        print(f"most repeated call ({int(v['max_repeat'])}x): {short_call(tracker.top_call)}")
    hits = rule.hits(values)
    if hits:
        reasons = ", ".join(
            f"{h.reason} ({_CHECK_LABELS.get(h.signal, h.signal)}={h.value:g} >= {h.limit:g})"
            for h in hits
        )
        print(f"STOP: {reasons}")
        return 1
    print("CONTINUE: no stop signal")
    return 0


def _cmd_fit_budget(args: argparse.Namespace) -> int:
    from collections import Counter

    import yaml

    from monitor.halts import fit_budget

    runs = _load_runs(args.paths)
    if args.agent:
        runs = [t for t in runs if t.agent == args.agent]
    labels = Counter(
        "resolved" if t.resolved else "unknown" if t.resolved is None else "unresolved"
        for t in runs
    )
    budget, n = fit_budget(runs, quantile=args.quantile)
    print(
        f"runs={len(runs)} "
        + " ".join(f"{k}={labels[k]}" for k in ("resolved", "unresolved", "unknown"))
    )
    if n == 0:
        print("error: no resolved runs to fit on")
        return 2
    caps = budget.model_dump()
    for name, cap in caps.items():
        print(f"{name}={'unset (not reported)' if cap is None else cap}")
    if args.out:
        with open(args.out, "w") as fh:
            yaml.safe_dump({"budget": caps}, fh, sort_keys=False)
        print(f"wrote {args.out}")
    return 0


def _cmd_reasons(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from monitor.config import load_config
    from monitor.errors import FailfastError
    from monitor.flags import fit_scope_caps
    from monitor.policy import PolicyConfig
    from monitor.reasons import (
        format_report,
        is_decision_log,
        outcomes_from_log,
        reason_table,
        replay_runs,
        rows_json,
    )

    logs = [p for p in args.paths if is_decision_log(p)]
    others = [p for p in args.paths if p not in logs]
    outcomes = []
    for p in logs:
        try:
            outcomes += outcomes_from_log(p)
        except FailfastError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if others:
        cfg = load_config(PolicyConfig, args.config, args.override)
        runs = _load_runs(others)
        caps = fit_scope_caps(runs) if args.fit_scope else None
        if caps:
            print("scope caps (p95 files touched by resolved runs): " + json.dumps(caps))
        outcomes += replay_runs(runs, cfg, audit=args.audit, scope_caps=caps)
    rows = reason_table(outcomes, min_runs=args.min_runs)
    print(format_report(outcomes, rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows_json(rows), indent=1))
    return 0


# --- ingest, inspect (readers, labels, corpus) --------------------------------------------


def _register_corpus(sub: argparse._SubParsersAction) -> None:
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

    from monitor.corpus import ingest

    t0 = time.perf_counter()
    try:
        summary = ingest(args.paths, args.out, format=args.format, labels=args.labels)
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary.table())
    links = (
        f", {summary.links_followed} symbolic link(s) followed" if summary.links_followed else ""
    )
    print(f"{summary.runs} runs, {len(summary.problems)} problems{links}, "
          f"{time.perf_counter() - t0:.1f} s -> {args.out}")  # fmt: skip
    if summary.runs == 0:
        print("error: no run could be read", file=sys.stderr)
        return 2
    return 1 if args.strict and summary.problems else 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from monitor.errors import FailfastError
    from monitor.escape import visible
    from monitor.labels import LabelIndex, find_labels_near, load_label
    from monitor.reading import detect, read_trajectory

    try:
        traj = read_trajectory(Path(args.file), args.format)
    except (FailfastError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_path = Path(traj.path or args.file)
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
        verdict, label_file, _ = index.pick(run_path.resolve(), traj.instance_id)
    traj.resolved = verdict
    if args.json:
        print(json.dumps(traj.to_dict(), indent=1, default=str))
        return 0
    estimated = sum(s.tokens_estimated for s in traj.steps)
    label = {True: "resolved", False: "unresolved", None: "unknown"}[verdict]

    def say(line: str) -> None:  # run ids, names and text from the file: never raw control codes
        print(visible(line))

    source_dir = next((p for p in run_path.absolute().parents if p.name == traj.source), None)
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
