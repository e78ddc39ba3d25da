"""`failfast check | fit-budget | reasons`: the light core (monitor/), no model (ingest and
inspect: training/cli/corpus.py).

Imports at the top stay light; handlers import what they need.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the monitor subcommands to the `failfast` parser."""
    _register_halts(sub)


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
    if not runs:  # nothing to report on: a missing path or an empty folder is a usage problem
        print(f"error: no run could be read from {' '.join(paths)}", file=sys.stderr)
        raise SystemExit(2)
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
        from monitor.atomic import atomic_write_text
        from monitor.textio import json_safe

        atomic_write_text(args.json, json.dumps(json_safe(rows_json(rows)), indent=1) + "\n")
    return 0
