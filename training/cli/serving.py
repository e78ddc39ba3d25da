"""`failfast score | serve | hook | watch`: scoring with an exported bundle (serving/), never torch.

Imports at the top stay light; handlers import onnxruntime and the service when they run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING

from monitor.errors import BundleError
from monitor.escape import visible

if TYPE_CHECKING:
    from monitor.thresholds import ThresholdTable
    from serving.runs import RunResult


def _scorer_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument(
        "--bundle",
        required=required,
        help="bundle folder (OUT/bundle of `failfast train` or `demo`, or written by `failfast "
        "export` or `calibrate`)",
    )
    p.add_argument("--int8", action="store_true", help="use the int8 graphs")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads per call")
    p.add_argument(
        "--target", type=float, default=None, help="run-level FPR target (default: bundle's)"
    )
    _pin_arg(p)


def _pin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bundle-sha256",
        default=None,
        metavar="HEX",
        help="refuse the bundle unless its monitor.json has this sha256 (it lists the sha256 of "
        "every other file); see docs/USAGE.md, trust model",
    )
    p.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PUBKEY",
        help="refuse the bundle unless monitor.json.sig is a valid signature by this Ed25519 "
        "public key (failfast keygen; repeat for several keys)",
    )


def _bundle_or_url_args(p: argparse.ArgumentParser) -> None:
    """How a command that takes `--bundle` or `--url` loads the bundle (the hook, supervise)."""
    p.add_argument("--int8", action="store_true", help="use the int8 graphs (--bundle)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads (--bundle)")
    p.add_argument("--target", type=float, default=None, help="run-level FPR target (--bundle)")
    _pin_arg(p)


def _group_args(p: argparse.ArgumentParser) -> None:
    """--agent and --source, as `score`, `watch`, `supervise` and the Claude Code hook take them."""
    p.add_argument(
        "--agent",
        default=None,
        help="agent name the model reads in each window's header (`### agent: NAME`: it changes "
        "the scores) and the threshold group of an agent-keyed bundle (default: the "
        "transcript's)",
    )
    p.add_argument(
        "--source",
        default=None,
        help="threshold group of a source-keyed bundle (the quick and default configs), e.g. the "
        "name given to `failfast calibrate --agent`; scores unchanged (default: the "
        "transcript's source, its folder name for most formats)",
    )


def _limit_args(p: argparse.ArgumentParser) -> None:
    from serving.transcripts import MAX_STEPS, MAX_TRANSCRIPT_BYTES

    p.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_TRANSCRIPT_BYTES,
        help=f"refuse a transcript larger than this once decompressed (default {MAX_TRANSCRIPT_BYTES})",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=MAX_STEPS,
        help=f"refuse a transcript with more steps (default {MAX_STEPS})",
    )


def _load_scorer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from serving.scorer import Scorer

    return Scorer.load(
        args.bundle,
        threads=args.threads,
        int8=args.int8,
        target=args.target,
        sha256=args.bundle_sha256,
        trust=args.trust,
    )


def _read_limited(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The transcript of `args`, within --max-bytes and --max-steps (TranscriptError otherwise)."""
    from monitor.errors import TranscriptTooLarge
    from serving.transcripts import read_transcript

    traj = read_transcript(args.transcript, args.format, max_bytes=args.max_bytes)
    if len(traj.steps) > args.max_steps:
        raise TranscriptTooLarge(
            args.transcript,
            f"{len(traj.steps)} steps, over the limit of {args.max_steps} (--max-steps)",
        )
    return traj


