"""`failfast score | serve`: scoring with an exported bundle (serving/), never torch.

Imports at the top stay light; handlers import onnxruntime and the service when they run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING

from monitor.errors import BundleError
from monitor.escape import visible
from monitor.textio import json_safe
from monitor.thresholds import target_key
from training.cli.scorer_args import (
    limit_args,
    load_scorer,
    problem,
    read_limited,
    scorer_args,
    transcript_args,
)

if TYPE_CHECKING:
    from monitor.thresholds import ThresholdTable
    from serving.runs import RunResult


def register(sub: argparse._SubParsersAction) -> None:
    """Add the serving subcommands to the `failfast` parser."""
    from serving.limits import add_flags

    p = sub.add_parser(
        "score",
        help="score a finished or partial transcript with a bundle (exit 1: stop, 2: problem)",
    )
    transcript_args(p, "transcript file or run folder (any supported format)")
    p.add_argument("--json", action="store_true", help="print JSON (scores, every decision)")
    limit_args(p)
    p.set_defaults(func=_score)

    p = sub.add_parser("serve", help="HTTP scoring service (FastAPI + uvicorn)")
    scorer_args(p)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; one that is not loopback needs --api-key-file (or --insecure-open)",
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="API keys, one per line: KEY [SCOPES [NAME]], scopes of score,verdict,admin "
        "(default score); mode 600; every /v1 call and /metrics then needs "
        "`Authorization: Bearer KEY`; reloaded on SIGHUP (docs/USAGE.md, trust model)",
    )
    p.add_argument(
        "--insecure-open",
        action="store_true",
        help="allow a non-loopback --host without --api-key-file (a proxy in front authenticates)",
    )
    add_flags(p)  # one flag per ServiceConfig limit
    p.set_defaults(func=_serve)


def _score(args: argparse.Namespace) -> int:
    from monitor.errors import TranscriptError
    from serving.runs import score_transcript

    try:
        traj = read_limited(args)
        if args.agent:
            traj.agent = args.agent
        if args.source:
            traj.source = args.source
        if args.instance_id:
            traj.instance_id = args.instance_id
        scorer = load_scorer(args)
        result = score_transcript(scorer, traj)
    except (TranscriptError, BundleError) as e:
        return problem(e)
    except Exception as e:  # noqa: BLE001 - whatever it is, it must not read as a stop
        logging.getLogger("failfast.score").exception("failfast score failed")
        return problem(e)
    if args.json:
        out = result.to_dict(all_decisions=True)
        out["calibration"] = scorer.bundle.calibration
        print(json.dumps(json_safe(out), default=str))  # strict JSON: no threshold is null
    else:
        group = result.group  # as served (serving.runs: the bundle's group rule)
        print(  # names from the transcript: control characters shown, never sent raw
            f"run={visible(traj.id)} agent={visible(traj.agent)} source={visible(traj.source)} "
            f"steps={len(traj.steps)} group={visible(group)} "
            f"threshold={_threshold_text(result, scorer.bundle.thresholds, scorer.target)}"
        )
        for k, (s, d) in enumerate(zip(result.scores, result.decisions, strict=True), 1):
            print(f"  k={k:4d} score={_num(s)} {d.action:8s} {visible(d.reason)}")
        final = result.final
        if final.stop:
            print(f"STOP at step {final.step}: {visible(final.reason)}")
        else:
            print(f"CONTINUE: {final.action} ({visible(final.reason)})")
    return 1 if result.stop is not None else 0


def _num(x: float) -> str:
    """A score or threshold as text: 3 decimals, or 3 significant digits below 0.01 (a score
    of 0.00016 against a threshold of 0.00155 must not read as 0.000 against 0.002)."""
    return f"{x:.3g}" if x == x and 0 < abs(x) < 0.01 else f"{x:.3f}"


def _threshold_text(result: RunResult, table: ThresholdTable | None, target: float) -> str:
    """The stop threshold a run used, and where from, in words."""
    src = result.threshold_origin
    if result.scorer != "monitor":  # served by the candidate the group chose (serving.choice)
        src = f"{src}; scored by {result.scorer}, chosen for this group"
    if result.threshold is not None:
        return f"{_num(result.threshold)} ({src})"
    if src == "unknown-group" and table is not None:
        known = ", ".join(sorted(table.groups)) or "none"
        return (
            f"none: no stop by score (unknown-group: the bundle has no thresholds for this "
            f"group; its groups ({table.group_by}): {known}; pass --source/--agent, or "
            "`failfast calibrate` it)"
        )
    if src == "refused":
        own = table.groups.get(result.group) if table is not None else None
        entry = own.stop.get(target_key(target)) if own is not None else None
        if own is not None and entry is None:  # never asked of this group, not refused by it
            fitted = ", ".join(sorted(own.stop, key=float)) or "none"
            return (
                f"none: no stop by score (the group was not calibrated at the target {target:g}; "
                f"its targets: {fitted}; `failfast calibrate --target-fpr {target:g}` fits it)"
            )
        if entry is not None and entry.refused:  # it says what it needs: "needs at least ..."
            return f"none: no stop by score (refused: {entry.refused})"
        return "none: no stop by score (refused: too few resolved calibration runs to certify the target)"
    return f"none: no stop by score ({src})"


def _serve(args: argparse.Namespace) -> int:
    from serving.app import create_app
    from serving.keys import KeyFileError, KeyRing, check_bind, install_reload
    from serving.limits import from_flags
    from serving.server import serve

    try:  # the keys and the address are checked before the bundle loads and long before binding
        keys = KeyRing(args.api_key_file) if args.api_key_file else None
        check_bind(args.host, keys=keys is not None, insecure_open=args.insecure_open)
        cfg = from_flags(args)
        scorer = load_scorer(args)
        app = create_app(scorer, cfg, keys=keys)
    except (BundleError, KeyFileError, ValueError, OSError) as e:  # OSError: the decision log
        return problem(e)
    if keys is not None:
        install_reload(keys)  # SIGHUP; serving.server takes SIGTERM and SIGINT only

    def ready(port: int) -> None:  # bound: uvicorn at log level warning says nothing once up
        print(
            f"failfast serve: listening on http://{args.host}:{port} (bundle "
            f"{scorer.bundle.path}, target {scorer.target:g}; API docs at /docs; Ctrl-C stops)",
            flush=True,
        )

    try:
        serve(app, cfg, host=args.host, port=args.port, ready=ready)  # SIGTERM: its deadline
    except OSError as e:  # the address: in use, or not this machine's
        print(f"failfast serve: {e}", file=sys.stderr)
        return 2
    return 0
