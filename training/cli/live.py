"""`failfast hook | watch`: the monitor inside a running harness (a Claude Code hook, a
transcript being written), with an exported bundle, never torch.

Imports at the top stay light; handlers import onnxruntime and the service when they run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from monitor.errors import BundleError
from training.cli.scorer_args import (
    bundle_or_url_args,
    group_args,
    limit_args,
    load_scorer,
    problem,
    read_limited,
    transcript_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `hook` and `watch` subcommands to the `failfast` parser."""
    p = sub.add_parser(
        "hook",
        help="harness hooks (claude-code: a Claude Code command hook)",
        description=(
            "A Claude Code command hook: reads one hook event (JSON: session_id, "
            "transcript_path, hook_event_name, tool_name, ...) on stdin, scores the session's "
            "transcript (the JSONL log transcript_path names), and answers on stdout: nothing "
            'to go on, {"systemMessage"} on a warning, {"continue": false, "stopReason"} (and '
            "a denied tool call on PreToolUse) on a stop, with the restart packet written "
            "beside the transcript. Always exits 0; a broken monitor says nothing and logs "
            "monitor_error on stderr. docs/USAGE.md, 'Wire a harness'."
        ),
    )
    p.add_argument(
        "harness",
        choices=["claude-code"],
        help="which harness calls the hook (claude-code: the only one so far)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--bundle", help="bundle folder (loaded, and the model started, per event)")
    src.add_argument(
        "--url",
        help="a running `failfast serve`, e.g. http://127.0.0.1:8000 (no model load); sends "
        "$FAILFAST_API_KEY as its key when set",
    )
    bundle_or_url_args(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds the whole hook may take, reading the event included; past it the hook "
        "says nothing and the session goes on (default: 5 with --url, 30 with --bundle)",
    )
    group_args(p)
    limit_args(p)
    p.set_defaults(func=_hook)

    p = sub.add_parser(
        "watch",
        help="follow a growing transcript; a Decision per step; exit 1 on stop, 2 on a problem",
    )
    transcript_args(p, "transcript file being written")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    p.add_argument(
        "--idle",
        type=float,
        default=300.0,
        help="exit 0 after this long without growth (2 when nothing was ever readable)",
    )
    p.add_argument("--once", action="store_true", help="process what is there now and exit")
    p.add_argument(
        "--on-replace",
        choices=["new", "stop"],
        default="new",
        help="when the file is truncated or replaced by another run (inode, size, first line): "
        "end the run and score the new one as a new run (new), or exit 2 (stop)",
    )
    p.add_argument(
        "--decision-log",
        default=None,
        metavar="FILE",
        help="append the decisions and, when the watch ends, the run's end record (per-step "
        "scores and tokens) to FILE as JSON lines; `failfast calibrate --data FILE --verdicts V` "
        "reads it",
    )
    limit_args(p)
    p.set_defaults(func=_watch)


def _hook(args: argparse.Namespace) -> int:
    """Always exit 0 (Claude Code reads exit 2 as "block the tool call"): answers go to stdout.

    So a bundle refused by --trust or --bundle-sha256 is a monitor_error on stderr, not exit 2:
    the hook then runs the model-free halts (under the default policy with --trust)."""
    from monitor.policy import PolicyConfig
    from serving.bundle import read_policy
    from serving.hooks.claude_code import run_hook
    from serving.hooks.stdin import STDIN_SECONDS, read_event_within

    log = logging.getLogger("failfast.hook")
    t0 = time.monotonic()
    timeout = args.timeout if args.timeout is not None else (5.0 if args.url else 30.0)
    try:  # stdin left open after the event must not hold the hook
        event = read_event_within(sys.stdin.buffer, min(timeout, STDIN_SECONDS))
    except Exception as e:  # a broken monitor never blocks the session: exit 0, say why
        log.error("failfast hook: monitor_error: %s", e)
        return 0
    scorer, policy = None, None
    if not args.url:
        try:
            scorer = load_scorer(args)
        except Exception as e:  # noqa: BLE001 - the model-free halts still run
            log.error("failfast hook: monitor_error: %s; model-free halts only", e)
            # with --trust nothing of an untrusted bundle applies, its budgets neither
            policy = PolicyConfig.model_validate({} if args.trust else read_policy(args.bundle))
    out = run_hook(
        event,
        scorer,
        url=args.url,
        timeout=max(0.1, round(t0 + timeout - time.monotonic(), 1)),  # what is left of it
        deadline=t0 + timeout,
        policy=policy,
        max_bytes=args.max_bytes,
        max_steps=args.max_steps,
        agent=args.agent,
        source=args.source,
        instance_id=args.instance_id,
    )
    if out:
        print(json.dumps(out))
    return 0


