"""`failfast score | serve | hook | watch`: scoring with an exported bundle (serving/), never torch.

Imports at the top stay light; handlers import onnxruntime and the service when they run.
"""

from __future__ import annotations

import argparse
import json
import sys

from monitor.errors import BundleError


def _scorer_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--bundle", required=required, help="bundle folder written by `failfast export`")
    p.add_argument("--int8", action="store_true", help="use the int8 graphs")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads per call")
    p.add_argument(
        "--target", type=float, default=None, help="run-level FPR target (default: bundle's)"
    )


def _load_scorer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from serving.scorer import Scorer

    return Scorer.load(args.bundle, threads=args.threads, int8=args.int8, target=args.target)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the serving subcommands to the `failfast` parser."""
    p = sub.add_parser("score", help="score a finished or partial transcript with a bundle")
    _scorer_args(p)
    p.add_argument("transcript", help="transcript file or run folder (any supported format)")
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    p.add_argument(
        "--agent", default=None, help="agent family for thresholds (default: the transcript's)"
    )
    p.add_argument("--json", action="store_true", help="print JSON (scores, every decision)")
    p.set_defaults(func=_score)

    p = sub.add_parser("serve", help="HTTP scoring service (FastAPI + uvicorn)")
    _scorer_args(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-body-bytes", type=int, default=None, help="largest request body")
    p.add_argument("--max-steps", type=int, default=None, help="most steps per session")
    p.add_argument("--max-sessions", type=int, default=None, help="most open sessions")
    p.add_argument("--idle-seconds", type=float, default=None, help="idle sessions expire after")
    p.add_argument("--max-concurrent", type=int, default=None, help="model calls at once")
    p.set_defaults(func=_serve)

    p = sub.add_parser("hook", help="harness hooks (claude-code: a Claude Code command hook)")
    p.add_argument("harness", choices=["claude-code"], help="which harness calls the hook")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--bundle", help="bundle folder (loaded, and the model started, per event)")
    src.add_argument(
        "--url", help="a running `failfast serve`, e.g. http://127.0.0.1:8000 (no model load)"
    )
    p.add_argument("--int8", action="store_true", help="use the int8 graphs (--bundle)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads (--bundle)")
    p.add_argument("--target", type=float, default=None, help="run-level FPR target (--bundle)")
    p.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the service (--url)"
    )
    p.set_defaults(func=_hook)

    p = sub.add_parser(
        "watch", help="follow a growing transcript; a Decision per step; exit 1 on stop"
    )
    _scorer_args(p)
    p.add_argument("transcript", help="transcript file being written")
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    p.add_argument("--agent", default=None, help="agent family for thresholds")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    p.add_argument(
        "--idle", type=float, default=300.0, help="exit 0 after this long without growth"
    )
    p.add_argument("--once", action="store_true", help="process what is there now and exit")
    p.set_defaults(func=_watch)


def _score(args: argparse.Namespace) -> int:
    from monitor.errors import TranscriptError
    from serving.runs import score_transcript
    from serving.transcripts import read_transcript

    try:
        traj = read_transcript(args.transcript, args.format)
    except TranscriptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.agent:
        traj.agent = args.agent
    try:
        scorer = _load_scorer(args)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = score_transcript(scorer, traj)
    if args.json:
        print(json.dumps(result.to_dict(all_decisions=True), default=str))
    else:
        thr = "none (warn only)" if result.threshold is None else f"{result.threshold:.3f}"
        print(
            f"run={traj.id} agent={traj.agent} steps={len(traj.steps)} threshold={thr} ({result.threshold_source})"
        )
        for k, (s, d) in enumerate(zip(result.scores, result.decisions, strict=True), 1):
            print(f"  k={k:4d} score={s:.3f} {d.action:8s} {d.reason}")
        final = result.final
        if final.stop:
            print(f"STOP at step {final.step}: {final.reason}")
        else:
            print(f"CONTINUE: {final.action} ({final.reason})")
    return 1 if result.stop is not None else 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from serving.app import ServiceConfig, create_app

    limits = {
        "max_body_bytes": args.max_body_bytes,
        "max_steps": args.max_steps,
        "max_sessions": args.max_sessions,
        "session_idle_seconds": args.idle_seconds,
        "max_concurrent": args.max_concurrent,
    }
    cfg = ServiceConfig(**{k: v for k, v in limits.items() if v is not None})
    try:
        scorer = _load_scorer(args)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    app = create_app(scorer, cfg)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _hook(args: argparse.Namespace) -> int:
    import logging

    from serving.hooks.claude_code import read_event, run_hook

    try:
        event = read_event(sys.stdin.read())
        scorer = None if args.url else _load_scorer(args)
    except Exception as e:  # a broken monitor never blocks the session: exit 0, say why
        logging.getLogger("failfast.hook").error("failfast hook: monitor_error: %s", e)
        return 0
    out = run_hook(event, scorer, url=args.url, timeout=args.timeout)
    if out:
        print(json.dumps(out))
    return 0


def _watch(args: argparse.Namespace) -> int:
    import time

    from monitor.errors import TranscriptError
    from monitor.textio import json_safe
    from serving.transcripts import read_transcript

    try:  # exit 2, never 1: a broken monitor must not read as a predicted failure
        scorer = _load_scorer(args)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    session = None
    seen = 0
    last_growth = time.monotonic()
    while True:
        try:
            traj = read_transcript(args.transcript, args.format)
        except TranscriptError as e:
            traj = None
            if args.once:
                print(f"error: {e}", file=sys.stderr)
                return 2
        if traj is not None:
            if session is None:
                session = scorer.session(traj.task, args.agent or traj.agent or None, run=traj.id)
            for step in traj.steps[seen:]:
                decision = session.observe(step)
                seen += 1
                last_growth = time.monotonic()
                print(json.dumps(json_safe(decision.to_dict())), flush=True)
                if decision.stop:
                    return 1
        if args.once or time.monotonic() - last_growth > args.idle:
            return 0
        time.sleep(args.interval)