def register(sub: argparse._SubParsersAction) -> None:
    """Add the serving subcommands to the `failfast` parser."""
    from serving.limits import add_flags

    p = sub.add_parser(
        "score",
        help="score a finished or partial transcript with a bundle (exit 1: stop, 2: problem)",
    )
    _scorer_args(p)
    p.add_argument("transcript", help="transcript file or run folder (any supported format)")
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    _group_args(p)
    p.add_argument("--json", action="store_true", help="print JSON (scores, every decision)")
    _limit_args(p)
    p.set_defaults(func=_score)

    p = sub.add_parser("serve", help="HTTP scoring service (FastAPI + uvicorn)")
    _scorer_args(p)
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
    _bundle_or_url_args(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds the whole hook may take, reading the event included; past it the hook "
        "says nothing and the session goes on (default: 5 with --url, 30 with --bundle)",
    )
    _group_args(p)
    _limit_args(p)
    p.set_defaults(func=_hook)

    p = sub.add_parser(
        "watch",
        help="follow a growing transcript; a Decision per step; exit 1 on stop, 2 on a problem",
    )
    _scorer_args(p)
    p.add_argument("transcript", help="transcript file being written")
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    _group_args(p)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    p.add_argument(
        "--idle", type=float, default=300.0, help="exit 0 after this long without growth"
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
    _limit_args(p)
    p.set_defaults(func=_watch)


def _problem(e: BaseException) -> int:
    """Exit code 2 (a monitor problem, never 1: 1 means "stop the run"), with the reason."""
    print(f"error: {visible(e)}", file=sys.stderr)
    return 2


def _score(args: argparse.Namespace) -> int:
    from monitor.errors import TranscriptError
    from serving.runs import score_transcript

    try:
        traj = _read_limited(args)
        if args.agent:
            traj.agent = args.agent
        if args.source:
            traj.source = args.source
        scorer = _load_scorer(args)
        result = score_transcript(scorer, traj)
    except (TranscriptError, BundleError) as e:
        return _problem(e)
    except Exception as e:  # noqa: BLE001 - whatever it is, it must not read as a stop
        logging.getLogger("failfast.score").exception("failfast score failed")
        return _problem(e)
    if args.json:
        out = result.to_dict(all_decisions=True)
        out["calibration"] = scorer.bundle.calibration
        print(json.dumps(out, default=str))
    else:
        group = (
            scorer.bundle.thresholds.group_of(traj.agent, traj.source)
            if scorer.bundle.thresholds
            else ""
        )
        print(  # names from the transcript: control characters shown, never sent raw
            f"run={visible(traj.id)} agent={visible(traj.agent)} source={visible(traj.source)} "
            f"steps={len(traj.steps)} group={visible(group)} "
            f"threshold={_threshold_text(result, scorer.bundle.thresholds)}"
        )
        for k, (s, d) in enumerate(zip(result.scores, result.decisions, strict=True), 1):
            print(f"  k={k:4d} score={s:.3f} {d.action:8s} {visible(d.reason)}")
        final = result.final
        if final.stop:
            print(f"STOP at step {final.step}: {visible(final.reason)}")
        else:
            print(f"CONTINUE: {final.action} ({visible(final.reason)})")
    return 1 if result.stop is not None else 0


def _threshold_text(result: RunResult, table: ThresholdTable | None) -> str:
    """The stop threshold a run used, and where from, in words."""
    src = result.threshold_origin
    if result.scorer != "monitor":  # served by the candidate the group chose (serving.choice)
        src = f"{src}; scored by {result.scorer}, chosen for this group"
    if result.threshold is not None:
        return f"{result.threshold:.3f} ({src})"
    if src == "unknown-group" and table is not None:
        known = ", ".join(sorted(table.groups)) or "none"
        return (
            f"none: no stop by score (unknown-group: the bundle has no thresholds for this "
            f"group; its groups ({table.group_by}): {known}; pass --source/--agent, or "
            "`failfast calibrate` it)"
        )
    if src == "refused":
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
        scorer = _load_scorer(args)
        app = create_app(scorer, cfg, keys=keys)
    except (BundleError, KeyFileError, ValueError, OSError) as e:  # OSError: the decision log
        return _problem(e)
    if keys is not None:
        install_reload(keys)  # SIGHUP; serving.server takes SIGTERM and SIGINT only
    print(  # uvicorn at log level warning says nothing once it is up
        f"failfast serve: listening on http://{args.host}:{args.port} (bundle {scorer.bundle.path}, "
        f"target {scorer.target:g}; API docs at /docs; Ctrl-C stops)",
        flush=True,
    )
    serve(app, cfg, host=args.host, port=args.port)  # SIGTERM: ends within its deadline
    return 0


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
            scorer = _load_scorer(args)
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
        return _problem(e)


def _follow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from monitor.errors import TranscriptError
    from serving.transcripts import check_readable

    try:
        scorer = _load_scorer(args)
        if Path(args.transcript).exists():  # a FIFO or a device will not turn into a transcript
            check_readable(Path(args.transcript))
    except (BundleError, TranscriptError) as e:
        return _problem(e)
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

    from monitor.errors import TranscriptError, TranscriptTooLarge
    from monitor.textio import json_safe
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
        max_bytes=args.max_bytes,
        max_steps=args.max_steps,
        on_replace=args.on_replace,
        on_new_run=new_run,
    )
    last_growth = time.monotonic()
    try:
        while True:
            try:
                decisions = watch.poll()
            except (TranscriptTooLarge, TranscriptReplaced) as e:
                return _problem(e)
            if args.once and watch.traj is None:
                try:  # say why the file could not be read
                    _read_limited(args)
                except TranscriptError as e:
                    return _problem(e)
            for decision in decisions:
                last_growth = time.monotonic()
                print(json.dumps(json_safe(decision.to_dict())), flush=True)
                if decision.stop:
                    return 1
            if args.once or time.monotonic() - last_growth > args.idle:
                return 0
            time.sleep(args.interval)
    finally:
        watch.end()