def _watch(args: argparse.Namespace) -> int:
    """Exit 1 only on a stop decision; every problem of the monitor itself exits 2."""
    try:
        return _follow(args)
    except Exception as e:  # noqa: BLE001 - a broken monitor must not read as a stop
        logging.getLogger("failfast.watch").exception("failfast watch failed")
        return problem(e)


def _follow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from monitor.errors import TranscriptError
    from serving.transcripts import check_readable

    try:
        scorer = load_scorer(args)
        if Path(args.transcript).exists():  # a FIFO or a device will not turn into a transcript
            check_readable(Path(args.transcript))
    except (BundleError, TranscriptError) as e:
        return problem(e)
    monitor = _watch_monitor(scorer, args.decision_log)
    try:
        return _poll(args, monitor)
    finally:
        if monitor.log.sink is not None:
            monitor.log.sink.close()


def _watch_monitor(scorer, decision_log):  # type: ignore[no-untyped-def]
    from monitor.decision_log import DecisionLog
    from monitor.policy import PolicyConfig
    from monitor.session import Monitor
    from serving.bundle import start_record

    log = DecisionLog.append_to(decision_log, start_record(scorer) if decision_log else None)
    return Monitor(PolicyConfig.model_validate(scorer.policy), scorer=scorer, log=log)


def _poll(args: argparse.Namespace, monitor) -> int:  # type: ignore[no-untyped-def]
    """Read the transcript every --interval seconds; a decision per new step (the end record is
    logged when the watch ends). A replaced or truncated file starts a new run (serving.watch)."""
    import time
    from pathlib import Path

    from monitor.errors import TranscriptError, TranscriptTooLarge
    from monitor.textio import json_safe
    from serving.run_identity import written_bytes
    from serving.watch import TranscriptReplaced, TranscriptWatch

    def new_run(run: str, why: str) -> None:
        if why:
            print(f"failfast watch: {why}; new run {run!r}", file=sys.stderr, flush=True)

    watch = TranscriptWatch(
        args.transcript,
        monitor,
        fmt=args.format,
        agent=args.agent,
        source=args.source,
        instance_id=args.instance_id,
        max_bytes=args.max_bytes,
        max_steps=args.max_steps,
        on_replace=args.on_replace,
        on_new_run=new_run,
    )
    last_growth = time.monotonic()
    size = -1
    try:
        while True:
            # the file (or a run folder's files) growing counts as life, scored or not (a held
            # call makes no decision)
            now_size = written_bytes(Path(args.transcript))
            if now_size != size:
                size, last_growth = now_size, time.monotonic()
            # --once, or quiet for --idle seconds: the run is over, a last call is scored as is
            final = args.once or time.monotonic() - last_growth > args.idle
            try:
                decisions = watch.poll(final=final)
            except (TranscriptTooLarge, TranscriptReplaced) as e:
                return problem(e)
            if args.once and watch.traj is None:
                try:  # say why the file could not be read
                    read_limited(args)
                except TranscriptError as e:
                    return problem(e)
            for decision in decisions:
                last_growth = time.monotonic()
                print(json.dumps(json_safe(decision.to_dict())), flush=True)
                if decision.stop:
                    return 1
            if final:
                if watch.traj is None and not watch.runs:  # nothing to watch ever came
                    why = (
                        "does not exist"
                        if not Path(args.transcript).exists()
                        else "was never readable as a transcript"
                    )
                    print(
                        f"failfast watch: {args.transcript} {why} within --idle "
                        f"{args.idle:g} s; nothing was scored",
                        file=sys.stderr,
                    )
                    return 2
                return 0
            time.sleep(args.interval)
    finally:
        watch.end()
